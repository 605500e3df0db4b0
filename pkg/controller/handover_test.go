package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
)

// upstreamAP makes an access point as upstream's controller makes one for
// the volume name: the name as its token and root directory, its tags,
// GID g.
func upstreamAP(t *testing.T, b *bed, name string, g int64) *efs.AccessPoint {
	t.Helper()
	ap, err := b.client.CreateAccessPoint(b.ctx(), efs.CreateAccessPointInput{FileSystemID: testFS,
		ClientToken: name, Path: "/" + name, PosixUser: &efs.PosixUser{UID: g, GID: g},
		CreationInfo: &efs.CreationInfo{OwnerUID: g, OwnerGID: g, Permissions: "700"},
		Tags:         map[string]string{TagCluster: "true", TagVolumeName: name}})
	must(t, err)
	return ap
}

// fencedBed is a controller whose creates wait for the handover fence,
// on a clock the test moves; waiting receives once a create waits.
func fencedBed(t *testing.T, mut ...func(*Config)) (b *bed, clk *clock, waiting chan struct{}) {
	clk = newClock()
	b = newBed(t, append([]func(*Config){func(c *Config) { c.Now, c.HandoverFence = clk.Now, 15*time.Second }}, mut...)...)
	waiting = make(chan struct{}, 8)
	b.svc.handover.waiting = func() { waiting <- struct{}{} }
	b.svc.handover.poll = 50 * time.Millisecond // the test moves the clock
	return b, clk, waiting
}

// Issue 44's handover defect: upstream's last leader has a create of
// claim A in flight at the handover, with the lowest GID its listing saw
// free; it reaches EFS just after this driver, having listed, answered
// claim B with that GID; this driver's retry of claim A then adopted
// upstream's access point: two claims, one GID. Now no create runs until
// upstream's calls in flight have ended (the fence): claim B's listing
// shows upstream's access point, and its GID is never answered twice.
func TestHandoverNeverAnswersAGIDUpstreamsCreateInFlightTakes(t *testing.T) {
	b, clk, waiting := fencedBed(t)
	one := params("gidRangeStart", "50000", "gidRangeEnd", "50001")
	claimA := "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f"
	upstreamAP(t, b, "pvc-1a2b3c4d-0000-4000-8000-000000000001", 50000) // a volume upstream provisioned before
	type result struct {
		id  string
		err error
	}
	got := make(chan result, 1)
	go func() {
		r, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-b", 1<<30, one))
		if err != nil {
			got <- result{err: err}
			return
		}
		got <- result{id: r.Volume.VolumeId}
	}()
	<-waiting // claim B's create waits for the fence
	// Upstream's create in flight lands now, before its timeout: GID 50001,
	// the lowest free at its listing.
	theirs := upstreamAP(t, b, claimA, 50001)
	clk.Advance(16 * time.Second)
	r := <-got
	if !errors.Is(r.err, gid.ErrExhausted) {
		t.Fatalf("claim B: %s %v, want %v: every id of the range is upstream's", r.id, r.err, gid.ErrExhausted)
	}
	resp, err := b.svc.CreateVolume(b.ctx(), createReq(claimA, 1<<30, one))
	must(t, err)
	if ap := apOf(t, resp.Volume.VolumeId); ap != theirs.ID {
		t.Errorf("claim A answered %s, want upstream's %s", ap, theirs.ID)
	}
	b.wantUniqueIDs(false)
}

// The fence is passed once per cluster: the record says so, and a
// restarted controller's creates do not wait.
func TestHandoverFenceIsPassedOncePerRecord(t *testing.T) {
	b, clk, waiting := fencedBed(t)
	done := make(chan error, 1)
	go func() {
		_, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-a", 1<<30, params()))
		done <- err
	}()
	<-waiting
	clk.Advance(16 * time.Second)
	must(t, <-done)
	again := newBedOn(t, b.url, b.emu, func(c *Config) { c.Now, c.HandoverFence = clk.Now, 15*time.Second }) // the same record
	again.svc.handover.waiting = func() { t.Error("a create of a restarted controller waited for the fence the record says passed") }
	_, err := again.svc.CreateVolume(again.ctx(), createReq("pvc-b", 1<<30, params()))
	must(t, err)
}

// A create whose call ends while it waits for the fence answers a
// retryable error, having made nothing.
func TestCreateCutShortByTheFenceMakesNothing(t *testing.T) {
	b, _, _ := fencedBed(t)
	ctx, cancel := context.WithCancel(b.ctx())
	cancel()
	if _, err := b.svc.CreateVolume(ctx, createReq("pvc-a", 1<<30, params())); !errors.Is(err, ErrHandover) {
		t.Fatalf("create: %v, want %v", err, ErrHandover)
	}
	b.wantAccessPoints(0)
}

// Upstream's driver names a subPathPattern class's directory with a random
// UUID for ensureUniqueDirectory's suffix; this driver derives it from the
// volume name. Upstream's access point for the claim, made before the
// handover, is still the claim's: adopted, not refused as another
// directory (the e2e upgrade from upstream's real controller left claims
// Pending for good: "volume exists with incompatible parameters").
func TestUpstreamsUniqueDirectoryIsAdopted(t *testing.T) {
	b, clk, waiting := fencedBed(t)
	p := params("subPathPattern", "${.PVC.namespace}/${.PVC.name}", "basePath", "/dynamic",
		"csi.storage.k8s.io/pvc/namespace", "apps", "csi.storage.k8s.io/pvc/name", "data")
	name := "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f"
	dir := "/dynamic/apps/data-1c0ffee0-0000-4000-8000-0123456789ab" // upstream's uuid.New()
	done := make(chan error, 1)
	go func() {
		_, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-x", 1<<30, params()))
		done <- err
	}()
	<-waiting
	theirs, err := b.client.CreateAccessPoint(b.ctx(), efs.CreateAccessPointInput{FileSystemID: testFS,
		ClientToken: name, Path: dir, PosixUser: &efs.PosixUser{UID: 50001, GID: 50001},
		CreationInfo: &efs.CreationInfo{OwnerUID: 50001, OwnerGID: 50001, Permissions: "700"},
		Tags:         map[string]string{TagCluster: "true"}})
	must(t, err)
	clk.Advance(16 * time.Second)
	must(t, <-done)
	r, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, p))
	must(t, err)
	if got := apOf(t, r.Volume.VolumeId); got != theirs.ID {
		t.Errorf("answered %s, want upstream's %s", got, theirs.ID)
	}
	// A directory that differs in more than the suffix is another's.
	other := params("subPathPattern", "${.PVC.namespace}/${.PVC.name}", "basePath", "/dynamic",
		"csi.storage.k8s.io/pvc/namespace", "apps", "csi.storage.k8s.io/pvc/name", "other")
	if _, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, other)); !errors.Is(err, ErrIncompatible) {
		t.Errorf("the same volume name for another directory: %v, want %v", err, ErrIncompatible)
	}
	must(t, b.delete(r.Volume.VolumeId))
	b.wantAccessPoints(1) // pvc-x's
}
