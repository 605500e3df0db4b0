//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	efstypes "github.com/aws/aws-sdk-go-v2/service/efs/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

const (
	storageClass = "efs-sc"
	firstBatch   = 200
	secondBatch  = 100
	deleteFromA  = 100 // of the first batch, deleted while the second provisions
	deleteFromB  = 50  // of the second batch, deleted right after creation
	overlapPVCs  = 100
)

// The scenario on a real control plane: 200 PVCs at once all get Bound; PVCs are
// deleted while others are still provisioning; the driver restarts and the provisioner is
// killed on the way; in the end no access point is left and no two live access points
// ever shared a GID. csi-provisioner runs with the chart's RBAC (a token of the chart's
// service account), so least privilege is proven enough, too.
func TestProvisioningAtScaleSurvivesRestartsWithoutLeaks(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	st := startControllerStack(ctx, t, s, stackOptions{replicas: 1, leaderElection: true})
	r := st.replicas[0]
	ns := newNamespace(ctx, t, s, "e2e-scale")
	efsc := efsClient(st.endpoint)
	nameA := func(i int) string { return fmt.Sprintf("a-%03d", i) }
	nameB := func(i int) string { return fmt.Sprintf("b-%03d", i) }

	// Phase 1: 200 PVCs at once; the driver restarts (SIGTERM, graceful) once a third of
	// them is bound, with the rest in flight.
	t0 := time.Now()
	ns.create(ctx, t, firstBatch, nameA)
	waitFor(ctx, t, "a third of the first batch bound", func() (bool, error) {
		n, err := ns.bound(ctx)
		return n >= firstBatch/3, err
	})
	took, graceful := r.driver.Stop(syscall.SIGTERM, 45*time.Second)
	t.Logf("driver stopped on SIGTERM in %v (graceful: %v)", took.Round(time.Millisecond), graceful)
	if !graceful {
		t.Errorf("the driver did not exit within 45 s of SIGTERM")
	}
	r.startDriver(ctx)
	waitFor(ctx, t, "all of the first batch bound", func() (bool, error) {
		n, err := ns.bound(ctx)
		return n == firstBatch, err
	})
	t.Logf("phase 1: %d PVCs bound in %v (driver restarted once)", firstBatch, time.Since(t0).Round(time.Millisecond))
	// The chart's liveness probe of the provisioner container.
	waitFor(ctx, t, "csi-provisioner /healthz/leader-election answers 200", func() (bool, error) { return r.provisionerHealthy(ctx) })
	seen := map[string]int32{} // access point -> GID, over the whole run
	checkAccessPoints(ctx, t, s, efsc, seen, firstBatch)

	// Phase 2: 100 more at once; right away half of the first batch and half of the new
	// one are deleted, the latter mostly before they are provisioned. The provisioner is
	// killed (SIGKILL: it loses its in-flight memory) in the middle; the replica starts it
	// again as kubelet would.
	t1 := time.Now()
	ns.create(ctx, t, secondBatch, nameB)
	pendingAtDelete := ns.pending(ctx, deleteFromB, nameB)
	ns.delete(ctx, t, deleteFromB, nameB)
	ns.delete(ctx, t, deleteFromA, nameA)
	t.Logf("phase 2: deleted %d + %d PVCs; %d of the second batch's deleted ones were not bound yet", deleteFromA, deleteFromB, pendingAtDelete)
	if pendingAtDelete == 0 {
		t.Log("note: every deleted PVC of the second batch was already bound: the in-flight deletion case was not exercised this time")
	}
	waitFor(ctx, t, "a tenth of the second batch bound", func() (bool, error) {
		n, err := ns.bound(ctx)
		return n >= firstBatch-deleteFromA+secondBatch/10, err
	})
	r.currentProvisioner().Kill()
	t.Log("provisioner killed (SIGKILL)")
	live := firstBatch - deleteFromA + secondBatch - deleteFromB
	ns.waitLive(ctx, t, live)
	t.Logf("phase 2: %d live volumes in %v (provisioner killed once)", live, time.Since(t1).Round(time.Millisecond))
	checkAccessPoints(ctx, t, s, efsc, seen, live)

	// Phase 3: delete the rest; every volume and access point must go.
	t2 := time.Now()
	n := ns.deleteAll(ctx, t)
	waitNoLeaks(ctx, t, s, efsc)
	t.Logf("phase 3: %d PVCs deleted, every volume gone in %v", n, time.Since(t2).Round(time.Millisecond))
	st.checkAlive()
	st.logUsage()
	t.Logf("access points seen in all: %d, distinct GIDs at every check; csi-provisioner started %d times; whole scenario %v",
		len(seen), r.starts(), time.Since(start).Round(time.Millisecond))
}

