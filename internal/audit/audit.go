package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/progress"
	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Config configures an audit.
type Config struct {
	Driver string // the CSI driver name in PVs and StorageClasses
	// Namespace is the controller's: where the Kubernetes record keeps its
	// Leases (or ConfigMaps); LeaseNamespace ("" = Namespace) holds the orphan
	// collector's Lease.
	Namespace, LeaseNamespace string
	ClusterID                 string   // "" = the kube-system namespace's UID
	FileSystems               []string // audited besides those the classes, PVs and record name
	// Grace is how old a record must be before it can be a leak (the
	// orphan collector's --orphan-gc-grace).
	Grace time.Duration
	Limit int // access points per file system EFS allows
	// Roots are file systems' root directories as mounted here, for the
	// directory scan; LocalRoot/<fs-id> (the emulator's layout) for the
	// others when set.
	Roots     map[string]string
	LocalRoot string
	// EFS configures the EFS (and S3 Files) clients: region, endpoint,
	// pacing. Its Observer is the audit's.
	EFS    efs.Config
	Now    func() time.Time
	Logger *slog.Logger
	// Progress receives the progress display (nil: none); Bar redraws it
	// in place (a terminal) instead of a line every few seconds.
	Progress io.Writer
	Bar      bool
	// Options are shown in the report as given.
	Options any
}

// Sources are what the audit reads besides EFS.
type Sources struct {
	Kube    *kube.Client
	KubeAPI string        // where the API was found, for the report
	Journal journal.Store // nil: JournalError says why there is none
	// JournalName says where Journal is; JournalError why it is nil.
	JournalName, JournalError string
}

// Audit is one audit: Run, then Plan, then (--fix --yes) Fix.
type Audit struct {
	cfg     Config
	src     Sources
	rec     *recorder
	clients *clients
	rep     *Report
	// fss are the file systems to audit, by ID.
	fss map[string]*fsTarget
	// leaks are the candidates of the plan.
	leaks []planned
	// snaps is the record's snapshot area, by file system (nil: not read,
	// and the areas are not judged).
	snaps map[string]*snapshotRecord
}

// fsTarget is a file system and the credentials it is read with.
type fsTarget struct {
	id      string
	key     backendKey
	classes []*Class
}

// planned is a candidate of the plan and the credentials to act with.
type planned struct {
	candidate
	key backendKey
}

// New prepares an audit; it makes no call.
func New(cfg Config, src Sources) *Audit {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.LeaseNamespace = cmp.Or(cfg.LeaseNamespace, cfg.Namespace)
	cfg.Limit = cmp.Or(cfg.Limit, DefaultLimit)
	start := cfg.Now()
	rec := newRecorder(start)
	cfg.EFS.Observer = rec
	return &Audit{cfg: cfg, src: src, rec: rec, clients: newClients(cfg.EFS), fss: map[string]*fsTarget{},
		rep: &Report{Started: start, Options: cfg.Options, Cluster: Cluster{Driver: cfg.Driver, API: src.KubeAPI}}}
}

// DefaultLimit is EFS's access point limit per file system.
const DefaultLimit = 10000

// CollectorLease is the orphan collector's Lease name for a driver name
// (pkg/driver names it so).
func CollectorLease(driver string) string {
	return strings.ReplaceAll(driver, ".", "-") + "-orphan-collector"
}

// Run reads everything and judges it. The report is returned also when
// part of it could not be read (its Errors say what; Outcome "error"); the
// error is only for an audit that could not start (no Kubernetes API).
func (a *Audit) Run(ctx context.Context) (*Report, error) {
	start := time.Now()
	disp := a.startProgress(start)
	defer disp.Close()
	err := a.run(ctx)
	end := "audit done"
	if err != nil {
		end = "audit stopped (" + err.Error() + ")"
	}
	disp.Done(a.progressLine(time.Since(start), end))
	a.finish()
	return a.rep, err
}

func (a *Audit) errorf(format string, args ...any) {
	a.rep.Errors = append(a.rep.Errors, fmt.Sprintf(format, args...))
}

