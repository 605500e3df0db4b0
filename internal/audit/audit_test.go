package audit

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/upstreamtest"
	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

// planted is a cluster's state with every kind of finding, made by this
// driver (through the real controller), by the upstream driver's calls,
// by another cluster's controller and by hand.
type planted struct {
	*bed
	leak, unanswered            string // provable leaks: access points
	never, gone                 string // provable leaks: records whose access point is not (or no longer) there
	retained, forged            string // no PV, this cluster's or this driver's, not provable
	pending, other, foreign     string // no PV, not findings
	upstream                    map[string]bool
	phantomPV, phantomAP        string
	bound, sharedWith           string // an access point of a PV and a hand-made one with its GID
	fixed1, fixed2              string // a class's fixed gid: shared on purpose
	abandoned, goneRoot, phRoot string // orphan directories
	leakRoot, unansweredRoot    string
	upstreamBound               string
	apsBefore                   int
}

func plant(t *testing.T, collector bool) *planted {
	b := newBed(t)
	p := &planted{bed: b, upstream: map[string]bool{}}
	if collector {
		b.startCollector() // before the volumes: it has watched their whole life
	}
	// Upstream's access points first, so that this driver's allocator
	// (which excludes listed GIDs) does not pick theirs.
	for _, v := range upstreamtest.Volumes() {
		p.upstream[upstreamtest.Create(t, b.sdk, testFS, v)] = true
	}
	pvUp := upstreamtest.PVName()
	p.upstreamBound = upstreamtest.Create(t, b.sdk, testFS, upstreamtest.Volume{Name: pvUp, Token: pvUp, Path: "/" + pvUp, GID: 50010})
	b.bind(pvUp, testFS+"::"+p.upstreamBound, "legacy", "data", "upstream-class")

	id := b.create("pvc-bound", "team-a", "bound", classDyn)
	p.bound = apOf(t, id)
	b.bind("pvc-bound", id, "team-a", "bound", classDyn)

	p.leak = apOf(t, b.create("pvc-leak", "team-a", "leak", classDyn)) // its claim was deleted during provisioning: no PV, no claim

	id = b.create("pvc-retained", "team-b", "retained", classDyn)
	p.retained = apOf(t, id)
	b.addPV("pvc-retained", id, "team-b", "retained", classDyn) // a Retain PV, its claim gone...
	if collector {
		b.eventually("the collector marks pvc-retained bound", func() bool { r := b.record("pvc-retained"); return r != nil && r.Bound })
	} else {
		if err := journal.New(b.store).MarkBound(b.ctx(), b.record("pvc-retained")); err != nil {
			t.Fatal(err)
		}
	}
	b.k.DeletePV("pvc-retained") // ... deleted by hand: the data is kept on purpose

	p.pending = apOf(t, b.create("pvc-pending", "team-a", "pending", classDyn))
	b.k.SetClaim("team-a", "pending", "uid-pending") // its PV is on its way

	id = b.create("pvc-phantom", "team-c", "phantom", classDyn)
	p.phantomPV, p.phantomAP = "pvc-phantom", apOf(t, id)
	b.bind("pvc-phantom", id, "team-c", "phantom", classDyn)
	p.phRoot = aws.ToString(b.accessPoints()[p.phantomAP].RootDirectory.Path)
	b.deleteAP(p.phantomAP) // out of band: the PV mounts nothing

	id = b.create("pvc-gone", "team-a", "gone", classDyn)
	p.gone = "pvc-gone"
	p.goneRoot = aws.ToString(b.accessPoints()[apOf(t, id)].RootDirectory.Path)
	b.deleteAP(apOf(t, id)) // deleted by hand, its record left behind

	for i, name := range []string{"pvc-fixed-1", "pvc-fixed-2"} {
		id := b.create(name, "team-f", name, classFixed)
		b.bind(name, id, "team-f", name, classFixed)
		if i == 0 {
			p.fixed1 = apOf(t, id)
		} else {
			p.fixed2 = apOf(t, id)
		}
	}

	// Another cluster on the same file system: its own record, its ID.
	client, err := efs.New(b.ctx(), efs.Config{Region: "us-east-1", Endpoint: b.url, RateLimits: unlimited})
	if err != nil {
		t.Fatal(err)
	}
	otherCtl, err := controller.New(controller.Config{DescriptiveTags: true, EFS: client, ClusterID: "the-other-cluster"})
	if err != nil {
		t.Fatal(err)
	}
	otherBed := *b
	otherBed.ctl = otherCtl
	p.foreign = apOf(t, otherBed.create("pvc-theirs", "team-x", "theirs", classDyn))

	// By hand: one with a bound volume's GID, one forging this driver's
	// tags and this cluster's ID.
	gid := *apGID(b, p.bound)
	p.sharedWith = b.handMade("terraform-1", "/shared-data", gid, map[string]string{"Name": "shared"})
	p.other = p.sharedWith
	p.forged = b.handMade("pvc-forged", "/dynamic/pvc-forged", 59999, map[string]string{
		controller.TagCluster: "true", controller.TagVolumeName: "pvc-forged", controller.TagClusterID: kubetest.KubeSystemUID})

	// Records whose create never answered: one made no access point, one
	// made it (the token and path are the record's) before its answer was
	// lost.
	j := journal.New(b.store)
	for _, v := range []journal.Volume{
		{FileSystem: testFS, Token: "pvc-never", Name: "pvc-never", Path: "/dynamic/pvc-never", UID: 55501, GID: 55501, Allocated: 55501, ClaimNamespace: "team-a", ClaimName: "never"},
		{FileSystem: testFS, Token: "pvc-unanswered", Name: "pvc-unanswered", Path: "/dynamic/pvc-unanswered", UID: 55502, GID: 55502, Allocated: 55502, ClaimNamespace: "team-a", ClaimName: "unanswered"},
	} {
		rec, _, err := j.Begin(b.ctx(), v)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.HoldID(b.ctx(), rec); err != nil {
			t.Fatal(err)
		}
	}
	p.never = "pvc-never"
	// As this driver makes it: tagged (the collector acts on no record alone).
	p.unanswered = b.handMade("pvc-unanswered", "/dynamic/pvc-unanswered", 55502, map[string]string{
		controller.TagCluster: "true", controller.TagVolumeName: "pvc-unanswered", controller.TagClusterID: kubetest.KubeSystemUID})
	p.unansweredRoot = "/dynamic/pvc-unanswered"
	p.leakRoot = aws.ToString(b.accessPoints()[p.leak].RootDirectory.Path)

	// A directory under the base path no access point reaches, and one
	// inside it (not listed: the walk stops at the first).
	p.abandoned = "/dynamic/abandoned"
	if err := os.MkdirAll(filepath.Join(b.data, testFS, "dynamic/abandoned/inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	p.apsBefore = len(b.accessPoints())
	return p
}

func apGID(b *bed, id string) *int64 {
	d := b.accessPoints()[id]
	return d.PosixUser.Gid
}

func unreferenced(fs *FileSystem) map[string]Unreferenced {
	out := map[string]Unreferenced{}
	for _, u := range fs.Unreferenced {
		out[u.AccessPoint] = u
	}
	return out
}

func onlyFS(t *testing.T, r *Report) *FileSystem {
	t.Helper()
	for _, fs := range r.FileSystems {
		if fs.ID == testFS {
			if fs.Error != "" {
				t.Fatalf("%s: %s", fs.ID, fs.Error)
			}
			return fs
		}
	}
	t.Fatalf("no %s in %+v", testFS, r.FileSystems)
	return nil
}

// The held-out state: the audit finds exactly what was planted, in JSON and
// HTML, reads without writing, and --fix plans exactly the provable leaks
// while --fix --yes deletes exactly them.
func TestAuditFindsExactlyWhatWasPlantedAndFixDeletesOnlyTheProvableLeaks(t *testing.T) {
	p := plant(t, true)
	b := p.bed
	countsBefore := b.emu.Counts()
	kubeBefore := len(b.k.Requests())

	htmlPath := filepath.Join(t.TempDir(), "audit.html")
	r, status, stderr := b.audit("--html", htmlPath)
	if status != ExitFindings || r.Outcome != "findings" {
		t.Fatalf("status %d, outcome %s, errors %v, stderr %s", status, r.Outcome, r.Errors, stderr)
	}
	html, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	// The HTML page: self-contained, the stress tool's charts, every finding.
	if n := strings.Count(string(html), "<svg"); n < 2 || strings.Contains(string(html), "<script") {
		t.Errorf("HTML: %d charts (want the timeline and a histogram per operation), script: %v", n, strings.Contains(string(html), "<script"))
	}
	for _, want := range []string{"FINDINGS", p.leak, p.unanswered, p.phantomPV, p.abandoned, p.goneRoot, "pvc-never", "EFS requests per second", "DescribeAccessPoints requests"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	fs := onlyFS(t, r)
	if fs.AccessPoints != p.apsBefore {
		t.Errorf("%d access points, want %d", fs.AccessPoints, p.apsBefore)
	}
	if r.Cluster.ID != kubetest.KubeSystemUID || !r.Cluster.Collector.Watching || !strings.HasPrefix(r.Cluster.API, "kubeconfig context test") {
		t.Errorf("cluster %+v", r.Cluster)
	}

	// Access points without a PV: whose each is, which are leaks, which count.
	u := unreferenced(fs)
	want := map[string]struct {
		owner         Owner
		leak, finding bool
	}{
		p.leak:       {OwnerThisCluster, true, true},
		p.unanswered: {OwnerThisCluster, true, true},
		p.retained:   {OwnerThisCluster, false, true},
		p.pending:    {OwnerThisCluster, false, false},
		p.forged:     {OwnerUnrecorded, false, true},
		p.foreign:    {OwnerOtherCluster, false, false},
		p.other:      {OwnerOther, false, false},
	}
	for id := range p.upstream {
		want[id] = struct {
			owner         Owner
			leak, finding bool
		}{OwnerUpstream, false, true}
	}
	if got, w := slices.Sorted(maps.Keys(u)), slices.Sorted(maps.Keys(want)); !slices.Equal(got, w) {
		t.Errorf("unreferenced %v, want %v", got, w)
	}
	for id, w := range want {
		if g := u[id]; g.Owner != w.owner || g.Leak != w.leak || g.Finding != w.finding {
			t.Errorf("%s: owner %s leak %v finding %v (%s; %s), want %s %v %v", id, g.Owner, g.Leak, g.Finding, g.Why, g.OwnerWhy, w.owner, w.leak, w.finding)
		}
	}
	if !strings.Contains(u[p.retained].Why, "marked bound") || !strings.Contains(u[p.pending].Why, "team-a/pending exists") {
		t.Errorf("reasons: retained %q, pending %q", u[p.retained].Why, u[p.pending].Why)
	}
	wantOwners := map[Owner]int{OwnerThisCluster: 7, OwnerUnrecorded: 1, OwnerOtherCluster: 1, OwnerUpstream: 5, OwnerOther: 1}
	if !maps.Equal(fs.ByOwner, wantOwners) {
		t.Errorf("by owner %v, want %v", fs.ByOwner, wantOwners)
	}
	if fs.Referenced != 4 { // pvc-bound, the two fixed-gid ones, upstream's bound one
		t.Errorf("%d referenced, want 4", fs.Referenced)
	}

	if len(fs.Phantoms) != 1 || fs.Phantoms[0].PV != p.phantomPV || fs.Phantoms[0].AccessPoint != p.phantomAP || fs.Phantoms[0].Claim != "team-c/phantom" {
		t.Errorf("phantoms %+v, want PV %s of %s", fs.Phantoms, p.phantomPV, p.phantomAP)
	}

	var shared, intended []string
	for _, g := range fs.SharedGIDs {
		var ids []string
		for _, h := range g.Holders {
			ids = append(ids, h.AccessPoint)
			if h.AccessPoint == p.bound && (!slices.Equal(h.PVs, []string{"pvc-bound"}) || !slices.Equal(h.Namespaces, []string{"team-a"})) {
				t.Errorf("holder %+v: want PV pvc-bound in team-a", h)
			}
		}
		slices.Sort(ids)
		if g.Intended {
			intended = append(intended, ids...)
		} else {
			shared = append(shared, ids...)
		}
	}
	if w := slices.Sorted(slices.Values([]string{p.bound, p.sharedWith})); !slices.Equal(shared, w) {
		t.Errorf("shared GIDs among %v, want %v", shared, w)
	}
	if w := slices.Sorted(slices.Values([]string{p.fixed1, p.fixed2})); !slices.Equal(intended, w) {
		t.Errorf("intended shared GIDs among %v, want %v (class gid %d)", intended, w, fixedGID)
	}

	var stale []string
	for _, s := range fs.StaleRecords {
		if !s.Leak {
			t.Errorf("stale record %+v is not a provable leak", s)
		}
		stale = append(stale, s.Volume)
	}
	if !slices.Equal(stale, []string{p.gone, p.never}) {
		t.Errorf("stale records %v, want %s and %s", stale, p.gone, p.never)
	}
	if d := fs.Directories; d == nil || !slices.Equal(d.Orphans, slices.Sorted(slices.Values([]string{p.abandoned, p.goneRoot, p.phRoot}))) {
		t.Errorf("orphan directories %+v, want %s, %s, %s", d, p.abandoned, p.goneRoot, p.phRoot)
	}
	// leak, unanswered, retained, forged, 4 upstream; the phantom; one shared GID; 2 stale records; 3 directories
	if fs.Findings != 8+1+1+2+3 || r.Totals.Findings != fs.Findings || r.Totals.Leaks != 2 {
		t.Errorf("findings %d (totals %+v)", fs.Findings, r.Totals)
	}

	// Read-only: no EFS mutation, no Kubernetes write.
	after := b.emu.Counts()
	for _, op := range []emulator.Op{emulator.OpCreateAccessPoint, emulator.OpDeleteAccessPoint} {
		if after[op] != countsBefore[op] {
			t.Errorf("the audit made %d %s requests", after[op]-countsBefore[op], op)
		}
	}
	for _, req := range b.k.Requests()[kubeBefore:] {
		if req.Caller == "auditor" && req.Method != "GET" {
			t.Errorf("the audit wrote to Kubernetes: %+v", req)
		}
	}
	if r.Requests.Total == 0 || len(r.Requests.Latency) == 0 {
		t.Errorf("requests %+v", r.Requests)
	}

	// --fix: the plan is exactly the provable leaks; nothing changes.
	r, status, _ = b.audit("--fix")
	wantPlan := []string{ActionDeleteAccessPoint + " " + p.leak, ActionDeleteAccessPoint + " " + p.unanswered,
		ActionReleaseRecord + " " + p.gone, ActionReleaseRecord + " " + p.never}
	slices.Sort(wantPlan)
	if got := planOf(r.Plan); status != ExitFindings || r.Plan.Applied || !slices.Equal(got, wantPlan) {
		t.Fatalf("plan %v (status %d, applied %v), want %v", got, status, r.Plan.Applied, wantPlan)
	}
	if n := len(b.accessPoints()); n != p.apsBefore {
		t.Fatalf("--fix without --yes changed EFS: %d access points, want %d", n, p.apsBefore)
	}
	recordsBefore := b.records()

	// --fix --yes: exactly those go.
	r, status, stderr = b.audit("--fix", "--yes")
	if got := planOf(r.Plan); !r.Plan.Applied || !slices.Equal(got, wantPlan) {
		t.Fatalf("applied plan %v, want %v", got, wantPlan)
	}
	for _, a := range r.Plan.Actions {
		if a.Result != ResultDone {
			t.Errorf("%s %s: %s %s", a.Kind, a.AccessPoint, a.Result, a.Error)
		}
	}
	if status != ExitFindings || r.Totals.Fixed != 4 { // what is not provable stays a finding
		t.Errorf("status %d after the fix, %d fixed (stderr %s)", status, r.Totals.Fixed, stderr)
	}
	aps := b.accessPoints()
	if len(aps) != p.apsBefore-2 {
		t.Errorf("%d access points left, want %d", len(aps), p.apsBefore-2)
	}
	for _, id := range []string{p.leak, p.unanswered} {
		if _, ok := aps[id]; ok {
			t.Errorf("leak %s not deleted", id)
		}
	}
	if n := b.records(); n != recordsBefore-4 {
		t.Errorf("%d records left, want %d", n, recordsBefore-4)
	}
	for _, name := range []string{"pvc-leak", "pvc-unanswered", "pvc-never", "pvc-gone"} {
		if b.record(name) != nil {
			t.Errorf("record of %s left", name)
		}
	}
	for _, id := range []int64{55501, 55502} {
		if h, err := journal.New(b.store).IDHolder(b.ctx(), testFS, id); err != nil || h != "" {
			t.Errorf("id %d still held by %q (%v)", id, h, err)
		}
	}

	// Audited again: no leak left; the deleted access points' directories
	// are kept (the audit mounts nothing) and now show as orphans.
	r, _, _ = b.audit("--fix")
	fs = onlyFS(t, r)
	if r.Totals.Leaks != 0 || len(fs.StaleRecords) != 0 || len(r.Plan.Actions) != 0 {
		t.Errorf("after the fix: %d leaks, stale %v, plan %v", r.Totals.Leaks, fs.StaleRecords, r.Plan.Actions)
	}
	wantDirs := slices.Sorted(slices.Values([]string{p.abandoned, p.goneRoot, p.phRoot, p.leakRoot, p.unansweredRoot}))
	if d := fs.Directories; !slices.Equal(d.Orphans, wantDirs) {
		t.Errorf("orphan directories %v, want %v", d.Orphans, wantDirs)
	}
}

func planOf(p *Plan) []string {
	var out []string
	for _, a := range p.Actions {
		subject := a.AccessPoint
		if a.Kind == ActionReleaseRecord {
			subject = a.Volume
		}
		out = append(out, a.Kind+" "+subject)
	}
	slices.Sort(out)
	return out
}

// Without an orphan collector that watched PVs for a volume's whole life,
// "no PV ever named it" is not proven: a leak whose record names its access
// point is reported, not planned. A record whose create never answered
// (no access point in it) is still provable: no PV can have named it.
func TestWithoutTheCollectorOnlyUnansweredCreatesAreProvable(t *testing.T) {
	p := plant(t, false)
	r, _, _ := p.audit("--fix")
	fs := onlyFS(t, r)
	u := unreferenced(fs)
	if l := u[p.leak]; l.Leak || !l.Finding || !strings.Contains(l.Why, "not proven") || !strings.Contains(l.Why, "no orphan collector") {
		t.Errorf("leak without a collector: %+v", l)
	}
	if !u[p.unanswered].Leak {
		t.Errorf("unanswered: %+v", u[p.unanswered])
	}
	wantPlan := []string{ActionDeleteAccessPoint + " " + p.unanswered, ActionReleaseRecord + " " + p.gone, ActionReleaseRecord + " " + p.never}
	slices.Sort(wantPlan)
	if got := planOf(r.Plan); !slices.Equal(got, wantPlan) {
		t.Errorf("plan %v, want %v", got, wantPlan)
	}
}

// A PV or claim that appears between the audit and --yes keeps its
// volume: the plan is checked again just before each action.
func TestFixReadsPVsAndClaimsAgainBeforeActing(t *testing.T) {
	p := plant(t, true)
	b := p.bed
	a := New(Config{Driver: driverName, Namespace: testNS, Grace: 0, EFS: efs.Config{Region: "us-east-1", Endpoint: b.url, RateLimits: unlimited}},
		Sources{Kube: b.auditClient(), Journal: b.store, JournalName: "test"})
	if _, err := a.Run(b.ctx()); err != nil {
		t.Fatal(err)
	}
	if n := len(a.Plan().Actions); n != 4 {
		t.Fatalf("%d actions, want 4", n)
	}
	// Meanwhile: the leak's claim is re-created, the unanswered one's PV appears.
	b.k.SetClaim("team-a", "leak", "uid-again")
	b.addPV("pvc-unanswered", "efs:"+testFS+"::"+p.unanswered, "team-a", "unanswered", classDyn)
	if err := a.Fix(b.ctx()); err != nil {
		t.Fatal(err)
	}
	results := map[string]string{}
	for _, act := range a.rep.Plan.Actions {
		results[act.Kind+" "+act.AccessPoint+act.Volume] = act.Result + " " + act.Error
	}
	for k, want := range map[string]string{
		ActionDeleteAccessPoint + " " + p.leak + "pvc-leak":             "skipped claim team-a/leak exists now",
		ActionDeleteAccessPoint + " " + p.unanswered + "pvc-unanswered": "skipped a PersistentVolume names it now",
	} {
		if results[k] != want {
			t.Errorf("%s: %q, want %q", k, results[k], want)
		}
	}
	aps := b.accessPoints()
	for _, id := range []string{p.leak, p.unanswered} {
		if _, ok := aps[id]; !ok {
			t.Errorf("%s deleted", id)
		}
	}
}

// Leaks in another account's file system, reached through the role of a
// class's provisioner secret: listed and deleted as the role; the audit's
// own credentials do not see that file system.
func TestAFileSystemOfAnotherAccountIsReadAndFixedAsTheClassRole(t *testing.T) {
	const otherAccount, otherFS, role = "210987654321", "fs-0aaaaaaaaaaaaaaa1", "arn:aws:iam::210987654321:role/efs-csi"
	b := newBed(t, func(c *emulator.Config) {
		c.FileSystemOwners = map[string]string{otherFS: otherAccount}
		c.Roles = []emulator.Role{{ARN: role, ExternalID: "ext-1"}}
	})
	b.startCollector()
	b.k.SetObject("secrets", testNS, "x-account", map[string]string{"awsRoleArn": role, "externalId": "ext-1"})
	b.k.AddStorageClass("cross", driverName, map[string]string{"provisioningMode": "efs-ap", "fileSystemId": otherFS,
		"csi.storage.k8s.io/provisioner-secret-name": "x-account", "csi.storage.k8s.io/provisioner-secret-namespace": testNS})
	own, err := efs.New(b.ctx(), efs.Config{Region: "us-east-1", Endpoint: b.url, STSEndpoint: b.url, RateLimits: unlimited})
	if err != nil {
		t.Fatal(err)
	}
	asRole, err := own.AsRole(role, "ext-1")
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := controller.New(controller.Config{DescriptiveTags: true, EFS: asRole, Journal: b.store, ClusterID: kubetest.KubeSystemUID})
	if err != nil {
		t.Fatal(err)
	}
	cross := *b
	cross.ctl = ctl
	leak := func(name string) string {
		resp, err := ctl.CreateVolume(b.ctx(), createReq(name, otherFS, "team-z", name))
		if err != nil {
			t.Fatal(err)
		}
		return apOf(t, resp.GetVolume().GetVolumeId())
	}
	leaked := leak("pvc-cross-leak")
	kept := leak("pvc-cross-bound")
	b.bind("pvc-cross-bound", "efs:"+otherFS+"::"+kept, "team-z", "pvc-cross-bound", "cross")

	r, _, stderr := b.audit("--fix", "--yes")
	var fs *FileSystem
	for _, f := range r.FileSystems {
		if f.ID == otherFS {
			fs = f
		}
	}
	if fs == nil || fs.Error != "" || fs.Credentials != "role "+role || fs.AccessPoints != 2 {
		t.Fatalf("file system %+v (errors %v, stderr %s)", fs, r.Errors, stderr)
	}
	if got := planOf(r.Plan); !slices.Equal(got, []string{ActionDeleteAccessPoint + " " + leaked}) || r.Plan.Actions[0].Result != ResultDone {
		t.Fatalf("plan %v: %+v", got, r.Plan.Actions)
	}
	aps, err := efs.Collect(b.ctx(), asRole.ListAccessPoints, otherFS)
	if err != nil {
		t.Fatal(err)
	}
	if len(aps) != 1 || aps[0].ID != kept {
		t.Errorf("left %v, want only %s", aps, kept)
	}
}

func createReq(name, fsID, ns, claim string) *csi.CreateVolumeRequest {
	return newCreateRequest(name, map[string]string{"provisioningMode": "efs-ap", "fileSystemId": fsID,
		"csi.storage.k8s.io/pvc/name": claim, "csi.storage.k8s.io/pvc/namespace": ns, "csi.storage.k8s.io/pv/name": name})
}

// S3 Files volumes are read through the S3 Files API (its listing has no
// tokens or tags: pkg/efs's client reads them), and their leak deleted
// through the controller's S3 Files backend.
func TestS3FilesVolumesAreAuditedAndFixedThroughTheirAPI(t *testing.T) {
	const s3fs = "fs-0bbbbbbbbbbbbbbb2"
	b := newBed(t, func(c *emulator.Config) { c.S3FilesFileSystems = []string{s3fs} })
	b.startCollector()
	b.k.AddStorageClass("s3", driverName, map[string]string{"provisioningMode": "s3files-ap", "fileSystemId": s3fs})
	cl := newClients(efs.Config{Region: "us-east-1", Endpoint: b.url, RateLimits: unlimited})
	own, err := cl.efsClient(b.ctx(), "")
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := controller.New(controller.Config{DescriptiveTags: true, EFS: own, Journal: b.store, ClusterID: kubetest.KubeSystemUID, Backends: s3Backend{cl}})
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string) string {
		req := createReq(name, s3fs, "team-s", name)
		req.Parameters["provisioningMode"] = "s3files-ap"
		resp, err := ctl.CreateVolume(b.ctx(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetVolume().GetVolumeId()
	}
	leaked := apOf(t, create("pvc-s3-leak"))
	boundID := create("pvc-s3-bound")
	if !strings.HasPrefix(boundID, "s3files:") {
		t.Fatalf("volume ID %s", boundID)
	}
	b.bind("pvc-s3-bound", boundID, "team-s", "pvc-s3-bound", "s3")

	r, _, stderr := b.audit("--fix", "--yes")
	var fs *FileSystem
	for _, f := range r.FileSystems {
		if f.ID == s3fs {
			fs = f
		}
	}
	if fs == nil || fs.Error != "" || fs.API != "s3files" || fs.AccessPoints != 2 || fs.Referenced != 1 || fs.ByOwner[OwnerThisCluster] != 2 {
		t.Fatalf("file system %+v (errors %v, stderr %s)", fs, r.Errors, stderr)
	}
	if got := planOf(r.Plan); !slices.Equal(got, []string{ActionDeleteAccessPoint + " " + leaked}) || r.Plan.Actions[0].Result != ResultDone {
		t.Fatalf("plan %v: %+v", got, r.Plan.Actions)
	}
	s3, err := cl.s3Files(b.ctx())
	if err != nil {
		t.Fatal(err)
	}
	aps, err := efs.Collect(b.ctx(), s3.ListAccessPoints, s3fs)
	if err != nil {
		t.Fatal(err)
	}
	if len(aps) != 1 || aps[0].ID != apOf(t, boundID) {
		t.Errorf("left %v, want only %s", aps, boundID)
	}
}

// A cluster whose every volume has its PV is clean: exit 0, in the table
// too. Without the record (its Leases may not be listed) nothing is this cluster's
// by proof: the audit says so, plans nothing and exits 2.
func TestCleanAndUnreadableRecord(t *testing.T) {
	b := newBed(t)
	id := b.create("pvc-ok", "team-a", "ok", classDyn)
	b.bind("pvc-ok", id, "team-a", "ok", classDyn)
	var stdout, stderr strings.Builder
	status := run(b.ctx(), []string{"--kubeconfig", b.kubecfg, "--efs-endpoint", b.url, "--region", "us-east-1", "--progress", "false"}, &stdout, &stderr)
	if status != ExitClean || !strings.Contains(stdout.String(), "result: CLEAN, 0 findings") || !strings.Contains(stdout.String(), "no orphan collector has run") {
		t.Errorf("status %d:\n%s\n%s", status, stdout.String(), stderr.String())
	}

	b.k.Forbid("leases", "list")
	r, status, _ := b.audit("--fix")
	if status != ExitError || r.Outcome != "error" || r.Cluster.JournalError == "" || len(r.Plan.Actions) != 0 || !strings.Contains(r.Plan.Note, "the record could not be read") {
		t.Errorf("status %d, outcome %s, journal error %q, plan %+v", status, r.Outcome, r.Cluster.JournalError, r.Plan)
	}
	if u := unreferenced(onlyFS(t, r)); len(u) != 0 || onlyFS(t, r).ByOwner[OwnerUnrecorded] != 1 {
		t.Errorf("without the record, the bound volume is unrecorded by tags: %+v %v", u, onlyFS(t, r).ByOwner)
	}
}

// The listing is the driver's client's: paged, each page retried through
// throttles and 5xx, paced, so that a throttled account still gets a
// complete audit (the figures say how many requests it cost).
func TestListingSurvivesThrottlesAndErrors(t *testing.T) {
	b := newBed(t)
	const n = 2001 // three pages
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				b.handMade(fmt.Sprintf("hand-%d", i), fmt.Sprintf("/data/%d", i), int64(1000+i), nil)
			}
		})
	}
	wg.Wait()
	// Random throttles and 500s, and a bucket of 2 requests/s that the pages,
	// asked back to back, overrun: at least one throttle every run (the
	// random faults alone spared all three pages in 11% of runs).
	b.emu.SetFault(emulator.OpDescribeAccessPoints, emulator.Fault{RandomThrottleRate: 0.4, ErrorRate: 0.2, ThrottleRate: 2, ThrottleBurst: 1})
	r, _, stderr := b.audit()
	fs := onlyFS(t, r)
	if fs.AccessPoints != n || fs.ByOwner[OwnerOther] != n || len(r.Errors) != 0 {
		t.Fatalf("%d access points, errors %v, stderr %s", fs.AccessPoints, r.Errors, stderr)
	}
	if r.Requests.ByOutcome[efs.OutcomeThrottled]+r.Requests.ByOutcome[efs.OutcomeServerError] == 0 || r.Requests.Retries == 0 ||
		r.Requests.ByOutcome[efs.OutcomeOK] != 3 {
		t.Errorf("requests %+v", r.Requests.ByOutcome)
	}
}

