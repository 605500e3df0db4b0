package emulator

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Op names an API operation: EFS's (and STS AssumeRole) as in its API
// reference, S3 Files' as "S3Files." and the name in its reference
// (OpS3CreateAccessPoint, ...).
type Op string

// The operations the emulator serves.
const (
	OpCreateAccessPoint    Op = "CreateAccessPoint"
	OpDescribeAccessPoints Op = "DescribeAccessPoints"
	OpDeleteAccessPoint    Op = "DeleteAccessPoint"
	OpCreateFileSystem     Op = "CreateFileSystem"
	OpDescribeFileSystems  Op = "DescribeFileSystems"
	OpDeleteFileSystem     Op = "DeleteFileSystem"
	OpCreateMountTarget    Op = "CreateMountTarget"
	OpDescribeMountTargets Op = "DescribeMountTargets"
	OpDeleteMountTarget    Op = "DeleteMountTarget"
	OpTagResource          Op = "TagResource"
	OpUntagResource        Op = "UntagResource"
	OpListTagsForResource  Op = "ListTagsForResource"
	// OpAssumeRole is STS's AssumeRole, served on the same listener.
	OpAssumeRole Op = "AssumeRole"

	// AllOps, given to SetFault, sets the fault on every operation (each
	// keeps its own throttle bucket).
	AllOps Op = "*"
)

// Ops lists every operation the emulator serves: EFS's, then S3 Files'.
func Ops() []Op {
	return append([]Op{
		OpCreateAccessPoint, OpDescribeAccessPoints, OpDeleteAccessPoint,
		OpCreateFileSystem, OpDescribeFileSystems, OpDeleteFileSystem,
		OpCreateMountTarget, OpDescribeMountTargets, OpDeleteMountTarget,
		OpTagResource, OpUntagResource, OpListTagsForResource, OpAssumeRole,
	}, s3Ops()...)
}

func (op Op) valid() bool {
	for _, o := range Ops() {
		if o == op {
			return true
		}
	}
	return false
}

// LostMode says how a lost answer reaches the client.
type LostMode string

const (
	LostMixed LostMode = ""     // either, at random
	Lost500   LostMode = "500"  // an InternalServerError answer
	LostDrop  LostMode = "drop" // the connection closes without an answer
)

// Fault is the misbehaviour of one operation. The zero Fault is none.
// Faults apply in this order, the first that strikes answering: latency,
// random throttle, throttle (token bucket), error, (the operation), lost
// answer. Each probability is drawn on its own, so a rate is the share of
// the requests that reach its step: with RandomThrottleRate 0.05 and
// ErrorRate 0.03, 5% of all requests are throttled and 3% of the other 95%
// fail.
type Fault struct {
	// Latency, plus a uniform random 0..Jitter, delays every answer.
	Latency time.Duration
	Jitter  time.Duration
	// RandomThrottleRate is the probability of ThrottlingException 429
	// (the token bucket's very answer) without applying the request,
	// whatever the request rate; such a request takes no token.
	RandomThrottleRate float64
	// ThrottleRate requests per second pass a token bucket of ThrottleBurst
	// (0 means max(1, ceil(rate))); the rest get ThrottlingException 429.
	// 0 means no throttle.
	ThrottleRate  float64
	ThrottleBurst int
	// ErrorRate is the probability of InternalServerError 500 without
	// applying the request.
	ErrorRate float64
	// LostAnswerRate is the probability that a successful request is
	// applied and committed, and then its answer is lost as LostAnswerMode
	// says: the case that makes a retry dangerous.
	LostAnswerRate float64
	LostAnswerMode LostMode
	// VisibilityDelay (CreateAccessPoint and S3Files.CreateAccessPoint only)
	// hides a new access point from DescribeAccessPoints, GetAccessPoint and
	// listings for this long.
	VisibilityDelay time.Duration
}

// Validate reports a fault that cannot be applied.
func (f Fault) Validate() error {
	switch {
	case f.Latency < 0 || f.Jitter < 0 || f.VisibilityDelay < 0:
		return fmt.Errorf("durations must not be negative")
	case f.ThrottleRate < 0 || f.ThrottleBurst < 0:
		return fmt.Errorf("throttle rate and burst must not be negative")
	case !probability(f.RandomThrottleRate) || !probability(f.ErrorRate) || !probability(f.LostAnswerRate):
		return fmt.Errorf("rates must be between 0 and 1")
	case f.LostAnswerMode != LostMixed && f.LostAnswerMode != Lost500 && f.LostAnswerMode != LostDrop:
		return fmt.Errorf("lost answer mode %q: want %q, %q or empty", f.LostAnswerMode, Lost500, LostDrop)
	}
	return nil
}

