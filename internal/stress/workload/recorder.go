package workload

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
)

// RPC names as the report shows them.
const (
	RPCCreate = "CreateVolume"
	RPCDelete = "DeleteVolume"
)

// Call is one RPC as the client saw it.
type Call struct {
	RPC     string
	Start   time.Duration // since the recorder started
	Latency time.Duration
	Code    codes.Code
	Attempt int // 1 for the first call of an operation, >1 for retries
}

// Op is one provisioner operation from its first call to its final answer:
// what a user waits for.
type Op struct {
	RPC      string
	Start    time.Duration
	Latency  time.Duration
	Attempts int
	Code     codes.Code // the final answer
}

// Event is a moment worth marking on the timeline (a phase, a driver kill).
type Event struct {
	At   time.Duration
	Kind string
	Note string
}

// Recorder collects calls, operations and events from many goroutines.
type Recorder struct {
	start  time.Time
	mu     sync.Mutex
	calls  []Call
	ops    []Op
	events []Event
}

// NewRecorder starts the clock.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Started is when the clock started.
func (r *Recorder) Started() time.Time { return r.start }

// Since is the time on the recorder's clock.
func (r *Recorder) Since(t time.Time) time.Duration { return t.Sub(r.start) }

// Call records one RPC.
func (r *Recorder) Call(rpc string, start time.Time, latency time.Duration, code codes.Code, attempt int) {
	c := Call{RPC: rpc, Start: r.Since(start), Latency: latency, Code: code, Attempt: attempt}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

// Op records one finished operation.
func (r *Recorder) Op(rpc string, start time.Time, attempts int, code codes.Code) {
	o := Op{RPC: rpc, Start: r.Since(start), Latency: time.Since(start), Attempts: attempts, Code: code}
	r.mu.Lock()
	r.ops = append(r.ops, o)
	r.mu.Unlock()
}

// Event marks a moment.
func (r *Recorder) Event(kind, note string) {
	e := Event{At: time.Since(r.start), Kind: kind, Note: note}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Snapshot copies what was recorded so far, calls and ops in start order.
func (r *Recorder) Snapshot() (calls []Call, ops []Op, events []Event) {
	r.mu.Lock()
	calls, ops, events = slices.Clone(r.calls), slices.Clone(r.ops), slices.Clone(r.events)
	r.mu.Unlock()
	slices.SortStableFunc(calls, func(a, b Call) int { return cmp.Compare(a.Start, b.Start) })
	slices.SortStableFunc(ops, func(a, b Op) int { return cmp.Compare(a.Start, b.Start) })
	return calls, ops, events
}