// A class naming several file systems (fileSystemId "fs-a, fs-b") has each
// of them audited: a leak on the second is found and fixed, and no file
// system is listed under the list's text as one ID.
func TestEveryFileSystemOfAClassIsAudited(t *testing.T) {
	const secondFS = "fs-0bbbbbbbbbbbbbbb2"
	b := newBed(t, func(c *emulator.Config) { c.FileSystems = append(c.FileSystems, secondFS) })
	b.startCollector()
	b.k.AddStorageClass("several", driverName, map[string]string{"provisioningMode": "efs-ap", "fileSystemId": testFS + ", " + secondFS})
	resp, err := b.ctl.CreateVolume(b.ctx(), createReq("pvc-second-leak", secondFS, "team-s", "pvc-second-leak"))
	if err != nil {
		t.Fatal(err)
	}
	leaked := apOf(t, resp.GetVolume().GetVolumeId())

	r, _, stderr := b.audit("--fix", "--yes")
	var ids []string
	for _, f := range r.FileSystems {
		ids = append(ids, f.ID)
		if f.Error != "" {
			t.Errorf("file system %s: %s", f.ID, f.Error)
		}
	}
	slices.Sort(ids)
	if want := []string{testFS, secondFS}; !slices.Equal(ids, want) {
		t.Fatalf("audited %v, want %v (stderr %s)", ids, want, stderr)
	}
	if got := planOf(r.Plan); !slices.Equal(got, []string{ActionDeleteAccessPoint + " " + leaked}) || r.Plan.Actions[0].Result != ResultDone {
		t.Fatalf("plan %v: %+v", got, r.Plan.Actions)
	}
}
