package workload

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Client is the part of the CSI Controller service the workload calls;
// csi.ControllerClient satisfies it.
type Client interface {
	CreateVolume(ctx context.Context, in *csi.CreateVolumeRequest, opts ...grpc.CallOption) (*csi.CreateVolumeResponse, error)
	DeleteVolume(ctx context.Context, in *csi.DeleteVolumeRequest, opts ...grpc.CallOption) (*csi.DeleteVolumeResponse, error)
}

// Config shapes the workload.
type Config struct {
	Volumes     int
	Concurrency int           // provisioner workers
	Timeout     time.Duration // per call; a call cut short is retried while the driver may still run it
	Backoff     Backoff
	// DuplicateRate is the fraction of volumes provisioned by two concurrent
	// provisioners at once (a leader change, a re-queued claim).
	DuplicateRate float64
	// DuplicateCallers is how many provisioners call at once for a
	// duplicated volume (0: 2).
	DuplicateCallers int
	// DeleteDuringCreateRate is the fraction of claims deleted while their
	// volume is being provisioned: the first CreateVolume call is cancelled
	// within CancelWindow, and the provisioner keeps calling until it gets a
	// final answer, then deletes the volume it got.
	DeleteDuringCreateRate float64
	CancelWindow           time.Duration
	Parameters             map[string]string // StorageClass parameters
	CapacityBytes          int64
	// MaxFinalDeleteErrors bounds how many non-retryable answers one
	// DeleteVolume may get before the volume is given up as undeletable.
	MaxFinalDeleteErrors int
	Seed                 uint64 // decisions and jitter; 0 = random. Names are always random.
	// AfterCreate, if set, runs once for each volume that came out of the
	// create phase alive, right after its create answered (the stress tool
	// writes a marker file into it).
	AfterCreate func(ctx context.Context, v *Volume)
	Recorder    *Recorder
}

// State is where a volume is in its life.
type State int

const (
	Pending   State = iota
	Live            // created, not deleted
	Failed          // create ended with a final error: nothing may exist
	Deleted         // created and deleted (or deleted during provisioning)
	Undeleted       // DeleteVolume never succeeded
)

var stateNames = [...]string{"pending", "live", "failed", "deleted", "undeleted"}

func (s State) String() string { return stateNames[s] }

// MarshalText makes states readable in JSON.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Volume is one claim of the workload.
type Volume struct {
	Index              int
	Name               string
	Duplicate          bool // provisioned by two provisioners at once
	DeleteDuringCreate bool // claim deleted during provisioning

	mu        sync.Mutex
	id        string
	answers   []string // every distinct volume ID any provisioner got for this name
	state     State
	finalCode codes.Code
}

// VolumeResult is a volume's outcome, a plain value for audits and reports.
type VolumeResult struct {
	Name               string   `json:"name"`
	ID                 string   `json:"id,omitempty"`
	State              State    `json:"state"`
	Duplicate          bool     `json:"duplicate,omitempty"`
	DeleteDuringCreate bool     `json:"deleteDuringCreate,omitempty"`
	Answers            []string `json:"answers,omitempty"`
	FinalCode          string   `json:"finalCode,omitempty"`
}

// Result snapshots the volume.
func (v *Volume) Result() VolumeResult {
	v.mu.Lock()
	defer v.mu.Unlock()
	r := VolumeResult{Name: v.Name, ID: v.id, State: v.state, Duplicate: v.Duplicate,
		DeleteDuringCreate: v.DeleteDuringCreate, Answers: slices.Clone(v.answers)}
	if v.state == Failed {
		r.FinalCode = v.finalCode.String()
	}
	return r
}

// ID is the volume ID the provisioner would have written into the PV.
func (v *Volume) ID() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.id
}

func (v *Volume) answer(id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.id == "" {
		v.id = id
	}
	if !slices.Contains(v.answers, id) {
		v.answers = append(v.answers, id)
	}
}

func (v *Volume) setState(s State) {
	v.mu.Lock()
	v.state = s
	v.mu.Unlock()
}

// Progress counts volumes by state and calls in flight.
type Progress struct {
	Phase                                       string
	Volumes, Created, Failed, Deleted, Undelete int64
	InFlight, Calls, Retries                    int64
}

// Engine runs the phases. Create must finish before Delete starts.
type Engine struct {
	client  Client
	cfg     Config
	rec     *Recorder
	volumes []*Volume

	rngMu sync.Mutex
	rng   *mrand.Rand

	phase                                                     atomic.Value
	created, failed, deleted, undeleted, inFlight, calls, rtr atomic.Int64
}

