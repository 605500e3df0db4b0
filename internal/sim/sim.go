// Package sim is a deterministic simulator of the CSI controller
// (pkg/controller), in the manner of FoundationDB's simulation testing: it
// runs the production Service, not a model of it, against a simulated EFS
// and simulated record stores, and searches interleavings and faults.
//
// Every call the controller makes across its boundaries (each EFS request,
// each record operation) parks as an op. Runs happen in a testing/synctest
// bubble, so time is a fake clock (the controller's own time.Now reads
// included), and the scheduler loop is:
//
//	synctest.Wait()            every goroutine durably blocked
//	collect the parked ops     sorted by (actor, call, op) ids
//	decide                     release one op (applied and answered; applied
//	                           and answer lost; not applied and an error),
//	                           advance the clock, kill a controller, or make
//	                           a provisioner forget its call
//	check the invariants
//
// A decision names the op it acts on by id, so a run is a list of
// decisions: a seed generates one (with math/rand/v2's PCG), a script
// (testdata) replays one, and shrinking removes decisions. See invariants
// in check.go and docs/design.md, "Invariants".
package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// FS is the simulated file system every volume is made on: the class's
// first (Config.FileSystems names more).
const FS = "fs-0123456789abcdef0"

// fsID is the class's i-th file system (FS, then fs-…1, fs-…2).
func fsID(i int) string {
	if i == 0 {
		return FS
	}
	return fmt.Sprintf("fs-0123456789abcdef%x", i)
}

// fsIDs are the class's file systems, in its fileSystemId's order.
func (s *Sim) fsIDs() []string {
	out := make([]string, s.cfg.fileSystems())
	for i := range out {
		out[i] = fsID(i)
	}
	return out
}

// downFS is the file system of the class whose listings fail
// (Config.Down): its last; "" if none.
func (s *Sim) downFS() string {
	if s.cfg.fileSystems() < 2 || s.cfg.Down == 0 {
		return ""
	}
	return fsID(s.cfg.fileSystems() - 1)
}

// isDown: fsID's ListAccessPoints and DescribeAccessPoint fail now
// (Config.DownAt, Config.Down).
func (s *Sim) isDown(fsID string) bool {
	if fsID == "" || fsID != s.downFS() {
		return false
	}
	d := s.now().Sub(s.start)
	return d >= s.cfg.DownAt && (s.cfg.Down < 0 || d < s.cfg.DownAt+s.cfg.Down)
}

// outage: a listing outage (Config.Down) for a while is not over yet.
func (s *Sim) outage() bool {
	return s.downFS() != "" && s.cfg.Down > 0 && s.now().Sub(s.start) < s.cfg.DownAt+s.cfg.Down
}

var errDown = errors.New("sim: file system not reachable (down)")

// GIDStart is the first GID of the class's range.
const GIDStart = 60000

type opKind int

const (
	kindEFS       opKind = iota // a mutating EFS request
	kindEFSRead                 // Describe, List
	kindStore                   // a record write
	kindStoreRead               // a record read
	kindActor                   // a provisioner's or writer's step (no fault)
)

// op is a parked boundary call.
type op struct {
	id    string // actor:call.seq
	desc  string
	kind  opKind
	inst  *instance // nil for actor steps
	exec  func() (any, error)
	reply chan reply
}

type reply struct {
	v   any
	err error
}

// callTag names the CSI call (or actor step) a context belongs to; every
// op parked under it is numbered in order.
type callTag struct {
	actor string
	call  int
	seq   int
}

type tagKey struct{}

func withTag(ctx context.Context, t *callTag) context.Context {
	return context.WithValue(ctx, tagKey{}, t)
}

// instance is one controller process.
type instance struct {
	name    string // c<cluster>.<slot>.<generation>
	cluster *cluster
	slot    int
	svc     *controller.Service
	st      *store
	dead    bool
	deadCh  chan struct{}
}

// cluster is one Kubernetes cluster running this driver.
type cluster struct {
	idx    int
	id     string // --cluster-id
	shared *store // the cluster's record (its Leases), every controller's
	slots  []*instance
	gens   []int
}

