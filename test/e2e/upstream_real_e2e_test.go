//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	efstypes "github.com/aws/aws-sdk-go-v2/service/efs/types"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/efs-csi/efs-csi-driver/test/e2e/cluster"
)

const (
	// upstreamSourceSHA256 is the sha256 of upstream's driver source v3.4.1
	// (../shared/fixtures/README.md).
	upstreamSourceSHA256 = "586ad3498891e7810ca33def30d5a25b55ccbbcbdab2018a3a32e0fae7b96eb1"
	upstreamSourceFile   = "aws-efs-csi-driver-src-3.4.1.tar.gz"
	upstreamSourceDir    = "aws-efs-csi-driver-3.4.1" // the archive's prefix
	// upstreamEntrypoint is upstream's image ENTRYPOINT (its Dockerfile), where the
	// sandbox puts the binary built from that source.
	upstreamEntrypoint = "/bin/aws-efs-csi-driver"

	realBefore = 40 // claims upstream's real controller provisions before the upgrade
	realStorm  = 60 // created just before the handover, provisioned across it
	realClass  = "efs-upstream-layout"
)

// A user of upstream's chart with upstream's real controller switches to this chart:
// upstream's chart 4.4.1 is installed with helm and its controller Deployment, read back
// from the API server, runs as upstream's pods would: upstream's driver v3.4.1, built
// from its source, in a sandbox of its pod (its image's file system layout, its service
// account, an ECS task metadata stub for the instance identity it needs outside AWS),
// with the real csi-provisioner and upstream's sidecar arguments. It provisions claims
// for real (its client tokens, GIDs, tags, paths). Then claims are created with
// CreateAccessPoint slowed down, `helm upgrade` moves the release to this chart, and the
// replicas roll: this chart's replicas start, then upstream's pods are stopped as the
// kubelet stops a pod (SIGTERM to every container at once) with creates in flight, and
// this chart's replicas take provisioning over through the csi-provisioner's leader
// election. Checked: one access point per PV, no GID on two access points one of which
// this driver made, upstream's volumes still bound to their access points, deleted
// through this driver, and no access point left once every claim is deleted.
func TestHelmUpgradeFromUpstreamsRealControllerMidCreates(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	upstreamBin := upstreamDriver(ctx, t, s)
	archive, chart, values, h, a := upstreamRelease(ctx, t, s, "upstream's controller runs in a pod sandbox (mount namespace, chroot)")
	start := time.Now()
	// A cluster that only ever ran upstream has no record of this driver: the earlier
	// scenarios' record (with its handover mark) goes, so that this chart's replicas
	// meet upstream's calls as a first install of this driver does.
	removeRecord(ctx, t, s)
	st := newEmulatorStack(ctx, t, s, s.policy(upstreamExamplePolicy))
	efsc := efsClient(st.endpoint)
	metadata := ecsTaskMetadataStub(t)
	// What the kubelet registers for upstream's node plugin (its NodeGetInfo reports the
	// zone): upstream's controller has the VOLUME_ACCESSIBILITY_CONSTRAINTS capability,
	// and with its chart's --feature-gates=Topology=true csi-provisioner provisions
	// nothing until a node offers a topology.
	registerZonalNode(ctx, t, s, "e2e-upstream-node", "topology.kubernetes.io/zone", "us-east-1a")

	if out, err := h.run(ctx, "install", helmRelease, archive, "--namespace", releaseNamespace, "-f", values); err != nil {
		t.Fatalf("helm install of upstream's chart: %v\n%s", err, out)
	}
	upstream := findDeployment(t, slices.Collect(maps.Values(releaseObjects(ctx, t, a, h))))
	st.deployment = upstream
	st.authenticate(ctx)
	n, _, _ := unstructured.NestedInt64(upstream.Object, "spec", "replicas")
	if n < 1 {
		t.Fatalf("upstream's controller Deployment asks for %d replicas", n)
	}
	var old []*replica
	for range n {
		old = append(old, startUpstreamReplica(ctx, t, s, st, upstream, upstreamBin, metadata))
	}

	// Upstream's layouts: the user's class (subPathPattern, ensureUniqueDirectory: a
	// random UUID suffix) and one with upstream's default layout (basePath/<PV name>),
	// on the same GID range.
	newClass(ctx, t, s, realClass, map[string]string{"provisioningMode": "efs-ap", "fileSystemId": fileSystemID,
		"directoryPerms": "700", "gidRangeStart": "50000", "gidRangeEnd": "60000", "basePath": "/dynamic_provisioning"}, nil)
	ns := newNamespace(ctx, t, s, "e2e-upstream-real")
	pre := func(i int) string { return fmt.Sprintf("pre-%03d", i) }
	storm := func(i int) string { return fmt.Sprintf("storm-%03d", i) }
	ns.class = helmClass
	ns.create(ctx, t, realBefore/2, pre)
	ns.class = realClass
	ns.create(ctx, t, realBefore-realBefore/2, func(i int) string { return pre(realBefore/2 + i) })
	ns.waitLive(ctx, t, realBefore)
	checkHandoverAccessPoints(ctx, t, s, efsc, realBefore)
	volumes := boundVolumes(ctx, t, ns, realBefore, pre)
	if made := madeByUpstream(ctx, t, st, volumes); made != realBefore {
		t.Fatalf("%d of the %d volumes bound before the upgrade carry upstream's token (the PV name): upstream's controller did not provision them", made, realBefore)
	}
	t.Logf("upstream's chart installed and %d claims bound by %d replicas of upstream's controller in %v",
		realBefore, n, time.Since(start).Round(time.Millisecond))

	// Creates in flight: CreateAccessPoint takes 2 to 3 s from now on, the claims come,
	// upstream's leader sends their creates, and meanwhile helm upgrades the release and
	// the replicas roll. Half the claims are of the user's class (subPathPattern with
	// ensureUniqueDirectory: upstream draws the directory's suffix at random, and this
	// driver adopts its access point all the same), half of upstream's default layout.
	setFaults(ctx, t, st, `{"CreateAccessPoint": {"latency": "2s", "jitter": "1s"}}`)
	ns.class = helmClass
	ns.create(ctx, t, realStorm/2, storm)
	ns.class = realClass
	ns.create(ctx, t, realStorm-realStorm/2, func(i int) string { return storm(realStorm/2 + i) })
	t0 := time.Now()
	if out, err := h.run(ctx, "upgrade", helmRelease, chart, "--namespace", releaseNamespace, "-f", values); err != nil {
		t.Fatalf("helm upgrade to this chart: %v\n%s", err, out)
	}
	ours := findDeployment(t, slices.Collect(maps.Values(releaseObjects(ctx, t, a, h))))
	if args := containerArgs(t, ours, "efs-plugin", nil); !slices.Contains(args, "--mode=controller") {
		t.Fatalf("the upgraded Deployment does not run this chart's arguments: %q", args)
	}
	t.Logf("helm upgrade applied in %v with %d of %d new claims pending", time.Since(t0).Round(time.Millisecond),
		ns.pending(ctx, realStorm, storm), realStorm)
	for _, o := range old {
		st.addReplica(ctx, podSpec(t, s, st, ours))
		pending := ns.pending(ctx, realStorm, storm)
		took := o.stopAsPod()
		t.Logf("upstream's replica %s stopped (SIGTERM to its containers, gone in %v) with %d claims pending",
			o.name, took.Round(time.Millisecond), pending)
	}

	live := realBefore + realStorm
	ns.waitLive(ctx, t, live)
	t.Logf("%d live volumes %v after the upgrade began", live, time.Since(t0).Round(time.Millisecond))
	checkHandoverAccessPoints(ctx, t, s, efsc, live)
	now := boundVolumes(ctx, t, ns, realBefore, pre)
	for claim, was := range volumes {
		if is := now[claim]; is != was {
			t.Errorf("claim %s was bound to %s (%s) before the upgrade, now to %q (%q)", claim, was.pv, was.handle, is.pv, is.handle)
		}
	}
	stormVolumes := boundVolumes(ctx, t, ns, realStorm, storm)
	byUpstream := madeByUpstream(ctx, t, st, stormVolumes)
	t.Logf("of the %d claims created at the handover, %d got the access point upstream's controller made, %d one of this driver",
		realStorm, byUpstream, len(stormVolumes)-byUpstream)

	t1 := time.Now()
	ns.deleteAll(ctx, t)
	waitNoLeaks(ctx, t, s, efsc)
	t.Logf("every volume (%d of them upstream's) deleted by this driver in %v; whole scenario %v", realBefore+byUpstream,
		time.Since(t1).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	st.checkAlive()
}

// upstreamDriver returns upstream's driver v3.4.1 built from the source fixture
// ($EFS_UPSTREAM_SOURCE, else ../shared/fixtures beside the repository; sha256 checked)
// into the component cache, keyed by that sha256: built once (about 75 s with a cold
// module cache), reused after. It skips the test when the fixture is missing, when
// EFS_E2E_BUILD=0 and it is not cached, or when the build cannot reach the Go module
// proxy.
func upstreamDriver(ctx context.Context, t *testing.T, s *suite) string {
	t.Helper()
	src := cmp.Or(os.Getenv("EFS_UPSTREAM_SOURCE"), filepath.Join(s.repo, "..", "shared", "fixtures", upstreamSourceFile))
	data, err := os.ReadFile(src)
	if os.IsNotExist(err) {
		t.Skipf("no upstream driver source %s (set EFS_UPSTREAM_SOURCE)", src)
	}
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != upstreamSourceSHA256 {
		t.Fatalf("%s: sha256 %x, want %s (upstream's driver source v3.4.1)", src, sum, upstreamSourceSHA256)
	}
	cache := cmp.Or(os.Getenv("EFS_E2E_CACHE"), "/var/cache/efs-csi-e2e")
	dir := filepath.Join(cache, "aws-efs-csi-driver-v3.4.1-"+upstreamSourceSHA256[:16])
	bin := filepath.Join(dir, "aws-efs-csi-driver")
	built := func() bool {
		fi, err := os.Stat(bin)
		return err == nil && fi.Mode()&0o111 != 0
	}
	if built() {
		return bin
	}
	if os.Getenv("EFS_E2E_BUILD") == "0" {
		t.Skipf("upstream's driver is not built in %s and EFS_E2E_BUILD=0 forbids building it", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// One build at a time (another suite may be building it).
	lock, err := os.OpenFile(filepath.Join(cache, ".aws-efs-csi-driver.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if built() {
		return bin
	}
	work := t.TempDir()
	if out, err := exec.CommandContext(ctx, "tar", "-xzf", src, "-C", work).CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v\n%s", src, err, out)
	}
	began := time.Now()
	tmp := filepath.Join(dir, ".aws-efs-csi-driver.tmp")
	cmd := exec.CommandContext(ctx, "go", "build", "-ldflags=-s -w", "-o", tmp, "./cmd/")
	cmd.Dir = filepath.Join(work, upstreamSourceDir)
	// Its go.sum pins every module; the modules come from the module proxy.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "CGO_ENABLED=0", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		if offline.Match(out) {
			t.Skipf("building upstream's driver needs the Go module proxy, unreachable here: %v\n%s", err, lastLines(out, 10))
		}
		t.Fatalf("go build of upstream's driver: %v\n%s", err, lastLines(out, 30))
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	t.Logf("upstream's driver v3.4.1 built in %v into %s", time.Since(began).Round(time.Second), bin)
	return bin
}

// offline matches what go build says when it cannot fetch modules.
var offline = regexp.MustCompile(`dial tcp|no such host|i/o timeout|connection refused|network is unreachable|GOPROXY=off|TLS handshake timeout|proxy\.golang\.org.*(40[34]|5\d\d)`)

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// ecsTaskMetadataStub serves what upstream's driver asks the ECS task metadata
// endpoint v4 for (GET $ECS_CONTAINER_METADATA_URI_V4/task): a task ARN (its instance
// ID) and an availability zone (its region, us-east-1, the emulator's). Outside AWS
// that is the one instance identity upstream accepts without IMDS or a Node of the
// API server's with topology labels.
func ecsTaskMetadataStub(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/task" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{
			"Cluster":          "e2e",
			"TaskARN":          "arn:aws:ecs:us-east-1:111122223333:task/e2e/0123456789abcdef0123456789abcdef",
			"AvailabilityZone": "us-east-1a",
		})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// startUpstreamReplica runs one pod of upstream's controller Deployment dep: its
// efs-plugin container in a sandbox of the pod (upstream's binary at its image's
// entrypoint, the pod's volumes and service account, the emulator's endpoint and
// credentials and the task metadata stub in its environment, its metrics on a free
// port), and the real csi-provisioner with the Deployment's arguments on the pod's
// socket, under a host name of its own (its leader-election identity).
func startUpstreamReplica(ctx context.Context, t *testing.T, s *suite, st *controllerStack, dep *unstructured.Unstructured, bin, metadata string) *replica {
	t.Helper()
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(dep.Object, &d); err != nil {
		t.Fatal(err)
	}
	pod := *d.Spec.Template.Spec.DeepCopy()
	i := len(st.replicas)
	metricsPort, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	replaceArgs(podContainer(t, &pod, "efs-plugin"), map[string]string{"--http-endpoint=": fmt.Sprintf("127.0.0.1:%d", metricsPort)})
	hostname := fmt.Sprintf("efs-csi-controller-%d", i)
	sb := newSandbox(ctx, t, s, pod, "efs-plugin", hostname)
	sb.Binary, sb.Entrypoint = bin, upstreamEntrypoint
	sb.Env = append(emulatorEnv(st.endpoint), "ECS_CONTAINER_METADATA_URI_V4="+metadata)
	// The image's efs-utils static files, which the driver copies into its config
	// directory at start; none are needed by the controller.
	sb.Empty = []string{"/etc/amazon/efs-static-files"}
	r := &replica{t: t, s: s, name: fmt.Sprintf("upstream-%d", i), endpoint: st.endpoint, hostname: hostname}
	startInSandbox(ctx, t, st, sb, r, "/var/lib/csi/sockets/pluginproxy/csi.sock", dep)
	if !slices.ContainsFunc(r.provArgs, func(a string) bool { return strings.HasPrefix(a, "--leader-election-namespace=") }) {
		r.provArgs = append(r.provArgs, "--leader-election-namespace="+releaseNamespace)
	}
	r.supervise()
	return r
}

// stopAsPod stops the replica as the kubelet stops a pod: SIGTERM to every container
// at once (calls in flight are cut as they are), SIGKILL after the grace period. It
// returns how long the last process took to exit.
func (r *replica) stopAsPod() time.Duration {
	var took time.Duration
	r.stopOnce.Do(func() {
		r.mu.Lock()
		r.stopped = true
		r.mu.Unlock()
		close(r.stopSupervisor)
		<-r.supervisorDone
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, p := range r.processes() {
			wg.Go(func() {
				d, _ := p.Stop(syscall.SIGTERM, 30*time.Second)
				mu.Lock()
				took = max(took, d)
				mu.Unlock()
			})
		}
		wg.Wait()
	})
	return took
}

// removeRecord deletes this driver's record in Leases of the release namespace (the
// Leases labelled with a record owner), which no process uses between scenarios.
func removeRecord(ctx context.Context, t *testing.T, s *suite) {
	t.Helper()
	leases := s.cluster.Client.CoordinationV1().Leases(releaseNamespace)
	const label = "efs.csi.aws.com/journal-owner" // pkg/kube.LabelJournalOwner
	if err := leases.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: label}); err != nil {
		t.Fatal(err)
	}
}