// New draws the volumes: random names, and which of them get duplicates and
// deletes during provisioning.
func New(client Client, cfg Config) (*Engine, error) {
	if cfg.Volumes < 0 || cfg.Concurrency < 1 {
		return nil, fmt.Errorf("workload: %d volumes with concurrency %d", cfg.Volumes, cfg.Concurrency)
	}
	if cfg.Timeout <= 0 {
		return nil, errors.New("workload: a per-call timeout is required")
	}
	if cfg.Backoff.Initial <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.MaxFinalDeleteErrors <= 0 {
		cfg.MaxFinalDeleteErrors = 10
	}
	if cfg.Recorder == nil {
		cfg.Recorder = NewRecorder()
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = mrand.Uint64()
	}
	e := &Engine{client: client, cfg: cfg, rec: cfg.Recorder, rng: mrand.New(mrand.NewPCG(seed, seed>>1|1))}
	e.phase.Store("ready")
	for i := range cfg.Volumes {
		e.volumes = append(e.volumes, &Volume{
			Index:              i,
			Name:               "pvc-" + uuid(),
			Duplicate:          e.rng.Float64() < cfg.DuplicateRate,
			DeleteDuringCreate: e.rng.Float64() < cfg.DeleteDuringCreateRate,
		})
	}
	return e, nil
}

// uuid is a random (version 4) UUID, as Kubernetes gives every claim.
func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Volumes is every volume of the run.
func (e *Engine) Volumes() []*Volume { return e.volumes }

// Results snapshots every volume.
func (e *Engine) Results() []VolumeResult {
	out := make([]VolumeResult, len(e.volumes))
	for i, v := range e.volumes {
		out[i] = v.Result()
	}
	return out
}

// Progress reads the counters.
func (e *Engine) Progress() Progress {
	return Progress{
		Phase: e.phase.Load().(string), Volumes: int64(len(e.volumes)),
		Created: e.created.Load(), Failed: e.failed.Load(), Deleted: e.deleted.Load(), Undelete: e.undeleted.Load(),
		InFlight: e.inFlight.Load(), Calls: e.calls.Load(), Retries: e.rtr.Load(),
	}
}

func (e *Engine) float() float64 {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	return e.rng.Float64()
}

// forEach runs fn over vs on Concurrency workers until done or ctx ends.
func (e *Engine) forEach(ctx context.Context, vs []*Volume, fn func(*Volume)) {
	work := make(chan *Volume)
	var wg sync.WaitGroup
	for range min(e.cfg.Concurrency, max(len(vs), 1)) {
		wg.Go(func() {
			for v := range work {
				fn(v)
			}
		})
	}
	for _, v := range vs {
		select {
		case work <- v:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(work)
	wg.Wait()
}

// CreatePhase provisions every volume; claims deleted during provisioning
// are deleted as soon as their create answers. It returns when every volume
// has a final state or ctx ends.
func (e *Engine) CreatePhase(ctx context.Context) error {
	e.phase.Store("create")
	e.rec.Event("phase", "create")
	e.forEach(ctx, e.volumes, func(v *Volume) { e.provision(ctx, v) })
	return ctx.Err()
}

// DeletePhase deletes every live volume, retrying until each is gone.
func (e *Engine) DeletePhase(ctx context.Context) error {
	e.phase.Store("delete")
	e.rec.Event("phase", "delete")
	var live []*Volume
	for _, v := range e.volumes {
		if v.Result().State == Live {
			live = append(live, v)
		}
	}
	e.forEach(ctx, live, func(v *Volume) {
		if e.delete(ctx, v.ID()) {
			v.setState(Deleted)
			e.deleted.Add(1)
		} else {
			v.setState(Undeleted)
			e.undeleted.Add(1)
		}
	})
	return ctx.Err()
}

// provision is one claim's life in the create phase: one or two
// provisioners ask for it; if the claim was deleted meanwhile, each
// provisioner deletes whatever volume it got, as the real one does to avoid
// leaking it.
func (e *Engine) provision(ctx context.Context, v *Volume) {
	copies := 1
	if v.Duplicate {
		copies = max(2, e.cfg.DuplicateCallers)
	}
	var wg sync.WaitGroup
	var ok, deleted atomic.Int32
	for c := range copies {
		wg.Go(func() {
			id, code := e.create(ctx, v, c == 0 && v.DeleteDuringCreate)
			if code != codes.OK {
				v.mu.Lock()
				v.finalCode = code
				v.mu.Unlock()
				return
			}
			ok.Add(1)
			v.answer(id)
			if v.DeleteDuringCreate && e.delete(ctx, id) {
				deleted.Add(1)
			}
		})
	}
	wg.Wait()
	switch {
	case ok.Load() == 0:
		v.setState(Failed)
		e.failed.Add(1)
	case !v.DeleteDuringCreate:
		v.setState(Live)
		e.created.Add(1)
		if e.cfg.AfterCreate != nil && ctx.Err() == nil {
			e.cfg.AfterCreate(ctx, v)
		}
	case deleted.Load() == ok.Load():
		v.setState(Deleted)
		e.created.Add(1)
		e.deleted.Add(1)
	default:
		v.setState(Undeleted)
		e.created.Add(1)
		e.undeleted.Add(1)
	}
}

func (e *Engine) request(v *Volume) *csi.CreateVolumeRequest {
	params := maps.Clone(e.cfg.Parameters)
	if params == nil {
		params = map[string]string{}
	}
	// What external-provisioner adds with --extra-create-metadata.
	params["csi.storage.k8s.io/pv/name"] = v.Name
	params["csi.storage.k8s.io/pvc/name"] = "claim-" + strconv.Itoa(v.Index)
	params["csi.storage.k8s.io/pvc/namespace"] = "efs-csi-stress"
	return &csi.CreateVolumeRequest{
		Name:          v.Name,
		CapacityRange: &csi.CapacityRange{RequiredBytes: e.cfg.CapacityBytes},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}},
		Parameters: params,
	}
}