// Two controller replicas both active at once, as during a leader election handover, with
// no election at all (the worst case: both provisioners act on every PVC and both drivers
// get every CreateVolume and DeleteVolume), serving one file system: each PVC still gets
// exactly one access point, no GID is given twice, and nothing is left after deletion.
func TestTwoActiveControllersNeitherLeakNorDuplicate(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	st := startControllerStack(ctx, t, s, stackOptions{replicas: 2, leaderElection: false})
	ns := newNamespace(ctx, t, s, "e2e-overlap")
	efsc := efsClient(st.endpoint)
	name := func(i int) string { return fmt.Sprintf("o-%03d", i) }

	ns.create(ctx, t, overlapPVCs, name)
	ns.waitLive(ctx, t, overlapPVCs)
	t.Logf("%d PVCs bound by two active controllers in %v", overlapPVCs, time.Since(start).Round(time.Millisecond))
	checkAccessPoints(ctx, t, s, efsc, map[string]int32{}, overlapPVCs)

	t1 := time.Now()
	ns.deleteAll(ctx, t)
	waitNoLeaks(ctx, t, s, efsc)
	t.Logf("every volume gone in %v", time.Since(t1).Round(time.Millisecond))
	st.checkAlive()
	st.logUsage()
}

// checkAccessPoints compares the file system's access points with the PVs: as many as
// want, one per PV, every GID distinct (and, over the whole run, an access point never
// changes its GID). seen accumulates access point -> GID.
func checkAccessPoints(ctx context.Context, t *testing.T, s *suite, c *efs.Client, seen map[string]int32, want int, ignore ...func(efstypes.AccessPointDescription) bool) {
	t.Helper()
	// An access point whose claim was deleted while a provisioner that was then
	// killed had its CreateVolume in flight is left to the driver's orphan
	// collector (a few seconds here): give it the time before counting.
	var aps []efstypes.AccessPointDescription
	var err error
	waitForOrTimeout(ctx, 60*time.Second, func() (bool, error) {
		aps, err = accessPoints(ctx, c)
		aps = withoutIgnored(aps, ignore)
		return len(aps) == want, err
	})
	if err != nil {
		t.Fatal(err)
	}
	byGID := map[int32]string{}
	ids := map[string]bool{}
	for _, ap := range aps {
		id := aws.ToString(ap.AccessPointId)
		ids[id] = true
		if ap.PosixUser == nil || ap.PosixUser.Gid == nil {
			t.Errorf("access point %s has no POSIX GID", id)
			continue
		}
		gid := aws.ToInt64(ap.PosixUser.Gid)
		g := int32(gid)
		if other, dup := byGID[g]; dup {
			t.Errorf("GID %d given twice: access points %s and %s", gid, other, id)
		}
		byGID[g] = id
		if prev, ok := seen[id]; ok && prev != g {
			t.Errorf("access point %s changed GID from %d to %d", id, prev, g)
		}
		seen[id] = g
		if gid < 50000 || gid > 60000 {
			t.Errorf("access point %s GID %d outside the StorageClass range 50000..60000", id, gid)
		}
	}
	checkPVsOwnAccessPoints(ctx, t, s, ids, len(aps), want)
}