// Sim is one run.
type Sim struct {
	cfg  Config
	rng  *rand.Rand // decisions
	wrng *rand.Rand // the world's own draws (lags, restarts keeping a file)

	mu     sync.Mutex // guards parked, tags and inst.dead
	parked []*op

	efs      efsWorld
	clusters []*cluster
	// upstreamLive: access points of upstream's bound volumes (Upgrade),
	// live all along: no answer may carry their GIDs.
	upstreamLive []string
	extraIDs     int      // ids added to the class's range for upstreamLive's
	stores       []*store // every store ever made, for checks
	actors       []*actor
	running      int // actors not finished
	stopping     bool
	collected    bool // the collectors were started

	steps      int
	faultsLeft int
	killsLeft  int
	forgetLeft int
	quiet      bool      // faults stopped
	quietAt    time.Time // when they did
	script     []string  // replayed decisions (nil: generate)
	decisions  []string  // decisions taken
	trace      []string
	pending    []pendingLine
	traceOn    bool
	violations []string
	start      time.Time
	bgTag      *callTag
	handling   map[*callTag]bool // CSI calls whose handler runs in a controller
	cutShort   map[*callTag]bool // CSI calls whose handler ended with its context

	tmp          string            // root removal: parent of the mount points
	mounts       map[string]*mount // root removal: mounted targets
	mountSeq     int
	forged       map[journal.Key]bool // entries forged into a record (not the driver's)
	answers      []*answered
	deleteIssued map[string]bool     // volume IDs whose DeleteVolume was called
	deletedIDs   map[string]bool     // volume IDs whose DeleteVolume succeeded
	keptRoots    map[*instance]int64 // deletes of access points made by hand, by the controller that sent them
	handVolumes  []handVolume        // access points made by hand that DeleteVolume deletes
}

// handVolume is an access point made by hand whose DeleteVolume a
// PersistentVolume made by hand for it calls (runWriter).
type handVolume struct{ volID, apID, path, fsID string }

// answered is a volume a provisioner was answered.
type answered struct {
	volID, name, apID, token string
	fsID                     string // the file system its ID names
	gid                      int64
	by                       string
	inst                     *instance
	// dir: the directory of a directory volume (apID is then its
	// stand-in's, "dir:" and the path); gid is its record's.
	dir string
}

func (s *Sim) now() time.Time { return time.Now() }

func (s *Sim) tracef(format string, args ...any) {
	if s.traceOn {
		s.trace = append(s.trace, fmt.Sprintf(format, args...))
	}
}

// atracef traces for an actor (under s.mu): actors woken in one step run
// at once, so their lines wait for the scheduler to add them in actor order.
func (s *Sim) atracef(a *actor, format string, args ...any) {
	if s.traceOn {
		s.pending = append(s.pending, pendingLine{a.name, fmt.Sprintf(format, args...)})
	}
}

type pendingLine struct{ actor, line string }

// flush adds the actors' lines of the last step.
func (s *Sim) flush() {
	slices.SortStableFunc(s.pending, func(a, b pendingLine) int { return strings.Compare(a.actor, b.actor) })
	for _, p := range s.pending {
		s.trace = append(s.trace, p.line)
	}
	s.pending = s.pending[:0]
}

// park hands an op to the scheduler and waits for its outcome.
func (s *Sim) park(ctx context.Context, inst *instance, kind opKind, desc string, exec func() (any, error)) (any, error) {
	s.mu.Lock()
	if inst != nil && inst.dead {
		s.mu.Unlock()
		return nil, failure(kind, errKilled)
	}
	t, _ := ctx.Value(tagKey{}).(*callTag)
	if t == nil {
		t = s.bgTag
	}
	t.seq++
	o := &op{id: fmt.Sprintf("%s:%d.%d", t.actor, t.call, t.seq), desc: desc, kind: kind, inst: inst, exec: exec, reply: make(chan reply, 1)}
	s.parked = append(s.parked, o)
	s.mu.Unlock()
	select {
	case r := <-o.reply:
		return r.v, r.err
	case <-ctx.Done():
		s.mu.Lock()
		if i := slices.Index(s.parked, o); i >= 0 {
			s.parked = slices.Delete(s.parked, i, i+1)
			s.mu.Unlock()
			return nil, failure(kind, ctx.Err())
		}
		s.mu.Unlock()
		r := <-o.reply
		return r.v, r.err
	}
}

// failure is the error of a request whose outcome is unknown (or that was
// not applied): what the real EFS client and record stores answer.
func failure(kind opKind, cause error) error {
	switch kind {
	case kindEFS, kindEFSRead:
		return fmt.Errorf("%w: %w", efs.ErrUnavailable, cause)
	case kindStore, kindStoreRead:
		return fmt.Errorf("%w: %w", journal.ErrUnavailable, cause)
	}
	return cause
}

var (
	err5xx      = errors.New("sim: 500 Internal Server Error")
	errLost     = errors.New("sim: answer lost")
	errThrottle = fmt.Errorf("%w: sim: 429", efs.ErrThrottled)
)