// call makes one RPC with the per-call timeout; cancelWithin > 0 cancels it
// at a random moment within that window, as a claim deletion would.
func (e *Engine) call(ctx context.Context, rpc string, attempt int, cancelWithin time.Duration,
	do func(ctx context.Context) error) codes.Code {
	cctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	if cancelWithin > 0 {
		t := time.AfterFunc(time.Duration(e.float()*float64(cancelWithin)), cancel)
		defer t.Stop()
	}
	e.inFlight.Add(1)
	start := time.Now()
	err := do(cctx)
	lat := time.Since(start)
	e.inFlight.Add(-1)
	e.calls.Add(1)
	if attempt > 1 {
		e.rtr.Add(1)
	}
	code := status.Code(err)
	if err != nil && code == codes.Unknown {
		// Not a gRPC status: the call never reached the driver.
		code = codes.Unavailable
	}
	e.rec.Call(rpc, start, lat, code, attempt)
	return code
}

// wait sleeps the back-off after failures consecutive failures; false if ctx ended.
func (e *Engine) wait(ctx context.Context, failures int) bool {
	t := time.NewTimer(e.cfg.Backoff.Delay(failures, e.float()))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// create calls CreateVolume until a final answer, as the provisioner does.
func (e *Engine) create(ctx context.Context, v *Volume, cancelFirst bool) (string, codes.Code) {
	req := e.request(v)
	start := time.Now()
	for attempt := 1; ; attempt++ {
		var window time.Duration
		if attempt == 1 && cancelFirst {
			window = e.cfg.CancelWindow
		}
		var id string
		code := e.call(ctx, RPCCreate, attempt, window, func(ctx context.Context) error {
			resp, err := e.client.CreateVolume(ctx, req)
			if err == nil {
				id = resp.GetVolume().GetVolumeId()
			}
			return err
		})
		if code == codes.OK && id == "" {
			code = codes.Internal // an answer without a volume is no answer
		}
		out := CreateOutcome(code)
		if out == RetryInBackground && ctx.Err() != nil {
			code = status.Code(status.FromContextError(ctx.Err()).Err())
			out = Final
		}
		if out != RetryInBackground {
			e.rec.Op(RPCCreate, start, attempt, code)
			return id, code
		}
		if !e.wait(ctx, attempt) {
			e.rec.Op(RPCCreate, start, attempt, codes.Canceled)
			return "", codes.Canceled
		}
	}
}

// delete calls DeleteVolume until it succeeds. The provisioner retries a
// failed deletion forever; this gives up after MaxFinalDeleteErrors
// non-retryable answers (or when ctx ends) and reports false.
func (e *Engine) delete(ctx context.Context, id string) bool {
	req := &csi.DeleteVolumeRequest{VolumeId: id}
	start := time.Now()
	finals := 0
	for attempt := 1; ; attempt++ {
		code := e.call(ctx, RPCDelete, attempt, 0, func(ctx context.Context) error {
			_, err := e.client.DeleteVolume(ctx, req)
			return err
		})
		if code == codes.OK {
			e.rec.Op(RPCDelete, start, attempt, code)
			return true
		}
		if CreateOutcome(code) == Final {
			finals++
		}
		if finals >= e.cfg.MaxFinalDeleteErrors || !e.wait(ctx, attempt) {
			e.rec.Op(RPCDelete, start, attempt, code)
			return false
		}
	}
}

// Live maps the name of every live volume to its volume ID.
func (e *Engine) Live() map[string]string {
	live := map[string]string{}
	for _, v := range e.volumes {
		if r := v.Result(); r.State == Live {
			live[r.Name] = r.ID
		}
	}
	return live
}

// Names is the set of every volume name of the run.
func (e *Engine) Names() map[string]bool {
	names := make(map[string]bool, len(e.volumes))
	for _, v := range e.volumes {
		names[v.Name] = true
	}
	return names
}