// checkPVsOwnAccessPoints checks that each CSI PV names one of the access points ids (n
// listed), no two PVs the same, and that there are want PVs and want access points.
func checkPVsOwnAccessPoints(ctx context.Context, t *testing.T, s *suite, ids map[string]bool, n, want int) {
	t.Helper()
	pvs, err := s.cluster.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var handles []string
	for _, pv := range pvs.Items {
		if pv.Spec.CSI == nil {
			continue
		}
		h := pv.Spec.CSI.VolumeHandle
		handles = append(handles, h)
		ap := h[strings.LastIndex(h, "::")+2:]
		if !ids[ap] {
			t.Errorf("PV %s: volume %s names no existing access point", pv.Name, h)
		}
	}
	if n != want || len(handles) != want {
		t.Errorf("%d access points and %d PVs, want %d of each", n, len(handles), want)
	}
	slices.Sort(handles)
	if len(slices.Compact(handles)) != len(handles) {
		t.Errorf("two PVs share a volume handle")
	}
}

func accessPoints(ctx context.Context, c *efs.Client) ([]efstypes.AccessPointDescription, error) {
	return accessPointsOf(ctx, c, fileSystemID)
}

// accessPointsOf lists the access points of file system fsID.
func accessPointsOf(ctx context.Context, c *efs.Client, fsID string) ([]efstypes.AccessPointDescription, error) {
	var out []efstypes.AccessPointDescription
	pages := efs.NewDescribeAccessPointsPaginator(c, &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, page.AccessPoints...)
	}
	return out, nil
}

// namespace is a test's own namespace of PVCs on a StorageClass: the example's unless
// the test sets class.
type namespace struct {
	s     *suite
	name  string
	class string
}

func newNamespace(ctx context.Context, t *testing.T, s *suite, name string) *namespace {
	t.Helper()
	if _, err := s.cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &namespace{s: s, name: name, class: storageClass}
}

func (ns *namespace) pvcs() typedcorev1.PersistentVolumeClaimInterface {
	return ns.s.cluster.Client.CoreV1().PersistentVolumeClaims(ns.name)
}

// create makes PVCs name(0..n-1) at once.
func (ns *namespace) create(ctx context.Context, t *testing.T, n int, name func(int) string) {
	t.Helper()
	parallel(t, n, func(i int) error {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: ns.name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
				StorageClassName: aws.String(ns.class),
				Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				},
			},
		}
		_, err := ns.pvcs().Create(ctx, pvc, metav1.CreateOptions{})
		return err
	})
}

