package workload

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// stub is a CSI controller whose answers each test scripts. It counts calls
// per volume name and per volume ID, and serves over a real unix socket so
// that timeouts and cancellations travel as they do to the real driver.
type stub struct {
	csi.UnimplementedControllerServer
	mu      sync.Mutex
	creates map[string]int // calls per name
	deletes map[string]int // calls per volume ID
	create  func(ctx context.Context, name string, n int) (string, error)
	del     func(ctx context.Context, id string, n int) error
}

func (s *stub) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	s.mu.Lock()
	s.creates[req.Name]++
	n := s.creates[req.Name]
	s.mu.Unlock()
	id, err := s.create(ctx, req.Name, n)
	if err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: id}}, nil
}

func (s *stub) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	s.mu.Lock()
	s.deletes[req.VolumeId]++
	n := s.deletes[req.VolumeId]
	s.mu.Unlock()
	if s.del != nil {
		if err := s.del(ctx, req.VolumeId, n); err != nil {
			return nil, err
		}
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (s *stub) deleteCalls(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deletes[id]
}

func (s *stub) createCalls(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creates[name]
}

// idOf is the stub's volume ID for a name: a deterministic answer, as a
// correct driver gives.
func idOf(name string) string { return "efs:fs-1::fsap-" + name }

// serve starts s on a unix socket and returns a client connected to it.
func serve(t *testing.T, s *stub) Client {
	t.Helper()
	if s.creates == nil {
		s.creates, s.deletes = map[string]int{}, map[string]int{}
	}
	dir, err := os.MkdirTemp("", "wl") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "csi.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterControllerServer(srv, s)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return csi.NewControllerClient(conn)
}

func fastConfig(n int) Config {
	return Config{Volumes: n, Concurrency: 4, Timeout: 5 * time.Second, Seed: 1,
		Backoff: Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Factor: 2}}
}

func TestBackoffGrowsExponentiallyUpToMaxWithJitterInUpperHalf(t *testing.T) {
	b := Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond, Factor: 2}
	for _, tc := range []struct {
		failures int
		jitter   float64
		want     time.Duration
	}{
		{1, 0, 5 * time.Millisecond},
		{1, 0.999999, 10 * time.Millisecond},
		{2, 0, 10 * time.Millisecond},
		{3, 1, 40 * time.Millisecond},
		{4, 0.5, 60 * time.Millisecond},
		{5, 1, 100 * time.Millisecond}, // 160 ms capped
		{60, 0, 50 * time.Millisecond}, // no overflow far out
		{0, 1, 10 * time.Millisecond},  // treated as the first failure
	} {
		got := b.Delay(tc.failures, tc.jitter)
		if diff := got - tc.want; diff < -time.Microsecond || diff > time.Microsecond {
			t.Errorf("Delay(%d, %v) = %v, want %v", tc.failures, tc.jitter, got, tc.want)
		}
	}
}

func TestCreateOutcomeFollowsTheProvisioner(t *testing.T) {
	for _, tc := range []struct {
		code codes.Code
		want Outcome
	}{
		{codes.OK, Done},
		{codes.Aborted, RetryInBackground},
		{codes.Unavailable, RetryInBackground},
		{codes.DeadlineExceeded, RetryInBackground},
		{codes.Canceled, RetryInBackground},
		{codes.ResourceExhausted, Final}, // "the operation was not started"
		{codes.InvalidArgument, Final},
		{codes.AlreadyExists, Final},
		{codes.Internal, Final},
		{codes.Unknown, Final},
	} {
		if got := CreateOutcome(tc.code); got != tc.want {
			t.Errorf("CreateOutcome(%v) = %v, want %v", tc.code, got, tc.want)
		}
	}
}

