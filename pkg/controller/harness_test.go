package controller

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/internal/testutil"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

const testFS = "fs-0123456789abcdef0"

// hookEFS wraps the real client so a test can hold a call at a chosen step
// (before it reaches EFS, or after EFS applied it but before the answer is
// seen) while other calls run, and can replace the answer.
type hookEFS struct {
	EFS
	mu     sync.Mutex
	before map[string]func(arg any)                  // may block
	after  map[string]func(arg any, err error) error // may block; returns the answer's error
	inputs []efs.CreateAccessPointInput
	// listFilter, if set, rewrites every listing (see ListAccessPoints).
	listFilter func([]efs.AccessPoint) []efs.AccessPoint
	// deletedTokens, when not nil, makes a deleted access point's client
	// token stay taken (AlreadyExists naming the deleted ID), as EFS may:
	// it documents nothing either way. The emulator frees it. Shared
	// between beds that stand for processes on one EFS.
	deletedTokens *sync.Map // token -> deleted access point ID
}

// keepTokens makes the beds' EFS keep deleted access points' tokens.
func keepTokens(beds ...*bed) {
	m := &sync.Map{}
	for _, b := range beds {
		b.hook.mu.Lock()
		b.hook.deletedTokens = m
		b.hook.mu.Unlock()
	}
}

func (h *hookEFS) hooks(op string) (func(any), func(any, error) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.before[op], h.after[op]
}

func (h *hookEFS) set(op string, before func(any), after func(any, error) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.before == nil {
		h.before, h.after = map[string]func(any){}, map[string]func(any, error) error{}
	}
	h.before[op], h.after[op] = before, after
}

func hooked[T any](h *hookEFS, op string, arg any, call func() (T, error)) (T, error) {
	b, a := h.hooks(op)
	if b != nil {
		b(arg)
	}
	v, err := call()
	if a != nil {
		err = a(arg, err)
	}
	return v, err
}

func (h *hookEFS) CreateAccessPoint(ctx context.Context, in efs.CreateAccessPointInput) (*efs.AccessPoint, error) {
	h.mu.Lock()
	h.inputs = append(h.inputs, in)
	kept := h.deletedTokens
	h.mu.Unlock()
	if kept != nil {
		if id, ok := kept.Load(in.ClientToken); ok {
			return nil, &efs.AlreadyExistsError{AccessPointID: id.(string)}
		}
	}
	return hooked(h, "CreateAccessPoint", in, func() (*efs.AccessPoint, error) { return h.EFS.CreateAccessPoint(ctx, in) })
}

func (h *hookEFS) DeleteAccessPoint(ctx context.Context, id string) error {
	h.mu.Lock()
	kept := h.deletedTokens
	h.mu.Unlock()
	var token string
	if kept != nil {
		if ap, err := h.EFS.DescribeAccessPoint(ctx, id); err == nil {
			token = ap.ClientToken
		}
	}
	_, err := hooked(h, "DeleteAccessPoint", id, func() (struct{}, error) { return struct{}{}, h.EFS.DeleteAccessPoint(ctx, id) })
	if err == nil && token != "" {
		kept.Store(token, id)
	}
	return err
}

func (h *hookEFS) DescribeAccessPoint(ctx context.Context, id string) (*efs.AccessPoint, error) {
	return hooked(h, "DescribeAccessPoint", id, func() (*efs.AccessPoint, error) { return h.EFS.DescribeAccessPoint(ctx, id) })
}

// DescribeFileSystem passes through (the delete's reachability check).
func (h *hookEFS) DescribeFileSystem(ctx context.Context, fsID string) (*efs.FileSystem, error) {
	d, ok := h.EFS.(FileSystemDescriber)
	if !ok {
		return &efs.FileSystem{ID: fsID}, nil
	}
	return d.DescribeFileSystem(ctx, fsID)
}

// gate holds a hooked call until released, and says when it has arrived.
type gate struct {
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{arrived: make(chan struct{}), release: make(chan struct{})} }

// hold is a hook: the first call through it blocks until open; later calls pass.
func (g *gate) hold(any) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.arrived)
		<-g.release
	}
}

func (g *gate) open() { close(g.release) }

// bed is a controller on the real SDK client over loopback to an emulator.
type bed struct {
	t      *testing.T
	emu    *emulator.Emulator
	url    string
	client *efs.Client
	hook   *hookEFS
	svc    *Service
	pid    int // the process this controller stands for (see kill)
}

// Each bed stands for a controller process of its own on one host: its
// writer tag names a fake PID that is alive until the test kills it.
var (
	fakePIDs  atomic.Int64
	fakeProcs sync.Map // pid -> true while alive
)

// records is the record of each emulator's cluster.
var records sync.Map // *emulator.Emulator -> *journal.Memory

// kill marks the bed's process dead: other beds may now settle what it made.
func (b *bed) kill() { fakeProcs.Delete(b.pid) }

func newBed(t *testing.T, mut ...func(*Config)) *bed {
	t.Helper()
	url, emu := emulatortest.Start(t, emulator.Config{DataDir: t.TempDir(), FileSystems: []string{testFS}})
	return newBedOn(t, url, emu, mut...)
}