// newInstance starts a controller in slot of c.
func (s *Sim) newInstance(c *cluster, slot int) *instance {
	c.gens[slot]++
	inst := &instance{name: fmt.Sprintf("c%d.%d.%d", c.idx, slot, c.gens[slot]), cluster: c, slot: slot, deadCh: make(chan struct{})}
	inst.st = c.shared
	cc := controller.Config{
		EFS:        &efsPort{s: s, inst: inst},
		Journal:    s.port(inst),
		ClusterID:  c.id,
		GIDOptions: gid.Options{Seed: fmt.Sprintf("%d-%s", s.cfg.Seed, inst.name)},
		// --listing-lag tells the truth about EFS's (its default, 1s, is
		// above what EFS shows); root removal's worlds draw their own,
		// which may understate it.
		ListingLag: s.cfg.Lag,
		// Upstream's last leader's calls end within its timeout
		// (Upgrade): every world starts as a fresh record, which passes
		// the fence once.
		HandoverFence: upstreamCallTimeout,
	}
	if s.cfg.mounts() {
		cc.Mounter, cc.TempDir = &mounter{s: s, inst: inst}, s.tmp
	}
	if s.cfg.RootDir {
		cc.DeleteRootDir, cc.ListingLag = true, s.cfg.ListingLag
	}
	if s.cfg.fileSystems() > 1 {
		// Placement knows EFS's quota (--access-point-limit): the
		// world's.
		cc.AccessPointLimit = s.cfg.Limit
	}
	svc, err := controller.New(cc)
	if err != nil {
		panic(err)
	}
	inst.svc = svc
	c.slots[slot] = inst
	s.tracef("start %s store=%s", inst.name, inst.st.name)
	return inst
}

// kill (scheduler, s.mu held) stops inst: its parked ops are dropped, or applied with their
// answers lost (apply), and a fresh instance takes its slot.
func (s *Sim) kill(inst *instance, apply bool) {
	inst.dead = true
	var mine []*op
	s.parked = slices.DeleteFunc(s.parked, func(o *op) bool {
		if o.inst == inst {
			mine = append(mine, o)
			return true
		}
		return false
	})
	// Everything the scheduler traces comes before any goroutine wakes.
	s.newInstance(inst.cluster, inst.slot)
	for _, o := range mine {
		if apply && (o.kind == kindEFS || o.kind == kindStore) {
			o.exec()
		}
		s.tracef("%s %s %s -> killed", map[bool]string{true: "applied", false: "dropped"}[apply && (o.kind == kindEFS || o.kind == kindStore)], o.id, o.desc)
	}
	close(inst.deadCh)
	for _, o := range mine {
		o.reply <- reply{err: failure(o.kind, errKilled)}
	}
}

// params is the StorageClass volume v is made with: of access points,
// or of directories (Config.Dirs) over the same GID range.
func (s *Sim) params(v int) map[string]string {
	mode := "efs-ap"
	if s.cfg.dir(v) {
		mode = "efs-dir"
	}
	return map[string]string{
		"provisioningMode": mode, "fileSystemId": strings.Join(s.fsIDs(), ","), "directoryPerms": "700",
		"gidRangeStart": fmt.Sprint(GIDStart), "gidRangeEnd": fmt.Sprint(GIDStart + s.cfg.GIDs + s.extraIDs),
	}
}

func createReq(name string, class map[string]string) *csi.CreateVolumeRequest {
	p := map[string]string{
		"csi.storage.k8s.io/pvc/name": claimOf(name), "csi.storage.k8s.io/pvc/namespace": "default",
		"csi.storage.k8s.io/pv/name": name,
	}
	for k, v := range class {
		p[k] = v
	}
	return &csi.CreateVolumeRequest{
		Name:          name,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
		Parameters:    p,
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}},
	}
}

// step parks an actor step (no effect) so that the scheduler orders it.
func (s *Sim) step(t *callTag, desc string) bool {
	s.park(withTag(context.Background(), t), nil, kindActor, desc, func() (any, error) { return nil, nil })
	return !s.isStopping()
}

func (s *Sim) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// Result is what a run found.
type Result struct {
	Seed       uint64
	Steps      int
	Decisions  []string
	Trace      []string
	Violations []string
}

// Failed reports whether an invariant was broken.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// kindOf names the first violation's kind (the part before ':').
func (r *Result) Kind() string {
	if len(r.Violations) == 0 {
		return ""
	}
	k, _, _ := strings.Cut(r.Violations[0], ":")
	return k
}

func (s *Sim) violate(format string, args ...any) {
	v := fmt.Sprintf(format, args...)
	if !slices.Contains(s.violations, v) {
		s.violations = append(s.violations, v)
		s.tracef("VIOLATION %s", v)
	}
}

// parseVolID is the file system of a volume ID and its access point, or
// the directory of a directory volume's.
func parseVolID(id string) (fsID, apID, dir string) {
	v, err := volume.ParseID(id)
	switch {
	case err != nil:
		return "", "", ""
	case v.Dir:
		return v.FileSystemID, "", v.Path
	}
	return v.FileSystemID, v.AccessPointID, ""
}