func TestCreateRetriesRetryableCodesUntilAFinalAnswer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answers   []codes.Code // per attempt; the last repeats
		wantState State
		wantCalls int
	}{
		{"ok at once", []codes.Code{codes.OK}, Live, 1},
		{"aborted, unavailable, then ok", []codes.Code{codes.Aborted, codes.Unavailable, codes.OK}, Live, 3},
		{"deadline and cancel are retried", []codes.Code{codes.DeadlineExceeded, codes.Canceled, codes.OK}, Live, 3},
		{"invalid argument is final", []codes.Code{codes.InvalidArgument}, Failed, 1},
		{"resource exhausted is final", []codes.Code{codes.Aborted, codes.ResourceExhausted}, Failed, 2},
		{"already exists is final", []codes.Code{codes.AlreadyExists}, Failed, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &stub{create: func(_ context.Context, name string, n int) (string, error) {
				c := tc.answers[min(n, len(tc.answers))-1]
				if c == codes.OK {
					return idOf(name), nil
				}
				return "", status.Error(c, "scripted")
			}}
			e, err := New(serve(t, s), fastConfig(1))
			if err != nil {
				t.Fatal(err)
			}
			if err := e.CreatePhase(context.Background()); err != nil {
				t.Fatal(err)
			}
			r := e.Results()[0]
			if r.State != tc.wantState {
				t.Errorf("state %v, want %v", r.State, tc.wantState)
			}
			if got := s.createCalls(r.Name); got != tc.wantCalls {
				t.Errorf("%d CreateVolume calls, want %d", got, tc.wantCalls)
			}
			calls, ops, _ := e.rec.Snapshot()
			if len(calls) != tc.wantCalls || len(ops) != 1 || ops[0].Attempts != tc.wantCalls {
				t.Errorf("recorded %d calls and ops %+v, want %d calls in one op", len(calls), ops, tc.wantCalls)
			}
			if tc.wantState == Live && (r.ID != idOf(r.Name) || e.Live()[r.Name] != idOf(r.Name)) {
				t.Errorf("live volume %+v, want ID %s", r, idOf(r.Name))
			}
		})
	}
}

// A call cut short by the per-call timeout is retried while the driver may
// still run it: the provisioner's behaviour that makes locking necessary.
func TestTimedOutCallIsRetriedWhileTheFirstStillRuns(t *testing.T) {
	release := make(chan struct{})
	firstDone := make(chan struct{})
	s := &stub{create: func(ctx context.Context, name string, n int) (string, error) {
		if n == 1 {
			defer close(firstDone)
			<-ctx.Done() // the client gave up; the driver is still "working"
			<-release
			return "", ctx.Err()
		}
		return idOf(name), nil
	}}
	cfg := fastConfig(1)
	cfg.Timeout = 50 * time.Millisecond
	e, _ := New(serve(t, s), cfg)
	if err := e.CreatePhase(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := e.Results()[0]
	select {
	case <-firstDone:
		t.Fatal("the retry waited for the first call")
	default:
	}
	close(release)
	if r.State != Live {
		t.Fatalf("state %v, want live", r.State)
	}
	calls, _, _ := e.rec.Snapshot()
	if calls[0].Code != codes.DeadlineExceeded || calls[1].Attempt != 2 {
		t.Errorf("calls %+v: want a DeadlineExceeded first call, then a retry", calls)
	}
}

// A claim deleted during provisioning: the first call is cancelled, the
// provisioner keeps creating until it has an answer, then deletes the volume
// it got, so nothing leaks.
func TestClaimDeletedDuringProvisioningCancelsRetriesThenDeletes(t *testing.T) {
	s := &stub{create: func(ctx context.Context, name string, n int) (string, error) {
		if n == 1 {
			<-ctx.Done() // held until the claim deletion cancels it
			return "", status.FromContextError(ctx.Err()).Err()
		}
		return idOf(name), nil
	}}
	cfg := fastConfig(3)
	cfg.DeleteDuringCreateRate = 1
	cfg.CancelWindow = 10 * time.Millisecond
	e, _ := New(serve(t, s), cfg)
	if err := e.CreatePhase(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, r := range e.Results() {
		if r.State != Deleted || s.deleteCalls(idOf(r.Name)) != 1 || s.createCalls(r.Name) != 2 {
			t.Errorf("%+v: %d creates, %d deletes; want deleted after 2 creates and 1 delete",
				r, s.createCalls(r.Name), s.deleteCalls(idOf(r.Name)))
		}
	}
	calls, _, _ := e.rec.Snapshot()
	cancelled := 0
	for _, c := range calls {
		if c.Code == codes.Canceled {
			cancelled++
		}
	}
	if cancelled != 3 {
		t.Errorf("%d cancelled calls, want one per claim", cancelled)
	}
	if len(e.Live()) != 0 {
		t.Errorf("live volumes %v after every claim was deleted", e.Live())
	}
}

// Duplicate provisioners (two, or DuplicateCallers) call concurrently for
// one name; every answer is kept so that different volumes for one name
// are visible.
func TestDuplicatesCallConcurrentlyAndDisagreementIsVisible(t *testing.T) {
	for _, tc := range []struct {
		name        string
		distinct    bool // the stub (a buggy driver) answers each call with a new ID
		callers     int  // DuplicateCallers (0: 2)
		wantAnswers int
	}{
		{"same answer", false, 0, 1},
		{"different answers", true, 0, 2},
		{"three callers, different answers", true, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			both := make(chan struct{})
			var arrived sync.WaitGroup
			arrived.Add(max(2, tc.callers))
			go func() { arrived.Wait(); close(both) }()
			s := &stub{create: func(ctx context.Context, name string, n int) (string, error) {
				arrived.Done()
				<-both // proves the two calls overlap
				if tc.distinct {
					return fmt.Sprintf("%s-%d", idOf(name), n), nil
				}
				return idOf(name), nil
			}}
			cfg := fastConfig(1)
			cfg.DuplicateRate, cfg.DuplicateCallers = 1, tc.callers
			e, _ := New(serve(t, s), cfg)
			if err := e.CreatePhase(context.Background()); err != nil {
				t.Fatal(err)
			}
			r := e.Results()[0]
			if !r.Duplicate || r.State != Live || len(r.Answers) != tc.wantAnswers {
				t.Errorf("%+v: want a live duplicate with %d distinct answers", r, tc.wantAnswers)
			}
		})
	}
}

func TestDeletePhaseRetriesUntilOKAndGivesUpOnPersistentFinalErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answer    func(n int) codes.Code
		wantState State
		wantCalls int
	}{
		{"aborted twice then ok", func(n int) codes.Code { return []codes.Code{codes.Aborted, codes.Aborted, codes.OK}[min(n, 3)-1] }, Deleted, 3},
		{"internal once then ok", func(n int) codes.Code { return []codes.Code{codes.Internal, codes.OK}[min(n, 2)-1] }, Deleted, 2},
		{"internal forever", func(int) codes.Code { return codes.Internal }, Undeleted, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &stub{
				create: func(_ context.Context, name string, _ int) (string, error) { return idOf(name), nil },
				del: func(_ context.Context, _ string, n int) error {
					if c := tc.answer(n); c != codes.OK {
						return status.Error(c, "scripted")
					}
					return nil
				},
			}
			cfg := fastConfig(2)
			cfg.MaxFinalDeleteErrors = 3
			var marked sync.Map
			cfg.AfterCreate = func(_ context.Context, v *Volume) { marked.Store(v.Name, v.ID()) }
			e, _ := New(serve(t, s), cfg)
			ctx := context.Background()
			if err := e.CreatePhase(ctx); err != nil {
				t.Fatal(err)
			}
			if err := e.DeletePhase(ctx); err != nil {
				t.Fatal(err)
			}
			for _, r := range e.Results() {
				if r.State != tc.wantState || s.deleteCalls(r.ID) != tc.wantCalls {
					t.Errorf("%+v after %d deletes, want %v after %d", r, s.deleteCalls(r.ID), tc.wantState, tc.wantCalls)
				}
				if id, ok := marked.Load(r.Name); !ok || id != r.ID {
					t.Errorf("AfterCreate saw %v for %s, want %s", id, r.Name, r.ID)
				}
			}
		})
	}
}

