package stress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/stress/audit"
	"github.com/efs-csi/efs-csi-driver/internal/stress/report"
	"github.com/efs-csi/efs-csi-driver/internal/stress/workload"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/metrics"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// MarkerFile is written into each live volume's root directory right after
// its create answered; the checkpoint audit checks it is still there.
const MarkerFile = ".efs-csi-stress-marker"

// Run runs the workload, audits and reports. It returns the report (also
// when the run failed part way) and ErrFindings when an audit found
// something wrong. With CompareDriverArgs it runs twice and the report is
// the default run's, with the comparison.
func Run(ctx context.Context, cfg Config) (*report.Report, error) {
	if err := cfg.resolve(); err != nil {
		return nil, err
	}
	if len(cfg.CompareDriverArgs) > 0 {
		return compare(ctx, cfg)
	}
	rep, err := runOnce(ctx, cfg, "")
	summarize(cfg.Stdout, rep)
	return rep, err
}

// runOnce runs the workload once and writes its report files; label names
// the run in a comparison.
func runOnce(ctx context.Context, cfg Config, label string) (*report.Report, error) {
	r := &run{cfg: cfg, rec: workload.NewRecorder(), markers: map[string]string{}}
	r.rep = &report.Report{Started: r.rec.Started(), Mode: "remote", Label: label, Config: cfg}
	if cfg.Embedded {
		r.rep.Mode = "embedded"
	}
	err := r.run(ctx)
	return r.rep, err
}

// summarize writes the summary of a run that got as far as a report
// (one that could not start has none).
func summarize(w io.Writer, rep *report.Report) {
	if rep.Outcome != "" {
		rep.Summary(w)
	}
}

// compare runs the workload twice, each time on a fresh emulator and
// driver, with one seed: first with the driver flags of cfg, then with
// CompareDriverArgs added. The first run's report (in OutDir) holds the
// comparison; the second's is in OutDir/compared.
func compare(ctx context.Context, cfg Config) (*report.Report, error) {
	dir, err := outDir(cfg.OutDir)
	if err != nil {
		return nil, err
	}
	if cfg.Seed == 0 {
		cfg.Seed = mrand.Uint64() | 1
	}
	def := cfg
	def.OutDir = dir
	other := cfg
	other.OutDir, other.ReportJSON, other.ReportHTML = filepath.Join(dir, "compared"), "", ""
	other.DriverArgs = append(slices.Clone(cfg.DriverArgs), cfg.CompareDriverArgs...)
	other.CompareDriverArgs = nil

	rep, defErr := runOnce(ctx, def, "default")
	summarize(cfg.Stdout, rep)
	if rep.Outcome == "" || ctx.Err() != nil {
		return rep, defErr
	}
	fmt.Fprintln(cfg.Stdout)
	otherRep, otherErr := runOnce(ctx, other, "compared: "+strings.Join(cfg.CompareDriverArgs, " ")+" added")
	summarize(cfg.Stdout, otherRep)
	if otherRep.Outcome != "" {
		rep.Comparison = report.Compare(rep, otherRep, cfg.CompareDriverArgs)
		writeReport(rep, cfg.Logger)
		fmt.Fprintln(cfg.Stdout)
		rep.Comparison.Summary(cfg.Stdout)
	}
	if otherErr != nil {
		otherErr = fmt.Errorf("compared run: %w", otherErr)
	}
	for _, err := range []error{defErr, otherErr} {
		if err != nil && !errors.Is(err, ErrFindings) {
			return rep, err
		}
	}
	return rep, cmp.Or(defErr, otherErr)
}

type run struct {
	cfg Config
	rec *workload.Recorder
	rep *report.Report
	t   *target
	eng *workload.Engine

	kills       atomic.Int64
	deleteTotal atomic.Int64

	mu             sync.Mutex
	markers        map[string]string // volume name → marker path
	markerFailures []string
	apiRetries     map[string]float64
	apiCalls       float64
	requestsByRPC  map[string]float64
	scraped        bool
}