// madeByUpstream counts the volumes whose access point carries upstream's client
// token, the PV's name (upstream's CreateVolume uses the volume name; this driver
// uses GID tokens).
func madeByUpstream(ctx context.Context, t *testing.T, st *controllerStack, volumes map[string]boundVolume) int {
	t.Helper()
	aps, err := accessPoints(ctx, efsClient(st.endpoint))
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]efstypes.AccessPointDescription{}
	for _, ap := range aps {
		byID[aws.ToString(ap.AccessPointId)] = ap
	}
	n := 0
	for _, v := range volumes {
		ap, ok := byID[accessPointOf(v.handle)]
		if ok && aws.ToString(ap.ClientToken) == v.pv {
			n++
		}
	}
	return n
}

// setFaults sets the emulator's faults (its control API, PUT /_emulator/faults).
func setFaults(ctx context.Context, t *testing.T, st *controllerStack, faults string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, st.endpoint+"/_emulator/faults", strings.NewReader(faults))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /_emulator/faults %s: %s", faults, resp.Status)
	}
}

// upstreamMade reports whether ap carries upstream's client token: the volume name,
// pvc-<claim UID> (this driver's are GID tokens).
func upstreamMade(ap efstypes.AccessPointDescription) bool {
	return strings.HasPrefix(aws.ToString(ap.ClientToken), "pvc-")
}