// cancelAfter cancels the run once the wrapped client has answered n creates.
type cancelAfter struct {
	Client
	n      atomic.Int32
	at     int32
	cancel func()
}

func (c *cancelAfter) CreateVolume(ctx context.Context, in *csi.CreateVolumeRequest, opts ...grpc.CallOption) (*csi.CreateVolumeResponse, error) {
	resp, err := c.Client.CreateVolume(ctx, in, opts...)
	if c.n.Add(1) == c.at {
		c.cancel()
	}
	return resp, err
}

// An unreachable driver answers Unavailable, which is retried: a killed and
// restarted driver must not turn into failed volumes.
func TestUnreachableDriverIsRetriedUntilTheRunEnds(t *testing.T) {
	conn, err := grpc.NewClient("unix:///nonexistent/csi.sock", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := fastConfig(1)
	cfg.Backoff = Backoff{Initial: time.Microsecond, Max: time.Microsecond}
	e, _ := New(&cancelAfter{Client: csi.NewControllerClient(conn), at: 3, cancel: cancel}, cfg)
	if err := e.CreatePhase(ctx); err == nil {
		t.Error("CreatePhase returned nil after cancellation")
	}
	calls, _, _ := e.rec.Snapshot()
	if len(calls) != 3 {
		t.Fatalf("%d calls, want 3", len(calls))
	}
	for _, c := range calls {
		if c.Code != codes.Unavailable {
			t.Errorf("call %+v: want Unavailable", c)
		}
	}
	if r := e.Results()[0]; r.State != Failed || r.FinalCode != codes.Canceled.String() {
		t.Errorf("%+v: an interrupted run leaves the volume failed with Canceled", r)
	}
}

func TestNamesAreRandomPVCUIDs(t *testing.T) {
	a, _ := New(nil, fastConfig(50))
	b, _ := New(nil, fastConfig(50))
	seen := map[string]bool{}
	for _, e := range []*Engine{a, b} {
		for _, v := range e.Volumes() {
			if len(v.Name) != len("pvc-")+36 || seen[v.Name] {
				t.Fatalf("name %q: want a fresh pvc-<uuid>", v.Name)
			}
			seen[v.Name] = true
		}
	}
}