func probability(p float64) bool { return p >= 0 && p <= 1 }

// Refine returns f with the aspects g sets (a latency with its jitter, a
// random throttle, a token bucket with its burst, an error rate, a lost
// answer rate with its mode, a visibility delay) in place of f's: a fault
// named for one operation added to the fault of every operation ("*"),
// much as a later flag for one operation refines "*" on the command line.
func (f Fault) Refine(g Fault) Fault {
	if g.Latency != 0 || g.Jitter != 0 {
		f.Latency, f.Jitter = g.Latency, g.Jitter
	}
	if g.RandomThrottleRate != 0 {
		f.RandomThrottleRate = g.RandomThrottleRate
	}
	if g.ThrottleRate != 0 {
		f.ThrottleRate, f.ThrottleBurst = g.ThrottleRate, g.ThrottleBurst
	}
	if g.ErrorRate != 0 {
		f.ErrorRate = g.ErrorRate
	}
	if g.LostAnswerRate != 0 {
		f.LostAnswerRate, f.LostAnswerMode = g.LostAnswerRate, g.LostAnswerMode
	}
	if g.VisibilityDelay != 0 {
		f.VisibilityDelay = g.VisibilityDelay
	}
	return f
}

// opFault is a fault with its throttle bucket.
type opFault struct {
	Fault
	bucket *rate.Limiter // nil: no throttle
}

func newOpFault(f Fault) *opFault {
	of := &opFault{Fault: f}
	if f.ThrottleRate > 0 {
		burst := f.ThrottleBurst
		if burst == 0 {
			burst = max(1, int(f.ThrottleRate+0.999999))
		}
		of.bucket = rate.NewLimiter(rate.Limit(f.ThrottleRate), burst)
	}
	return of
}

// faults holds the per-operation faults; safe for concurrent use.
type faults struct {
	mu sync.RWMutex
	by map[Op]*opFault
}

func (fs *faults) set(op Op, f Fault) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.by == nil {
		fs.by = map[Op]*opFault{}
	}
	ops := []Op{op}
	if op == AllOps {
		ops = Ops()
	}
	for _, o := range ops {
		if f == (Fault{}) {
			delete(fs.by, o)
		} else {
			fs.by[o] = newOpFault(f)
		}
	}
}

// setAll sets each fault of set; AllOps first, so that a fault named for one
// operation replaces it there.
func (fs *faults) setAll(set map[Op]Fault) {
	if f, ok := set[AllOps]; ok {
		fs.set(AllOps, f)
	}
	for op, f := range set {
		if op != AllOps {
			fs.set(op, f)
		}
	}
}

// validateFaults checks every operation name and fault of set.
func validateFaults(set map[Op]Fault) error {
	for op, f := range set {
		if op != AllOps && !op.valid() {
			return fmt.Errorf("fault for unknown operation %q", op)
		}
		if err := f.Validate(); err != nil {
			return fmt.Errorf("fault for %s: %w", op, err)
		}
	}
	return nil
}

func (fs *faults) get(op Op) *opFault {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	return fs.by[op]
}

func (fs *faults) snapshot() map[Op]Fault {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	out := make(map[Op]Fault, len(fs.by))
	for op, f := range fs.by {
		out[op] = f.Fault
	}
	return out
}

func (fs *faults) reset() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.by = nil
}

// lockedRand is the emulator's one source of randomness (IDs, jitter, fault
// rates), seedable so that a test run can be repeated.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newLockedRand(seed int64) *lockedRand {
	if seed == 0 {
		seed = rand.Int64()
	}
	return &lockedRand{r: rand.New(rand.NewPCG(uint64(seed), uint64(seed)>>32|1))}
}

func (l *lockedRand) float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

// chance is true with probability p (exactly never at 0, always at 1).
func (l *lockedRand) chance(p float64) bool {
	return p > 0 && (p >= 1 || l.float64() < p)
}

func (l *lockedRand) duration(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Duration(l.r.Int64N(int64(d) + 1))
}

// hex returns n random lower-case hex digits.
func (l *lockedRand) hex(n int) string {
	b := make([]byte, (n+1)/2)
	l.mu.Lock()
	for i := range b {
		b[i] = byte(l.r.Uint32())
	}
	l.mu.Unlock()
	return hex.EncodeToString(b)[:n]
}