func (r *run) run(ctx context.Context) (err error) {
	cfg := &r.cfg
	outDir, err := r.outputs()
	if err != nil {
		return err
	}
	setup := setupRemote
	if cfg.Embedded {
		setup = setupEmbedded
	}
	if r.t, err = setup(ctx, cfg, outDir, r.rec.Event); err != nil {
		return err
	}
	defer r.t.close()
	defer func() { // a run cut short must not leave a shared emulator faulty
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = r.setFaults(ctx, nil)
	}()
	r.rep.Files.DriverLog = r.t.driverLog
	if err := waitReady(ctx, r.t.conn, 30*time.Second); err != nil {
		return err
	}
	defer func() { r.finish(err) }()

	faults, _ := profile(cfg.FaultProfile, cfg.FaultRate)
	params := map[string]string{}
	for k, v := range cfg.Parameters {
		params[k] = v
	}
	params["fileSystemId"] = strings.Join(r.t.fsIDs, ",")
	wcfg := workload.Config{
		Volumes: cfg.Volumes, Concurrency: cfg.Concurrency, Timeout: cfg.Timeout,
		Backoff:       workload.Backoff{Initial: cfg.BackoffInitial, Max: cfg.BackoffMax, Factor: 2},
		DuplicateRate: cfg.DuplicateRate, DuplicateCallers: cfg.DuplicateCallers, DeleteDuringCreateRate: cfg.DeleteDuringCreateRate,
		CancelWindow: cfg.CancelWindow, Parameters: params, CapacityBytes: 5 << 30, Seed: cfg.Seed,
		Recorder: r.rec,
	}
	if r.t.dataDir != "" {
		wcfg.AfterCreate = r.writeMarker
	}
	if r.eng, err = workload.New(csi.NewControllerClient(r.t.conn), wcfg); err != nil {
		return err
	}
	prog := startProgress(cfg.Stderr, cfg.Progress, r.eng, &r.kills, r.deleteTotal.Load)
	defer prog.Close()

	wctx, cancel := context.WithTimeout(ctx, cfg.MaxDuration)
	defer cancel()
	// Each phase runs under faults and chaos; audits run with neither, so
	// that they see the state the phase left, not new disturbance.
	phase := func(name string, volumes int, do func(context.Context) error) error {
		if err := r.setFaults(wctx, faults); err != nil {
			return err
		}
		var c *chaos
		if cfg.Chaos == On && r.t.driver != nil {
			c = startChaos(wctx, r.t.driver, r.t.conn, cfg.ChaosInterval, r.collectCounters, &r.kills)
		}
		start := time.Now()
		err := do(wctx)
		elapsed := time.Since(start)
		c.stop()
		p := report.Phase{Name: name, Seconds: elapsed.Seconds(), Volumes: volumes}
		if elapsed > 0 {
			p.Throughput = float64(volumes) / elapsed.Seconds()
		}
		r.rep.Phases = append(r.rep.Phases, p)
		if err != nil {
			return fmt.Errorf("%s phase: %w", name, err)
		}
		if err := r.setFaults(wctx, nil); err != nil {
			return err
		}
		return waitReady(wctx, r.t.conn, 30*time.Second)
	}

	if err := phase("create", cfg.Volumes, r.eng.CreatePhase); err != nil {
		return err
	}
	if err := r.audit(wctx, "checkpoint", true); err != nil {
		return err
	}
	live := len(r.eng.Live())
	pr := r.eng.Progress()
	r.deleteTotal.Store(int64(live) + pr.Deleted + pr.Undelete)
	if err := phase("delete", live, r.eng.DeletePhase); err != nil {
		return err
	}
	if err := r.audit(wctx, "final", false); err != nil {
		return err
	}
	prog.Close()
	if n := r.rep.Findings(); n > 0 {
		return fmt.Errorf("%w: %d", ErrFindings, n)
	}
	return r.createsFailed()
}

// createsFailed is ErrCreatesFailed when claims never got a volume: any
// claim, or, under a fault profile that makes final create errors expected,
// every claim. A claim deleted while provisioning may end without one.
func (r *run) createsFailed() error {
	r.rep.FromVolumes(r.eng.Results())
	v := r.rep.Volumes
	if v.Unprovisioned == 0 || (failuresExpected(r.cfg.FaultProfile) && v.Created > 0) {
		return nil
	}
	return fmt.Errorf("%w: %d of %d claims never got a volume (final codes %v)", ErrCreatesFailed, v.Unprovisioned, v.Requested, v.FailedByCode)
}