// checkHandoverAccessPoints waits until want access points exist and checks them
// against the PVs: each PV names an existing access point of its own, there are as
// many access points as PVs, every GID is in the classes' range, and no GID is on two
// access points one of which this driver made. Upstream v3.4.1 gives one GID to its
// creates whose listings overlap (its allocator takes the lowest GID its listing shows
// free and remembers nothing): GIDs shared among upstream's access points only are
// its own doing, logged.
func checkHandoverAccessPoints(ctx context.Context, t *testing.T, s *suite, c *efs.Client, want int) {
	t.Helper()
	var aps []efstypes.AccessPointDescription
	var err error
	waitForOrTimeout(ctx, 60*time.Second, func() (bool, error) {
		aps, err = accessPoints(ctx, c)
		return len(aps) == want, err
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	byGID := map[int64][]efstypes.AccessPointDescription{}
	for _, ap := range aps {
		id := aws.ToString(ap.AccessPointId)
		ids[id] = true
		if ap.PosixUser == nil || ap.PosixUser.Gid == nil {
			t.Errorf("access point %s has no POSIX GID", id)
			continue
		}
		gid := aws.ToInt64(ap.PosixUser.Gid)
		if gid < 50000 || gid > 60000 {
			t.Errorf("access point %s GID %d outside the classes' range 50000..60000", id, gid)
		}
		byGID[gid] = append(byGID[gid], ap)
	}
	upstreamShared := 0
	for gid, on := range byGID {
		if len(on) < 2 {
			continue
		}
		if slices.IndexFunc(on, func(ap efstypes.AccessPointDescription) bool { return !upstreamMade(ap) }) < 0 {
			upstreamShared += len(on)
			continue
		}
		var desc []string
		for _, ap := range on {
			desc = append(desc, fmt.Sprintf("%s (token %s, root %s)", aws.ToString(ap.AccessPointId), aws.ToString(ap.ClientToken), rootPath(ap)))
		}
		t.Errorf("GID %d on %d access points, this driver's among them: %s", gid, len(on), strings.Join(desc, ", "))
	}
	if upstreamShared > 0 {
		t.Logf("upstream's controller gave %d of its access points a GID another of its own carries (its allocator)", upstreamShared)
	}
	checkPVsOwnAccessPoints(ctx, t, s, ids, len(aps), want)
}