func (a *Audit) setStep(s string, done, total int) {
	a.rec.mu.Lock()
	a.rec.step, a.rec.fsDone, a.rec.fsTotal = s, done, total
	a.rec.mu.Unlock()
}

// startProgress shows the audit moving: on a terminal a line redrawn in
// place, in a log a line every few seconds, each with the step, what was
// read and how fast; Run ends it with a final line.
func (a *Audit) startProgress(start time.Time) *progress.Display {
	return progress.Start(a.cfg.Progress, a.cfg.Progress != nil, a.cfg.Bar, func(bool) string {
		return a.progressLine(time.Since(start), "")
	})
}

// progressLine is the progress line after elapsed; the last one says end
// instead of the step.
func (a *Audit) progressLine(elapsed time.Duration, end string) string {
	st := a.rec.now()
	secs := max(elapsed.Seconds(), 1e-3)
	step := st.step
	if end != "" {
		step = fmt.Sprintf("%s, %d of %d file systems listed", end, st.done, st.total)
	}
	took := elapsed.Truncate(100 * time.Millisecond)
	if elapsed < time.Second {
		took = elapsed.Round(time.Millisecond)
	}
	return fmt.Sprintf("%s: %d access points in %s (%.0f/s), EFS requests %d (%.1f/s, %d throttled), %s",
		step, st.listed, plural(st.pages, "page"), float64(st.listed)/secs, st.requests, float64(st.requests)/secs, st.throttled, took)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func (a *Audit) run(ctx context.Context) error {
	kc := a.src.Kube
	if kc == nil {
		return errors.New("audit: no Kubernetes API")
	}
	a.setStep("reading Kubernetes", 0, 0)
	a.rec.phase("Kubernetes")
	c := &a.rep.Cluster

	c.ID, c.IDSource = a.cfg.ClusterID, "--cluster-id"
	if c.ID == "" {
		uid, err := kc.NamespaceUID(ctx, "kube-system")
		if err != nil {
			c.IDSource = "unknown: " + err.Error()
			a.errorf("cluster ID: %v (set --cluster-id)", err)
		} else {
			c.ID, c.IDSource = uid, "the kube-system namespace's UID"
		}
	}

	classes, err := kc.StorageClasses(ctx, a.cfg.Driver)
	if err != nil {
		return err
	}
	byClass := map[string]*Class{}
	for _, sc := range classes {
		cl := a.resolveClass(ctx, sc)
		c.StorageClasses = append(c.StorageClasses, *cl)
		byClass[sc.Name] = cl
		for _, id := range cl.fileSystems {
			t := a.target(id, keyOf(cl))
			t.classes = append(t.classes, cl)
		}
	}

	pvsByFS := map[string][]*pv{}
	err = kc.PersistentVolumes(ctx, a.cfg.Driver, func(page []kube.PersistentVolume) error {
		for _, k := range page {
			c.PersistentVolumes++
			id, err := volume.ParseID(k.Handle)
			if err != nil {
				a.errorf("PV %s: volume handle %q: %v", k.Name, k.Handle, err)
				continue
			}
			p := &pv{PersistentVolume: k, id: id}
			pvsByFS[id.FileSystemID] = append(pvsByFS[id.FileSystemID], p)
			key := backendKey{api: id.API}
			if cl := byClass[k.StorageClass]; cl != nil && slices.Contains(cl.fileSystems, id.FileSystemID) {
				key = keyOf(cl)
			}
			a.target(id.FileSystemID, key)
		}
		return nil
	})
	if err != nil {
		return err
	}

	claims := map[string]bool{}
	if err := kc.Claims(ctx, func(page []kube.Claim) error {
		for _, cl := range page {
			claims[cl.Namespace+"/"+cl.Name] = true
		}
		return nil
	}); err != nil {
		return err
	}
	c.Claims = len(claims)

	records := map[string]map[string]*journal.Record{}
	c.Journal, c.JournalError = a.src.JournalName, a.src.JournalError
	if a.src.Journal != nil {
		a.setStep("reading the record", 0, 0)
		err := journal.New(a.src.Journal).Volumes(ctx, "", func(rs []*journal.Record) error {
			for _, r := range rs {
				if records[r.FileSystem] == nil {
					records[r.FileSystem] = map[string]*journal.Record{}
				}
				records[r.FileSystem][r.SentToken()] = r // by the token its access point carries
				c.Records++
			}
			return nil
		})
		if err != nil {
			c.JournalError = err.Error()
			records = map[string]map[string]*journal.Record{}
			c.Records = 0
		} else if a.snaps, err = readSnapshotRecord(ctx, a.src.Journal); err != nil {
			a.errorf("the record's snapshots: %s: the snapshot areas are not judged", err)
		}
	}
	if c.JournalError != "" {
		a.errorf("the record: %s: nothing is this cluster's by proof", c.JournalError)
	}
	for fsID, rs := range records {
		for _, r := range rs {
			a.target(fsID, backendKey{api: apiOf(r)})
			break
		}
	}
	for _, id := range a.cfg.FileSystems {
		a.target(id, backendKey{})
	}
	c.Collector = a.collector(ctx)

	ids := slices.Sorted(maps.Keys(a.fss))
	a.rep.FileSystems = make([]*FileSystem, 0, len(ids))
	for i, id := range ids {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t := a.fss[id]
		a.setStep(fmt.Sprintf("listing %s (%d/%d)", id, i+1, len(ids)), i, len(ids))
		a.rec.phase(id)
		fs := a.fileSystem(ctx, t, &fsInput{records: records[id], pvs: pvsByFS[id], claims: claims,
			cluster: c.ID, now: a.cfg.Now(), grace: a.cfg.Grace})
		a.rep.FileSystems = append(a.rep.FileSystems, fs)
	}
	a.setStep("listed", len(ids), len(ids))
	return nil
}

// target is the file system id, read with key unless a class named it
// first (the first class's credentials win).
func (a *Audit) target(id string, key backendKey) *fsTarget {
	t := a.fss[id]
	if t == nil {
		t = &fsTarget{id: id, key: key}
		a.fss[id] = t
	}
	return t
}

// resolveClass reads a class's file system and credentials.
func (a *Audit) resolveClass(ctx context.Context, sc kube.StorageClass) *Class {
	p := sc.Parameters
	cl := &Class{Name: sc.Name, API: "efs", Credentials: "own", BasePath: p[volume.ParamBasePath]}
	if p[volume.ParamProvisioningMode] == volume.ProvisioningModeS3FilesAccessPoint {
		cl.API = string(volume.APIS3Files)
	}
	if v, ok := p[volume.ParamGID]; ok {
		if g, err := strconv.ParseInt(v, 10, 64); err == nil {
			cl.FixedGID = &g
		}
	}
	ids, err := a.src.Kube.ClassFileSystems(ctx, p)
	if err != nil {
		cl.Error = "file system: " + err.Error()
		a.errorf("StorageClass %s: %s", sc.Name, cl.Error)
		return cl
	}
	cl.fileSystems = ids
	cl.FileSystem = strings.Join(ids, ",")
	ns, name, ok := kube.ProvisionerSecret(p)
	if !ok {
		return cl
	}
	if strings.Contains(ns+name, "${") {
		cl.Error = "its provisioner secret is named per claim (" + ns + "/" + name + "): read with the audit's own credentials"
		a.errorf("StorageClass %s: %s", sc.Name, cl.Error)
		return cl
	}
	role, err := a.src.Kube.KeyValue(ctx, "Secret", ns, name, controller.SecretRoleARN)
	switch {
	case errors.Is(err, kube.ErrKeyNotFound):
		return cl // a secret without a role: the controller's own credentials
	case err != nil:
		cl.Error = "provisioner secret: " + err.Error() + ": read with the audit's own credentials"
		a.errorf("StorageClass %s: %s", sc.Name, cl.Error)
		return cl
	}
	ext, err := a.src.Kube.KeyValue(ctx, "Secret", ns, name, controller.SecretExternalID)
	if err != nil && !errors.Is(err, kube.ErrKeyNotFound) {
		cl.Error = "provisioner secret: " + err.Error()
	}
	cl.Credentials = "role " + role
	a.clients.setExternalID(role, ext)
	return cl
}

// apiOf is the API of a record's volume ("" and "efs" are EFS).
func apiOf(r *journal.Record) volume.API {
	if volume.API(r.API) == volume.APIS3Files {
		return volume.APIS3Files
	}
	return volume.APIEFS
}

// keyOf is the backend a class's volumes live in.
func keyOf(cl *Class) backendKey {
	k := backendKey{}
	if cl.API == string(volume.APIS3Files) {
		k.api = volume.APIS3Files
	}
	if r, ok := strings.CutPrefix(cl.Credentials, "role "); ok {
		k.role = r
	}
	return k
}

// collector reads the orphan collector's Lease: whether a collector has
// watched PVs, since when.
func (a *Audit) collector(ctx context.Context) Collector {
	c := Collector{Lease: a.cfg.LeaseNamespace + "/" + CollectorLease(a.cfg.Driver)}
	st, ok, err := a.src.Kube.Lease(ctx, a.cfg.LeaseNamespace, CollectorLease(a.cfg.Driver))
	switch {
	case err != nil:
		c.Why = "the orphan collector's Lease " + c.Lease + " could not be read (" + err.Error() + ")"
	case !ok:
		c.Why = "no orphan collector has run (no Lease " + c.Lease + ": --orphan-gc-interval is off)"
	case !st.Held(a.cfg.Now()):
		c.State = &st
		c.Why = "no orphan collector holds its Lease " + c.Lease + " now (last renewed " + st.Renewed.Format(time.RFC3339) + ")"
	default:
		c.State, c.Watching = &st, true
		c.Why = "an orphan collector (" + st.Holder + ") holds " + c.Lease + ", made " + st.Created.Format(time.RFC3339) + ": it has watched PVs since then"
	}
	return c
}

// fileSystem lists one file system's access points and judges them.
func (a *Audit) fileSystem(ctx context.Context, t *fsTarget, in *fsInput) *FileSystem {
	fs := &FileSystem{ID: t.id, API: cmp.Or(string(t.key.api), "efs"), Credentials: t.key.credentials(), Limit: a.cfg.Limit,
		ByOwner: map[Owner]int{}, Unreferenced: []Unreferenced{}, Phantoms: []Phantom{}, SharedGIDs: []SharedGID{}, StaleRecords: []StaleRecord{}}
	for _, cl := range t.classes {
		fs.Classes = append(fs.Classes, cl.Name)
	}
	client, err := a.clients.lister(ctx, t.key)
	if err != nil {
		fs.Error = err.Error()
		a.errorf("%s: %s", t.id, fs.Error)
		return fs
	}
	err = client.ListAccessPoints(ctx, t.id, func(page []efs.AccessPoint) error {
		for _, ap := range page {
			ap.CreationInfo = nil // not judged: kept out of memory
			in.aps = append(in.aps, ap)
		}
		a.rec.page(len(page))
		return nil
	})
	if err != nil {
		fs.Error = "listing: " + err.Error()
		a.errorf("%s: %s", t.id, fs.Error)
		return fs
	}
	in.collector = proof{watching: a.rep.Cluster.Collector.Watching, why: a.rep.Cluster.Collector.Why}
	if st := a.rep.Cluster.Collector.State; st != nil {
		in.collector.since = st.Created
	}
	classes := make([]Class, len(t.classes))
	for i, cl := range t.classes {
		classes[i] = *cl
	}
	in.fixedGIDs = fixedGIDs(classes)
	j := judge(fs, in)
	for _, c := range j.leaks {
		a.leaks = append(a.leaks, planned{c, t.key})
	}
	for _, p := range j.missing {
		ap, err := client.DescribeAccessPoint(ctx, p.id.AccessPointID)
		ph := Phantom{PV: p.Name, Claim: p.claim(), Class: p.StorageClass, Handle: p.Handle, AccessPoint: p.id.AccessPointID}
		var phantom bool
		switch {
		case err == nil:
			phantom, ph.Why = phantomWhy(p, ap)
		case errors.Is(err, efs.ErrAccessPointNotFound):
			phantom, ph.Why = phantomWhy(p, nil)
		default:
			phantom, ph.Why = true, "not listed, and DescribeAccessPoint failed ("+err.Error()+"): unconfirmed"
		}
		if phantom {
			fs.Phantoms = append(fs.Phantoms, ph)
			fs.Findings++
		}
	}
	if root := a.root(t.id); root != "" {
		fs.Directories = scanDirs(root, basePaths(t.classes), reached(in))
		fs.Findings += len(fs.Directories.Orphans) + fs.Directories.More
		if a.snaps != nil {
			d := fs.Directories
			var err error
			if d.Snapshots, d.SnapshotsLeft, err = scanSnapshots(root, a.snaps[t.id]); err != nil {
				d.Error = strings.Join(append(slices.DeleteFunc([]string{d.Error}, func(s string) bool { return s == "" }), err.Error()), "; ")
			}
			fs.Findings += len(d.SnapshotsLeft)
		}
	}
	return fs
}

// root is where the file system's root directory is mounted here, or "".
func (a *Audit) root(id string) string {
	if r, ok := a.cfg.Roots[id]; ok {
		return r
	}
	if a.cfg.LocalRoot != "" {
		return filepath.Join(a.cfg.LocalRoot, id)
	}
	return ""
}

// basePaths are the base paths of a file system's classes, outermost only
// ("/" for a class without one, and for a file system no class names).
func basePaths(classes []*Class) []string {
	var bs []string
	for _, cl := range classes {
		bs = append(bs, path.Clean("/"+cl.BasePath))
	}
	if len(bs) == 0 {
		bs = []string{"/"}
	}
	slices.Sort(bs)
	bs = slices.Compact(bs)
	var out []string
	for _, b := range bs {
		inside := false
		for _, o := range out {
			inside = inside || o == "/" || strings.HasPrefix(b, o+"/")
		}
		if !inside {
			out = append(out, b)
		}
	}
	return out
}

// reached are the directories access points and static PVs reach.
func reached(in *fsInput) []string {
	roots := make([]string, 0, len(in.aps))
	byID := make(map[string]string, len(in.aps))
	for _, ap := range in.aps {
		roots = append(roots, ap.Path)
		byID[ap.ID] = ap.Path
	}
	for _, p := range in.pvs {
		switch root, ok := byID[p.id.AccessPointID]; {
		case p.id.AccessPointID == "":
			roots = append(roots, cmp.Or(p.id.Path, "/"))
		case ok && p.id.Path != "":
			roots = append(roots, path.Join(root, p.id.Path))
		}
	}
	return roots
}

// finish adds up the report.
func (a *Audit) finish() {
	r := a.rep
	r.Seconds = a.cfg.Now().Sub(r.Started).Seconds()
	r.Requests = a.rec.figures(a.cfg.Now().Sub(r.Started))
	r.addUp()
}

// addUp counts each file system's lists, adds them up, and judges the
// outcome.
func (r *Report) addUp() {
	t := &r.Totals
	*t = Totals{ByOwner: map[Owner]int{}}
	for _, fs := range r.FileSystems {
		fs.Counts = countsOf(fs)
		t.add(fs.Counts)
	}
	r.Omits = jsonOmits
	if p := r.Plan; p != nil {
		for _, act := range p.Actions {
			if act.Result == ResultDone {
				t.Fixed++
			}
		}
	}
	switch {
	case len(r.Errors) > 0:
		r.Outcome = "error"
	case t.Findings > 0:
		r.Outcome = "findings"
	default:
		r.Outcome = "clean"
	}
}