// outDir creates the report directory: dir, or a new temporary one.
func outDir(dir string) (string, error) {
	var err error
	if dir == "" {
		dir, err = os.MkdirTemp("", "efs-csi-stress-"+time.Now().Format("20060102-150405")+"-")
	} else {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return "", fmt.Errorf("report directory: %w", err)
	}
	return dir, nil
}

// outputs creates the report directory and names the report files.
func (r *run) outputs() (string, error) {
	cfg := &r.cfg
	dir, err := outDir(cfg.OutDir)
	if err != nil {
		return "", err
	}
	r.rep.Files.JSON, r.rep.Files.HTML = cfg.ReportJSON, cfg.ReportHTML
	if r.rep.Files.JSON == "" {
		r.rep.Files.JSON = filepath.Join(dir, "report.json")
	}
	if r.rep.Files.HTML == "" {
		r.rep.Files.HTML = filepath.Join(dir, "report.html")
	}
	return dir, nil
}

// setFaults puts the profile's faults in force (nil: clears them). With the
// "none" profile the EFS endpoint is left alone: it may not be an emulator.
func (r *run) setFaults(ctx context.Context, f faultSet) error {
	if r.t.faults == nil || r.cfg.FaultProfile == ProfileNone {
		return nil
	}
	if len(f) == 0 {
		return r.t.faults.reset(ctx)
	}
	return r.t.faults.set(ctx, f)
}

// finish fills the report from what was recorded and writes it, whatever
// happened.
func (r *run) finish(runErr error) {
	cfg := &r.cfg
	calls, ops, events := r.rec.Snapshot()
	total := time.Since(r.rec.Started())
	r.rep.Seconds = total.Seconds()
	r.rep.FromCalls(calls, ops, events, total)
	if r.eng != nil {
		r.rep.FromVolumes(r.eng.Results())
	}
	r.rep.Chaos = report.Chaos{Enabled: cfg.Chaos == On && r.t.driver != nil, Kills: int(r.kills.Load())}
	if r.t.driver != nil {
		r.rep.Chaos.UnexpectedExits = int(r.t.driver.unexpected.Load())
		for _, c := range r.t.driver.crashes() {
			r.rep.Incidents = append(r.rep.Incidents, "driver exited unexpectedly: "+c)
		}
	}
	r.collectCounters()
	r.mu.Lock()
	r.rep.Driver = report.Driver{Scraped: r.scraped, APIRetries: r.apiRetries, APICalls: r.apiCalls, RequestsByRPC: r.requestsByRPC}
	for _, f := range r.markerFailures {
		r.rep.Incidents = append(r.rep.Incidents, "marker not written: "+f)
	}
	r.mu.Unlock()
	if r.t.faults != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if counts, err := r.t.faults.counts(ctx); err == nil {
			r.rep.Emulator.Counts = counts
		}
		cancel()
	}
	switch {
	case runErr == nil && r.rep.Findings() == 0:
		r.rep.Outcome = "clean"
	case runErr == nil || errors.Is(runErr, ErrFindings):
		r.rep.Outcome = "findings"
	case errors.Is(runErr, ErrCreatesFailed):
		r.rep.Outcome = "creates-failed"
		r.rep.Error = runErr.Error()
	case errors.Is(runErr, context.Canceled):
		r.rep.Outcome = "interrupted"
		r.rep.Error = runErr.Error()
	default:
		r.rep.Outcome = "error"
		r.rep.Error = runErr.Error()
	}
	writeReport(r.rep, cfg.Logger)
}

// writeReport writes the JSON and HTML files of rep.
func writeReport(rep *report.Report, log *slog.Logger) {
	if err := rep.WriteJSON(rep.Files.JSON); err != nil {
		log.Error("write JSON report", slog.Any("error", err))
	}
	if err := rep.WriteHTML(rep.Files.HTML); err != nil {
		log.Error("write HTML report", slog.Any("error", err))
	}
}

var (
	operationLabel = regexp.MustCompile(`operation="([^"]*)"`)
	methodLabel    = regexp.MustCompile(`method="([^"]*)"`)
)