// newBedOn starts another controller (a restarted process) on an existing emulator.
func newBedOn(t *testing.T, url string, emu *emulator.Emulator, mut ...func(*Config)) *bed {
	t.Helper()
	client, err := efs.New(context.Background(), efs.Config{Region: "us-east-1", Endpoint: url,
		RateLimits: unlimited, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b := &bed{t: t, emu: emu, url: url, client: client, hook: &hookEFS{EFS: client}}
	b.pid = int(fakePIDs.Add(1))
	fakeProcs.Store(b.pid, true)
	// Controllers on one emulator are replicas of one cluster: they share
	// its record, as replicas share the Kubernetes store.
	store, _ := records.LoadOrStore(emu, journal.NewMemory())
	cfg := Config{EFS: b.hook, TempDir: t.TempDir(), Journal: store.(*journal.Memory)}
	for _, m := range mut {
		m(&cfg)
	}
	if b.svc, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n := b.svc.LocksHeld(); n != 0 {
			t.Errorf("%d locks held at rest", n)
		}
	})
	return b
}

func params(extra ...string) map[string]string {
	p := map[string]string{"provisioningMode": "efs-ap", "fileSystemId": testFS, "directoryPerms": "700"}
	for i := 0; i+1 < len(extra); i += 2 {
		p[extra[i]] = extra[i+1]
	}
	return p
}

func createReq(name string, bytes int64, p map[string]string) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{
		Name:          name,
		CapacityRange: &csi.CapacityRange{RequiredBytes: bytes},
		Parameters:    p,
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}},
	}
}

func (b *bed) create(name string) (*csi.CreateVolumeResponse, error) {
	return b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, params()))
}

func (b *bed) mustCreate(name string) string {
	b.t.Helper()
	r, err := b.create(name)
	if err != nil {
		b.t.Fatalf("CreateVolume(%s): %v", name, err)
	}
	return r.GetVolume().GetVolumeId()
}

func (b *bed) delete(id string) error {
	_, err := b.svc.DeleteVolume(b.ctx(), &csi.DeleteVolumeRequest{VolumeId: id})
	return err
}

func (b *bed) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	b.t.Cleanup(cancel)
	return ctx
}

// accessPoints lists what EFS holds now, bypassing the controller.
func (b *bed) accessPoints() []efs.AccessPoint {
	b.t.Helper()
	var all []efs.AccessPoint
	if err := b.client.ListAccessPoints(b.ctx(), testFS, func(p []efs.AccessPoint) error {
		all = append(all, p...)
		return nil
	}); err != nil {
		b.t.Fatal(err)
	}
	return all
}

func (b *bed) wantAccessPoints(n int) []efs.AccessPoint {
	b.t.Helper()
	aps := b.accessPoints()
	if len(aps) != n {
		b.t.Fatalf("%d access points exist, want %d: %v", len(aps), n, aps)
	}
	return aps
}

// async runs f in a goroutine and returns its error on a channel.
func async(f func() error) <-chan error {
	c := make(chan error, 1)
	go func() { c <- f() }()
	return c
}

func apOf(t *testing.T, volID string) string {
	t.Helper()
	id, err := volume.ParseID(volID)
	if err != nil || id.AccessPointID == "" {
		t.Fatalf("volume ID %q: %v", volID, err)
	}
	return id.AccessPointID
}

// unlimited turns off the client's pacing: the tests measure the protocol.
var unlimited = map[string]efs.RateLimit{"*": {}}

// retryable is what the provisioner retries: a busy volume, a GID contention
// or a create whose access point is not visible yet.
func retryable(err error) bool {
	return errors.Is(err, keylock.ErrBusy) || errors.Is(err, ErrGIDContention) || errors.Is(err, ErrNotYetVisible)
}

// clock is a settable time source for the verifier's windows.
type clock = testutil.Clock

func newClock() *clock { return testutil.NewClock(time.Now()) }

// steadyState is a controller past its start-up verification window, alone
// on its file system.
func steadyState(clk *clock) func(*Config) {
	return func(c *Config) { c.Now = clk.Now }
}

// ListAccessPoints passes listings through hide, when set: a test makes a
// listing lag (leave out access points) or change its order.
func (h *hookEFS) ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error {
	h.mu.Lock()
	hide := h.listFilter
	h.mu.Unlock()
	if hide == nil {
		return h.EFS.ListAccessPoints(ctx, fsID, fn)
	}
	all, err := efs.Collect(ctx, h.EFS.ListAccessPoints, fsID)
	if err != nil {
		return err
	}
	return fn(hide(all))
}

func (h *hookEFS) setListFilter(f func([]efs.AccessPoint) []efs.AccessPoint) {
	h.mu.Lock()
	h.listFilter = f
	h.mu.Unlock()
}

// wantUniqueIDs fails when two live access points share a GID, or, when
// byUID, a UID.
func (b *bed) wantUniqueIDs(byUID bool) {
	b.t.Helper()
	seen := map[int64]string{}
	for _, ap := range b.accessPoints() {
		id := ap.PosixUser.GID
		if byUID {
			id = ap.PosixUser.UID
		}
		if other, dup := seen[id]; dup {
			b.t.Errorf("id %d on both %s and %s", id, other, ap.ID)
		}
		seen[id] = ap.ID
	}
}

// descriptive runs a bed's controller with --descriptive-tags: the tests
// of what those tags add (another cluster's ID, the record life) and of
// access points an earlier release tagged.
func descriptive(c *Config) { c.DescriptiveTags = true }