// delete deletes PVCs name(0..n-1) at once.
func (ns *namespace) delete(ctx context.Context, t *testing.T, n int, name func(int) string) {
	t.Helper()
	parallel(t, n, func(i int) error {
		err := ns.pvcs().Delete(ctx, name(i), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// deleteAll deletes every PVC left in the namespace and returns how many.
func (ns *namespace) deleteAll(ctx context.Context, t *testing.T) int {
	t.Helper()
	list, err := ns.pvcs().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(list.Items))
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	ns.delete(ctx, t, len(names), func(i int) string { return names[i] })
	return len(names)
}

// pending counts how many of PVCs name(0..n-1) are not bound.
func (ns *namespace) pending(ctx context.Context, n int, name func(int) string) int {
	pending := 0
	for i := range n {
		pvc, err := ns.pvcs().Get(ctx, name(i), metav1.GetOptions{})
		if err == nil && pvc.Status.Phase != corev1.ClaimBound {
			pending++
		}
	}
	return pending
}

func (ns *namespace) bound(ctx context.Context) (int, error) { return ns.boundWithPrefix(ctx, "") }

// waitLive waits until live PVCs are bound and exactly as many PVs exist (the volumes
// of deleted PVCs are gone).
func (ns *namespace) waitLive(ctx context.Context, t *testing.T, live int) {
	t.Helper()
	waitFor(ctx, t, fmt.Sprintf("%d PVCs bound and as many PVs", live), func() (bool, error) {
		n, err := ns.bound(ctx)
		if err != nil || n != live {
			return false, err
		}
		pvs, err := countPVs(ctx, ns.s)
		return pvs == live, err
	})
}

// waitNoLeaks waits until no PV is left, then until no access point is: DeleteVolume
// returned before each PV went, but a CreateVolume that a provisioner abandoned (killed,
// or its PVC deleted) may still finish, so the access point count gets time to settle
// before what is left is called a leak.
func waitNoLeaks(ctx context.Context, t *testing.T, s *suite, c *efs.Client, ignore ...func(efstypes.AccessPointDescription) bool) {
	t.Helper()
	waitFor(ctx, t, "every PV gone", func() (bool, error) {
		n, err := countPVs(ctx, s)
		return n == 0, err
	})
	var leaked []efstypes.AccessPointDescription
	var err error
	waitForOrTimeout(ctx, 90*time.Second, func() (bool, error) {
		leaked, err = accessPoints(ctx, c)
		leaked = withoutIgnored(leaked, ignore)
		return len(leaked) == 0, err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ap := range leaked {
		t.Errorf("access point leaked: %s root %s tags %v", aws.ToString(ap.AccessPointId), rootPath(ap), tagMap(ap.Tags))
		noteLeak(t, aws.ToString(ap.AccessPointId), aws.ToString(ap.ClientToken))
	}
}

// withoutIgnored is aps without those any of ignore matches.
func withoutIgnored(aps []efstypes.AccessPointDescription, ignore []func(efstypes.AccessPointDescription) bool) []efstypes.AccessPointDescription {
	return slices.DeleteFunc(aps, func(ap efstypes.AccessPointDescription) bool {
		return slices.ContainsFunc(ignore, func(f func(efstypes.AccessPointDescription) bool) bool { return f(ap) })
	})
}

// leakNotes holds, per test, the IDs and client tokens of the access points it found
// leaked: the stack's cleanup prints every log line that names them, last, where CI's
// excerpt of a failed run shows them.
var leakNotes sync.Map // test name -> *[]string

func noteLeak(t *testing.T, ids ...string) {
	v, _ := leakNotes.LoadOrStore(t.Name(), new([]string))
	p := v.(*[]string)
	for _, id := range ids {
		if id != "" {
			*p = append(*p, id)
		}
	}
}

// explainLeaks writes, for each leaked access point of t, the lines of paths that name
// it (at most 8 per file and name).
func explainLeaks(t *testing.T, paths []string) {
	v, ok := leakNotes.Load(t.Name())
	if !ok {
		return
	}
	for _, id := range *v.(*[]string) {
		for _, path := range paths {
			b, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			var hits []string
			for line := range strings.SplitSeq(string(b), "\n") {
				if strings.Contains(line, id) && len(hits) < 8 {
					hits = append(hits, line[:min(len(line), 600)])
				}
			}
			if len(hits) > 0 {
				t.Logf("---- lines of %s naming leaked %s\n%s", path, id, strings.Join(hits, "\n"))
			}
		}
	}
}

// parallel runs f(0..n-1) with up to 50 at once, as a burst of kubectl users would.
func parallel(t *testing.T, n int, f func(int) error) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, 50)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
}

func countPVs(ctx context.Context, s *suite) (int, error) {
	list, err := s.cluster.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	return len(list.Items), nil
}

// waitFor polls cond until it holds; the test fails when ctx ends first. Polling the
// observable state is how the test follows the cluster: nothing is ordered by sleeping.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	if err := poll(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// waitForOrTimeout polls cond for at most d and reports nothing: the caller checks.
func waitForOrTimeout(ctx context.Context, d time.Duration, cond func() (bool, error)) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_ = poll(ctx, cond)
}

func poll(ctx context.Context, cond func() (bool, error)) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond()
		if ok && err == nil {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func efsClient(endpoint string) *efs.Client {
	return efs.New(efs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  aws.AnonymousCredentials{},
	})
}

// emulatorEnv points the AWS SDK of the driver at the emulator.
func emulatorEnv(endpoint string) []string {
	return []string{
		"AWS_ENDPOINT_URL_EFS=" + endpoint,
		"AWS_ENDPOINT_URL_STS=" + endpoint,     // the emulator's STS, for roles of provisioner secrets
		"AWS_ENDPOINT_URL_S3FILES=" + endpoint, // and its S3 Files API, for s3files-ap classes
		"AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=x",
		"AWS_SECRET_ACCESS_KEY=x",
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

func rootPath(ap efstypes.AccessPointDescription) string {
	if ap.RootDirectory == nil {
		return ""
	}
	return aws.ToString(ap.RootDirectory.Path)
}

func tagMap(tags []efstypes.Tag) map[string]string {
	m := map[string]string{}
	for _, tg := range tags {
		m[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
	}
	return m
}

// testWriter sends process log tails to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