// collectCounters adds the running driver's EFS API counters to the totals;
// called just before each kill and once at the end, so that every process
// contributes its last reading.
func (r *run) collectCounters() {
	if r.t.metricsURL == "" {
		return
	}
	samples, err := audit.Scrape(context.Background(), r.t.metricsURL)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scraped = true
	if r.apiRetries == nil {
		r.apiRetries, r.requestsByRPC = map[string]float64{}, map[string]float64{}
	}
	for series, v := range samples {
		switch {
		case strings.HasPrefix(series, "efs_csi_api_retries_total{"):
			addByLabel(r.apiRetries, operationLabel, series, v)
		case strings.HasPrefix(series, metrics.RPCRequestsName+"{"):
			addByLabel(r.requestsByRPC, methodLabel, series, v)
		}
	}
	r.apiCalls += audit.Sum(samples, "efs_csi_api_calls_total")
}

// addByLabel adds v to sums under the value of the label that label matches in series.
func addByLabel(sums map[string]float64, label *regexp.Regexp, series string, v float64) {
	if m := label.FindStringSubmatch(series); m != nil {
		sums[m[1]] += v
	}
}

// settle waits until the driver is at rest (no call in flight, no lock
// held) or cfg.Settle passes, and returns its last metrics.
func (r *run) settle(ctx context.Context) map[string]float64 {
	if r.t.metricsURL == "" {
		return nil
	}
	deadline := time.Now().Add(r.cfg.Settle)
	for {
		samples, err := audit.Scrape(ctx, r.t.metricsURL)
		atRest := err == nil && samples[metrics.LocksHeldName] == 0 && samples[metrics.InFlightName] == 0
		if atRest || time.Now().After(deadline) || ctx.Err() != nil {
			if err != nil {
				return map[string]float64{} // both gauges reported missing
			}
			return samples
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// audit gathers the inputs and checks them.
func (r *run) audit(ctx context.Context, name string, checkpoint bool) error {
	r.rec.Event("phase", name+" audit")
	gauges := r.settle(ctx)
	list := func(fsID string) ([]efs.AccessPoint, error) { return audit.ListAccessPoints(ctx, r.t.efs, fsID) }
	if r.t.s3 != nil {
		list = func(fsID string) ([]efs.AccessPoint, error) { return audit.ListS3FilesAccessPoints(ctx, r.t.s3, fsID) }
	}
	var aps []efs.AccessPoint
	for _, fsID := range r.t.fsIDs {
		more, err := list(fsID)
		if err != nil {
			return err
		}
		aps = append(aps, more...)
	}
	mounts, err := audit.ProcessTempMounts(r.t.tmpDir)
	if err != nil {
		return err
	}
	dirs, err := audit.TempDirs(r.t.tmpDir)
	if err != nil {
		return err
	}
	in := audit.Inputs{
		FileSystemIDs: r.t.fsIDs, AccessPoints: aps, Live: r.eng.Live(), RunNames: r.eng.Names(),
		Exclusive: r.cfg.Exclusive, Answers: map[string][]string{}, Mounts: mounts, TmpDirs: dirs, Gauges: gauges,
	}
	if r.cfg.Dirs() && r.t.dataDir != "" {
		in.Dirs, in.DirsOwned = r.dirs(in.Live), r.t.rootDirDel
	}
	results := r.eng.Results()
	for _, v := range results {
		// A claim deleted during provisioning may rightly get two volumes:
		// one provisioner deletes the first before the other creates anew.
		// Each deleted what it got; a leak would show as such.
		if !v.DeleteDuringCreate {
			in.Answers[v.Name] = v.Answers
		}
	}
	r.mu.Lock()
	for _, v := range results {
		path, ok := r.markers[v.Name]
		if !ok {
			continue
		}
		_, statErr := os.Stat(path)
		switch {
		case checkpoint && v.State == workload.Live:
			in.Markers = append(in.Markers, audit.Marker{Volume: v.Name, Path: path, Present: statErr == nil})
		case !checkpoint && v.State == workload.Deleted && r.t.rootDirDel:
			if _, err := os.Stat(filepath.Dir(path)); err == nil {
				in.RootDirsLeft = append(in.RootDirsLeft, filepath.Dir(path))
			}
		}
	}
	r.mu.Unlock()
	rep := audit.Check(in)
	r.rep.Audits = append(r.rep.Audits, report.Audit{Name: name, Report: rep})
	for _, f := range rep.All() {
		r.cfg.Logger.Warn("audit finding", slog.String("audit", name), slog.String("finding", f))
	}
	return nil
}

// dirs is what the audit sees of directory volumes' directories, through
// the emulator's data directory: each live volume's, and every directory
// beside them (their parents' entries: the class's base directory), named
// by the volume name their last component starts with.
func (r *run) dirs(live map[string]string) map[string]audit.Dir {
	out := map[string]audit.Dir{}   // by audit.DirKey
	parents := map[[2]string]bool{} // file system, directory
	for _, id := range live {
		vid, err := volume.ParseID(id)
		if err != nil || !vid.Dir {
			continue
		}
		out[audit.DirKey(vid.FileSystemID, vid.Path)] = statDir(filepath.Join(r.t.dataDir, vid.FileSystemID, vid.Path))
		parents[[2]string{vid.FileSystemID, filepath.Dir(vid.Path)}] = true
	}
	if base := r.cfg.Parameters[volume.ParamBasePath]; base != "" {
		for _, fsID := range r.t.fsIDs {
			parents[[2]string{fsID, filepath.Clean("/" + base)}] = true
		}
	}
	names := r.eng.Names()
	for fp := range parents {
		fsDir, parent := filepath.Join(r.t.dataDir, fp[0]), fp[1]
		entries, _ := os.ReadDir(filepath.Join(fsDir, parent))
		for _, e := range entries {
			p := filepath.Join(parent, e.Name())
			if !e.IsDir() {
				continue
			}
			d, ok := out[audit.DirKey(fp[0], p)]
			if !ok {
				d = statDir(filepath.Join(fsDir, p))
			}
			for n := range names {
				if strings.HasPrefix(e.Name(), n) {
					d.Name = n
				}
			}
			out[audit.DirKey(fp[0], p)] = d
		}
	}
	return out
}

func statDir(p string) audit.Dir {
	fi, err := os.Stat(p)
	if err != nil || !fi.IsDir() {
		return audit.Dir{}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return audit.Dir{Exists: true, UID: -1, GID: -1}
	}
	return audit.Dir{Exists: true, UID: int64(st.Uid), GID: int64(st.Gid)}
}

// writeMarker puts a file into a new live volume's root directory, through
// the emulator's data directory: if a later delete of another volume (or a
// buggy retry) removes it, the checkpoint audit says so.
func (r *run) writeMarker(ctx context.Context, v *workload.Volume) {
	fail := func(format string, a ...any) {
		r.mu.Lock()
		r.markerFailures = append(r.markerFailures, v.Name+": "+fmt.Sprintf(format, a...))
		r.mu.Unlock()
	}
	fsID, apID, ok := audit.ParseVolumeID(v.ID())
	var ap *efs.AccessPoint
	var err error
	if id, perr := volume.ParseID(v.ID()); perr == nil && id.Dir {
		fsID, ap, ok = id.FileSystemID, &efs.AccessPoint{Path: id.Path}, true // a directory volume's root is its path
	}
	if !ok {
		fail("volume ID %q", v.ID())
		return
	}
	switch {
	case ap != nil:
	case r.t.s3 != nil:
		ap, err = audit.DescribeS3FilesAccessPoint(ctx, r.t.s3, apID)
	default:
		ap, err = audit.DescribeAccessPoint(ctx, r.t.efs, apID)
	}
	if err != nil {
		fail("%v", err)
		return
	}
	fsDir := filepath.Join(r.t.dataDir, fsID)
	root := filepath.Join(fsDir, ap.Path)
	if !strings.HasPrefix(root, fsDir+string(filepath.Separator)) {
		fail("root directory %q is not below the file system", ap.Path)
		return
	}
	path := filepath.Join(root, MarkerFile)
	// A root directory missing right after its create answered is data
	// already lost: the marker stays recorded and the audit finds it absent.
	_ = os.WriteFile(path, []byte(v.Name+"\n"), 0o600)
	r.mu.Lock()
	r.markers[v.Name] = path
	r.mu.Unlock()
}
