//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	efstypes "github.com/aws/aws-sdk-go-v2/service/efs/types"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/efs-csi/efs-csi-driver/test/e2e/cluster"
	"github.com/efs-csi/efs-csi-driver/test/e2e/manifests"
)

const (
	fileSystemID   = "fs-0123456789abcdef0" // the example StorageClass names it
	storageClass   = "efs-sc"
	controllerSA   = "efs-csi-controller-sa"
	firstBatch     = 200
	secondBatch    = 100
	deleteFromA    = 100 // of the first batch, deleted while the second provisions
	deleteFromB    = 50  // of the second batch, deleted right after creation
	scaleNamespace = "e2e-scale"
	// The scenario restarts the provisioner twice (driver restart, kill); more starts
	// than this mean it crash-loops.
	maxProvisionerStarts = 10
)

// controllerStack is the emulator, the driver and csi-provisioner of one test, started
// with the arguments the chart gives them in a cluster.
type controllerStack struct {
	t          *testing.T
	s          *suite
	dir        string
	endpoint   string // emulator URL
	socket     string
	driverArgs []string
	provArgs   []string
	emulator   *cluster.Process
	driver     *cluster.Process

	// csi-provisioner exits when it loses its connection to the driver, as it does in a
	// pod, where kubelet restarts the container: supervise restarts it likewise.
	mu                  sync.Mutex
	provisioner         *cluster.Process
	provisionerStarts   int
	provisionerStartErr error
	stopSupervisor      chan struct{}
	supervisorDone      chan struct{}
}

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
	st := startControllerStack(ctx, t, s)
	kube := s.cluster.Client
	efsc := efsClient(st.endpoint)

	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvcs := kube.CoreV1().PersistentVolumeClaims(scaleNamespace)
	nameA := func(i int) string { return fmt.Sprintf("a-%03d", i) }
	nameB := func(i int) string { return fmt.Sprintf("b-%03d", i) }

	// Phase 1: 200 PVCs at once; the driver restarts (SIGTERM, graceful) once a third of
	// them is bound, with the rest in flight.
	t0 := time.Now()
	createPVCs(ctx, t, s, firstBatch, nameA)
	waitFor(ctx, t, "a third of the first batch bound", func() (bool, error) {
		n, err := countBound(ctx, s)
		return n >= firstBatch/3, err
	})
	took, graceful := st.driver.Stop(syscall.SIGTERM, 45*time.Second)
	t.Logf("driver stopped on SIGTERM in %v (graceful: %v)", took.Round(time.Millisecond), graceful)
	if !graceful {
		t.Errorf("the driver did not exit within 45 s of SIGTERM")
	}
	st.startDriver(ctx)
	waitFor(ctx, t, "all of the first batch bound", func() (bool, error) {
		n, err := countBound(ctx, s)
		return n == firstBatch, err
	})
	phase1 := time.Since(t0)
	t.Logf("phase 1: %d PVCs bound in %v (driver restarted once)", firstBatch, phase1.Round(time.Millisecond))
	seen := map[string]int32{} // access point -> GID, over the whole run
	checkAccessPoints(ctx, t, s, efsc, seen, firstBatch)

	// Phase 2: 100 more at once; right away half of the first batch and half of the new
	// one are deleted, the latter mostly before they are provisioned. The provisioner is
	// killed (SIGKILL: it loses its in-flight memory) in the middle and started again.
	t1 := time.Now()
	createPVCs(ctx, t, s, secondBatch, nameB)
	pendingAtDelete := 0
	for i := range deleteFromB {
		pvc, err := pvcs.Get(ctx, nameB(i), metav1.GetOptions{})
		if err == nil && pvc.Status.Phase != corev1.ClaimBound {
			pendingAtDelete++
		}
	}
	deletePVCs(ctx, t, s, deleteFromB, nameB)
	deletePVCs(ctx, t, s, deleteFromA, nameA)
	t.Logf("phase 2: deleted %d + %d PVCs; %d of the second batch's deleted ones were not bound yet", deleteFromA, deleteFromB, pendingAtDelete)
	if pendingAtDelete == 0 {
		t.Log("note: every deleted PVC of the second batch was already bound: the in-flight deletion case was not exercised this time")
	}
	waitFor(ctx, t, "a tenth of the second batch bound", func() (bool, error) {
		n, err := countBound(ctx, s)
		return n >= firstBatch-deleteFromA+secondBatch/10, err
	})
	killed := st.currentProvisioner()
	killed.Kill()
	t.Log("provisioner killed (SIGKILL); the supervisor starts it again as kubelet would")
	live := firstBatch - deleteFromA + secondBatch - deleteFromB
	waitFor(ctx, t, "the surviving PVCs bound and the deleted ones' volumes gone", func() (bool, error) {
		n, err := countBound(ctx, s)
		if err != nil || n != live {
			return false, err
		}
		pvs, err := countPVs(ctx, s)
		return pvs == live, err
	})
	phase2 := time.Since(t1)
	t.Logf("phase 2: %d live volumes in %v (provisioner killed once)", live, phase2.Round(time.Millisecond))
	checkAccessPoints(ctx, t, s, efsc, seen, live)

	// Phase 3: delete the rest; every volume and access point must go.
	t2 := time.Now()
	var rest []string
	list, err := pvcs.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		rest = append(rest, p.Name)
	}
	deletePVCs(ctx, t, s, len(rest), func(i int) string { return rest[i] })
	waitFor(ctx, t, "every PVC and PV gone", func() (bool, error) {
		left, err := pvcs.List(ctx, metav1.ListOptions{})
		if err != nil || len(left.Items) > 0 {
			return false, err
		}
		n, err := countPVs(ctx, s)
		return n == 0, err
	})
	// DeleteVolume returned before each PV went, but a CreateVolume that the provisioner
	// abandoned (killed, or its PVC deleted) may still finish: give the access point count
	// time to settle before calling what is left a leak.
	var leaked []efstypes.AccessPointDescription
	waitForOrTimeout(ctx, 90*time.Second, func() (bool, error) {
		leaked, err = accessPoints(ctx, efsc)
		return len(leaked) == 0, err
	})
	for _, ap := range leaked {
		t.Errorf("access point leaked: %s root %s tags %v", aws.ToString(ap.AccessPointId), rootPath(ap), tagMap(ap.Tags))
	}
	phase3 := time.Since(t2)
	t.Logf("phase 3: %d PVCs deleted, every volume gone in %v", len(rest), phase3.Round(time.Millisecond))
	st.checkAlive()
	st.logUsage()
	t.Logf("access points seen in all: %d, distinct GIDs at every check; csi-provisioner started %d times; whole scenario %v",
		len(seen), st.starts(), time.Since(start).Round(time.Millisecond))
}

// startControllerStack starts the emulator, applies the chart's CSIDriver and RBAC and
// the example StorageClass for real, and starts the driver and csi-provisioner with the
// chart Deployment's arguments (local socket, kubeconfig and ports substituted).
func startControllerStack(ctx context.Context, t *testing.T, s *suite) *controllerStack {
	t.Helper()
	st := &controllerStack{t: t, s: s, dir: t.TempDir()}
	st.socket = filepath.Join(st.dir, "csi.sock")

	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	st.endpoint = fmt.Sprintf("http://127.0.0.1:%d", port)
	st.emulator, err = cluster.StartProcess("efs-emulator", s.dir, filepath.Join(s.bins, "efs-emulator"), nil,
		fmt.Sprintf("--listen=127.0.0.1:%d", port), "--data-dir="+filepath.Join(st.dir, "efs"), "--file-system="+fileSystemID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.emulator.Stop(syscall.SIGTERM, 10*time.Second) })
	efsc := efsClient(st.endpoint)
	if err := st.emulator.WaitReady(ctx, func(ctx context.Context) error {
		_, err := efsc.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{FileSystemId: aws.String(fileSystemID)})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	base, err := manifests.Kustomization(filepath.Join(s.repo, "deploy", "kubernetes", "base"))
	if err != nil {
		t.Fatal(err)
	}
	examples, err := manifests.Files(filepath.Join(s.repo, "deploy", "kubernetes", "examples", "storageclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	a := newApplier(t, s)
	var deployment *unstructured.Unstructured
	for _, obj := range append(base, examples...) {
		switch obj.GetKind() {
		case "CSIDriver", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "StorageClass":
			if err := a.apply(ctx, obj, false); err != nil {
				t.Fatalf("apply %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		case "Deployment":
			deployment = obj
		}
	}
	if deployment == nil {
		t.Fatal("deploy/kubernetes/base has no controller Deployment")
	}

	// The provisioner acts as the chart's controller service account: if the ClusterRole
	// lacks a permission, volumes do not get provisioned and this test fails.
	tok, err := s.cluster.Client.CoreV1().ServiceAccounts(releaseNamespace).CreateToken(ctx, controllerSA,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: aws.Int64(3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := s.cluster.WriteKubeconfig(controllerSA, tok.Status.Token)
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	st.driverArgs = containerArgs(t, deployment, "efs-plugin", map[string]string{
		"--endpoint=":        "unix://" + st.socket,
		"--metrics-address=": fmt.Sprintf("127.0.0.1:%d", metricsPort),
	})
	st.provArgs = append(containerArgs(t, deployment, "csi-provisioner", map[string]string{
		"--csi-address=": st.socket,
	}), "--kubeconfig="+kubeconfig)
	st.startDriver(ctx)
	st.supervise()
	t.Cleanup(func() {
		close(st.stopSupervisor)
		<-st.supervisorDone
		if p := st.currentProvisioner(); p != nil {
			p.Stop(syscall.SIGTERM, 10*time.Second)
		}
		if st.driver != nil {
			st.driver.Stop(syscall.SIGTERM, 45*time.Second)
		}
		if t.Failed() {
			for _, p := range []*cluster.Process{st.emulator, st.driver, st.currentProvisioner()} {
				if p != nil {
					p.Tail(testWriter{t}, 30)
				}
			}
		}
	})
	return st
}

// containerArgs returns the args of one container of the Deployment, with the value of
// each flag prefix in replace substituted and $(NODE_NAME) filled in.
func containerArgs(t *testing.T, deployment *unstructured.Unstructured, name string, replace map[string]string) []string {
	t.Helper()
	containers, _, err := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "containers")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range containers {
		cm, _ := c.(map[string]any)
		if cm["name"] != name {
			continue
		}
		raw, _, _ := unstructured.NestedStringSlice(cm, "args")
		args := make([]string, 0, len(raw))
		for _, a := range raw {
			for prefix, v := range replace {
				if strings.HasPrefix(a, prefix) {
					a = prefix + v
				}
			}
			args = append(args, strings.ReplaceAll(a, "$(NODE_NAME)", "e2e-node"))
		}
		return args
	}
	t.Fatalf("the controller Deployment has no container %q", name)
	return nil
}

func (st *controllerStack) startDriver(ctx context.Context) {
	st.t.Helper()
	p, err := cluster.StartProcess("efs-csi-driver", st.s.dir, filepath.Join(st.s.bins, "efs-csi-driver"), emulatorEnv(st.endpoint), st.driverArgs...)
	if err != nil {
		st.t.Fatal(err)
	}
	st.driver = p
	if err := p.WaitReady(ctx, func(context.Context) error {
		c, err := net.Dial("unix", st.socket)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		st.t.Fatal(err)
	}
}

// supervise starts csi-provisioner and starts it again whenever it exits, until
// stopSupervisor is closed.
func (st *controllerStack) supervise() {
	st.t.Helper()
	st.stopSupervisor = make(chan struct{})
	st.supervisorDone = make(chan struct{})
	if err := st.startProvisioner(); err != nil {
		st.t.Fatal(err)
	}
	go func() {
		defer close(st.supervisorDone)
		var err error
		for {
			select {
			case <-st.currentProvisioner().Done():
			case <-st.stopSupervisor:
				return
			}
			select {
			case <-st.stopSupervisor:
				return
			default:
			}
			if st.starts() >= maxProvisionerStarts {
				err = fmt.Errorf("csi-provisioner exited %d times; giving up", maxProvisionerStarts)
			} else {
				err = st.startProvisioner()
			}
			if err != nil {
				st.mu.Lock()
				st.provisionerStartErr = err
				st.mu.Unlock()
				return
			}
		}
	}()
}

func (st *controllerStack) startProvisioner() error {
	p, err := cluster.StartProcess("csi-provisioner", st.s.dir, st.s.comps.CSIProvisioner, nil, st.provArgs...)
	if err != nil {
		return err
	}
	st.mu.Lock()
	st.provisioner = p
	st.provisionerStarts++
	st.mu.Unlock()
	return nil
}

func (st *controllerStack) currentProvisioner() *cluster.Process {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.provisioner
}

func (st *controllerStack) starts() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.provisionerStarts
}

// logUsage reports peak memory and CPU of the emulator and of the current driver and
// provisioner processes (since their last start): the figures to size the chart's
// resource requests from.
func (st *controllerStack) logUsage() {
	st.t.Helper()
	for _, p := range []*cluster.Process{st.driver, st.currentProvisioner(), st.emulator} {
		u, err := p.Usage()
		if err != nil {
			st.t.Logf("usage of %s: %v", p.Name, err)
			continue
		}
		st.t.Logf("usage of %s since its last start: peak RSS %d MiB, CPU %v", p.Name, u.PeakRSS>>20, u.CPU)
	}
}

func (st *controllerStack) checkAlive() {
	st.t.Helper()
	st.mu.Lock()
	err := st.provisionerStartErr
	st.mu.Unlock()
	if err != nil {
		st.t.Errorf("restarting csi-provisioner: %v", err)
	}
	for _, p := range []*cluster.Process{st.emulator, st.driver} {
		select {
		case <-p.Done():
			st.t.Errorf("%s exited during the test; log %s", p.Name, p.LogPath)
		default:
		}
	}
}

// checkAccessPoints compares the file system's access points with the PVs: as many as
// want, one per PV, every GID distinct (and, over the whole run, an access point never
// changes its GID). seen accumulates access point -> GID.
func checkAccessPoints(ctx context.Context, t *testing.T, s *suite, c *efs.Client, seen map[string]int32, want int) {
	t.Helper()
	aps, err := accessPoints(ctx, c)
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
	if len(aps) != want || len(handles) != want {
		t.Errorf("%d access points and %d PVs, want %d of each", len(aps), len(handles), want)
	}
	slices.Sort(handles)
	if len(slices.Compact(handles)) != len(handles) {
		t.Errorf("two PVs share a volume handle")
	}
}

func accessPoints(ctx context.Context, c *efs.Client) ([]efstypes.AccessPointDescription, error) {
	var out []efstypes.AccessPointDescription
	pages := efs.NewDescribeAccessPointsPaginator(c, &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fileSystemID)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, page.AccessPoints...)
	}
	return out, nil
}

func createPVCs(ctx context.Context, t *testing.T, s *suite, n int, name func(int) string) {
	t.Helper()
	parallel(t, n, func(i int) error {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: scaleNamespace},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
				StorageClassName: aws.String(storageClass),
				Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				},
			},
		}
		_, err := s.cluster.Client.CoreV1().PersistentVolumeClaims(scaleNamespace).Create(ctx, pvc, metav1.CreateOptions{})
		return err
	})
}

func deletePVCs(ctx context.Context, t *testing.T, s *suite, n int, name func(int) string) {
	t.Helper()
	parallel(t, n, func(i int) error {
		err := s.cluster.Client.CoreV1().PersistentVolumeClaims(scaleNamespace).Delete(ctx, name(i), metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
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

func countBound(ctx context.Context, s *suite) (int, error) {
	list, err := s.cluster.Client.CoreV1().PersistentVolumeClaims(scaleNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range list.Items {
		if p.Status.Phase == corev1.ClaimBound {
			n++
		}
	}
	return n, nil
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
