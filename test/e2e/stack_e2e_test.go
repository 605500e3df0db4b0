//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/efs-csi/efs-csi-driver/test/e2e/cluster"
	"github.com/efs-csi/efs-csi-driver/test/e2e/manifests"
)

const (
	fileSystemID = "fs-0123456789abcdef0" // the example StorageClass names it
	controllerSA = "efs-csi-controller-sa"
	// A scenario restarts a provisioner at most a few times (driver restart, kill); more
	// starts than this mean it crash-loops.
	maxProvisionerStarts = 10
)

// controllerStack is one EFS emulator and the controller replicas serving it, each a
// driver and a csi-provisioner started with the arguments the chart gives them.
type controllerStack struct {
	t        *testing.T
	s        *suite
	endpoint string // emulator URL
	dir      string
	dataDir  string // the emulator's: DIR/<file system ID> is a file system's tree
	emulator *cluster.Process
	replicas []*replica
	// What every replica shares: this checkout's controller Deployment, and the
	// kubeconfig and token of the chart's controller service account.
	deployment *unstructured.Unstructured
	kubeconfig string
	tokenFile  string
}

// replica is one controller pod: the driver and its csi-provisioner on a socket of their
// own. csi-provisioner exits when it loses its connection to the driver, as it does in a
// pod, where kubelet restarts the container: the replica restarts it likewise.
type replica struct {
	t          *testing.T
	s          *suite
	name       string
	bins       string // directory holding the efs-csi-driver it runs
	socket     string
	endpoint   string
	driverArgs []string
	driverEnv  []string
	provArgs   []string
	hostname   string // csi-provisioner's own host name (replicaSpec.podHostname), or ""
	driver     *cluster.Process
	// provHealth is the provisioner's --http-endpoint (the chart's liveness probe
	// target /healthz/leader-election), on a free port.
	provHealth string

	mu                  sync.Mutex
	provisioner         *cluster.Process
	provisionerStarts   int
	provisionerStartErr error
	stopSupervisor      chan struct{}
	supervisorDone      chan struct{}
	stopOnce            sync.Once
	stopped             bool // by the test: no longer expected to run
}

type stackOptions struct {
	replicas int
	// leaderElection false strips the provisioners' --leader-election flags: every
	// replica then acts on every PVC, the worst case of two leaders overlapping.
	leaderElection bool
	// driverArgs are appended to every replica's driver arguments; emulatorArgs to the
	// emulator's.
	driverArgs, emulatorArgs []string
}

// replicaSpec is what one controller replica runs: the driver binary and the controller
// Deployment whose container arguments it starts with (a release's own manifests).
type replicaSpec struct {
	bins           string // directory holding efs-csi-driver
	deployment     *unstructured.Unstructured
	leaderElection bool
	driverArgs     []string // appended to the Deployment's
	provArgs       []string // appended to the Deployment's csi-provisioner arguments
	driverEnv      []string // added to the driver's environment (containerEnv)
	// podHostname runs csi-provisioner with a host name of its own, as each pod has:
	// its leader-election identity is the host name, so replicas on one host would all
	// hold the lease at once.
	podHostname bool
}

// startControllerStack starts the emulator, applies the chart's CSIDriver and RBAC and
// the example StorageClass for real, and starts the replicas with the chart Deployment's
// arguments (local sockets, kubeconfig and ports substituted).
func startControllerStack(ctx context.Context, t *testing.T, s *suite, opts stackOptions) *controllerStack {
	t.Helper()
	st := newControllerStack(ctx, t, s, opts.emulatorArgs...)
	for range opts.replicas {
		st.addReplica(ctx, replicaSpec{bins: s.bins, deployment: st.deployment, leaderElection: opts.leaderElection, driverArgs: opts.driverArgs})
	}
	return st
}

// newControllerStack starts the emulator (with emulatorArgs added to its own) and applies
// the controller's objects; replicas come with addReplica.
func newControllerStack(ctx context.Context, t *testing.T, s *suite, emulatorArgs ...string) *controllerStack {
	t.Helper()
	st := newEmulatorStack(ctx, t, s, emulatorArgs...)
	st.deployment = applyControllerObjects(ctx, t, s)
	st.authenticate(ctx)
	return st
}

// newEmulatorStack starts the emulator only: the controller's objects, its Deployment and
// its service account's token are the caller's (a test that installs them with helm
// sets st.deployment and calls authenticate once the service account exists).
func newEmulatorStack(ctx context.Context, t *testing.T, s *suite, emulatorArgs ...string) *controllerStack {
	t.Helper()
	// Under AWS's managed policy, which the EKS add-on and upstream's guide attach: a
	// test that needs more adds the policy a user of that feature attaches (policy).
	return newEmulatorStackUnder(ctx, t, s, []string{s.policy(managedPolicy)}, emulatorArgs...)
}

// newEmulatorStackUnder is newEmulatorStack with the emulator enforcing the policies
// (--iam-policy flags, s.policy) instead of the managed one: a role given
// docs/iam/controller.json in its place has no other.
func newEmulatorStackUnder(ctx context.Context, t *testing.T, s *suite, policies []string, emulatorArgs ...string) *controllerStack {
	t.Helper()
	st := &controllerStack{t: t, s: s, dir: t.TempDir()}
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	st.endpoint = fmt.Sprintf("http://127.0.0.1:%d", port)
	st.dataDir = filepath.Join(st.dir, "efs")
	args := append([]string{fmt.Sprintf("--listen=127.0.0.1:%d", port), "--data-dir=" + st.dataDir, "--file-system=" + fileSystemID}, policies...)
	st.emulator, err = cluster.StartProcess("efs-emulator", s.dir, filepath.Join(s.bins, "efs-emulator"), nil,
		append(args, emulatorArgs...)...)
	if err != nil {
		t.Fatal(err)
	}
	efsc := efsClient(st.endpoint)
	if err := st.emulator.WaitReady(ctx, func(ctx context.Context) error {
		_, err := efsc.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{FileSystemId: aws.String(fileSystemID)})
		return err
	}); err != nil {
		st.emulator.Kill()
		t.Fatal(err)
	}
	// Stop in reverse: replicas, then the emulator; show the logs of a failed test.
	t.Cleanup(func() {
		for _, r := range st.replicas {
			r.stop()
		}
		st.emulator.Stop(syscall.SIGTERM, 10*time.Second)
		if t.Failed() {
			st.emulator.Tail(testWriter{t}, 30)
			for _, r := range st.replicas {
				for _, p := range r.processes() {
					p.Tail(testWriter{t}, 30)
				}
			}
			paths := []string{st.emulator.LogPath}
			for _, r := range st.replicas {
				for _, p := range r.processes() {
					paths = append(paths, p.LogPath)
				}
			}
			explainLeaks(t, paths)
		}
	})
	return st
}

// authenticate gives the replicas a token of the controller service account: the
// provisioners and the drivers' Kubernetes clients act as it, so that if its RBAC lacks a
// permission, volumes do not get provisioned and the test fails.
func (st *controllerStack) authenticate(ctx context.Context) {
	t, s := st.t, st.s
	t.Helper()
	tok, err := s.cluster.Client.CoreV1().ServiceAccounts(releaseNamespace).CreateToken(ctx, controllerSA,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: aws.Int64(3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.kubeconfig, err = s.cluster.WriteKubeconfig(controllerSA, tok.Status.Token); err != nil {
		t.Fatal(err)
	}
	// The driver's orphan collector reads PVs and PVCs as the same service account.
	st.tokenFile = filepath.Join(st.dir, "controller-sa.token")
	if err := os.WriteFile(st.tokenFile, []byte(tok.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
}

// addReplica starts one more controller replica (driver and supervised csi-provisioner)
// as spec says, and returns it.
func (st *controllerStack) addReplica(ctx context.Context, spec replicaSpec) *replica {
	t, s := st.t, st.s
	t.Helper()
	i := len(st.replicas)
	metricsPort, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metrics := fmt.Sprintf("127.0.0.1:%d", metricsPort)
	r := &replica{t: t, s: s, name: fmt.Sprintf("%d", i), bins: spec.bins, driverEnv: spec.driverEnv,
		socket: filepath.Join(st.dir, fmt.Sprintf("csi-%d.sock", i)), endpoint: st.endpoint}
	r.driverArgs = append(containerArgs(t, spec.deployment, "efs-plugin", map[string]string{
		"--endpoint=":           "unix://" + r.socket,
		"--http-endpoint=":      metrics,
		"--metrics-address=":    metrics, // a release before --http-endpoint
		"--orphan-gc-interval=": "2s",
		"--orphan-gc-grace=":    "5s",
	}), "--kube-api-url="+s.cluster.Server, "--kube-token-file="+st.tokenFile,
		"--kube-ca-file="+filepath.Join(s.cluster.Dir, "ca.crt"))
	r.driverArgs = append(r.driverArgs, spec.driverArgs...)
	provPort, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r.provHealth = fmt.Sprintf("127.0.0.1:%d", provPort)
	r.provArgs = append(containerArgs(t, spec.deployment, "csi-provisioner", map[string]string{
		"--csi-address=":   r.socket,
		"--http-endpoint=": r.provHealth,
	}), "--kubeconfig="+st.kubeconfig)
	r.provArgs = append(r.provArgs, spec.provArgs...)
	if spec.podHostname {
		r.hostname = fmt.Sprintf("efs-csi-controller-%d", i)
	}
	if !spec.leaderElection {
		r.provArgs = slices.DeleteFunc(r.provArgs, func(a string) bool { return strings.HasPrefix(a, "--leader-election") })
	}
	st.replicas = append(st.replicas, r)
	r.startDriver(ctx)
	r.supervise()
	return r
}

// applyControllerObjects applies, for real, what the controller needs from the kustomize
// base (CSIDriver, service account, RBAC) and the example StorageClass, and returns the
// controller Deployment whose container arguments the replicas run with.
func applyControllerObjects(ctx context.Context, t *testing.T, s *suite) *unstructured.Unstructured {
	t.Helper()
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
	return deployment
}

// containerArgs returns the args of one container of the Deployment, with the value of
// each flag prefix in replace substituted and $(NODE_NAME) filled in.
func containerArgs(t *testing.T, deployment *unstructured.Unstructured, name string, replace map[string]string) []string {
	t.Helper()
	raw, _, _ := unstructured.NestedStringSlice(container(t, deployment, name), "args")
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

// containerEnv returns the environment a pod would give one container of the Deployment:
// its literal values, with the downward API's node name ("e2e-node", as containerArgs
// fills $(NODE_NAME) in) and namespace; other references (Secrets, resources) are left
// out, as a process here has none of them.
func containerEnv(t *testing.T, deployment *unstructured.Unstructured, name string) []string {
	t.Helper()
	items, _, _ := unstructured.NestedSlice(container(t, deployment, name), "env")
	var env []string
	for _, it := range items {
		e, _ := it.(map[string]any)
		k, _ := e["name"].(string)
		if v, ok := e["value"].(string); ok {
			env = append(env, k+"="+v)
			continue
		}
		switch path, _, _ := unstructured.NestedString(e, "valueFrom", "fieldRef", "fieldPath"); path {
		case "spec.nodeName":
			env = append(env, k+"=e2e-node")
		case "metadata.namespace":
			env = append(env, k+"="+releaseNamespace)
		}
	}
	return env
}

// container is the container name of the Deployment's pod template.
func container(t *testing.T, deployment *unstructured.Unstructured, name string) map[string]any {
	t.Helper()
	containers, _, err := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "containers")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range containers {
		if cm, _ := c.(map[string]any); cm["name"] == name {
			return cm
		}
	}
	t.Fatalf("the controller Deployment has no container %q", name)
	return nil
}

// startDriver starts the replica's driver and waits until its socket answers.
func (r *replica) startDriver(ctx context.Context) {
	r.t.Helper()
	p, err := cluster.StartProcess("efs-csi-driver-"+r.name, r.s.dir, filepath.Join(r.bins, "efs-csi-driver"),
		append(emulatorEnv(r.endpoint), r.driverEnv...), r.driverArgs...)
	if err != nil {
		r.t.Fatal(err)
	}
	r.driver = p
	if err := p.WaitReady(ctx, func(context.Context) error {
		c, err := net.Dial("unix", r.socket)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		r.t.Fatal(err)
	}
}

// supervise starts csi-provisioner and starts it again whenever it exits, until stop.
func (r *replica) supervise() {
	r.t.Helper()
	r.stopSupervisor = make(chan struct{})
	r.supervisorDone = make(chan struct{})
	if err := r.startProvisioner(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		defer close(r.supervisorDone)
		for {
			select {
			case <-r.currentProvisioner().Done():
			case <-r.stopSupervisor:
				return
			}
			select {
			case <-r.stopSupervisor:
				return
			default:
			}
			var err error
			if r.starts() >= maxProvisionerStarts {
				err = fmt.Errorf("csi-provisioner exited %d times; giving up", maxProvisionerStarts)
			} else {
				err = r.startProvisioner()
			}
			if err != nil {
				r.mu.Lock()
				r.provisionerStartErr = err
				r.mu.Unlock()
				return
			}
		}
	}()
}

func (r *replica) startProvisioner() error {
	bin, args := r.s.comps.CSIProvisioner, r.provArgs
	if r.hostname != "" {
		// A UTS namespace of its own (root), named as a pod would be; sh execs the
		// provisioner, so the process stopped and killed is the provisioner itself.
		bin, args = "unshare", append([]string{"--uts", "sh", "-c", `hostname "$0" && exec "$@"`, r.hostname, bin}, args...)
	}
	p, err := cluster.StartProcess("csi-provisioner-"+r.name, r.s.dir, bin, nil, args...)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.provisioner = p
	r.provisionerStarts++
	r.mu.Unlock()
	return nil
}

// provisionerHealthy reports whether the provisioner answers the chart's liveness
// probe, /healthz/leader-election on its --http-endpoint, with 200.
func (r *replica) provisionerHealthy(ctx context.Context) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.provHealth+"/healthz/leader-election", nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, nil // not listening yet
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

func (r *replica) currentProvisioner() *cluster.Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.provisioner
}

func (r *replica) starts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.provisionerStarts
}

// stop stops what of the replica was started (a test may fail half-way through
// starting it), once: a test stops a replica mid-run, and its cleanup stops all.
func (r *replica) stop() { r.stopOnce.Do(r.stopProcesses) }

func (r *replica) stopProcesses() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	if r.stopSupervisor != nil {
		close(r.stopSupervisor)
		<-r.supervisorDone
	}
	for _, p := range r.processes() {
		grace := 10 * time.Second
		if p == r.driver {
			grace = 45 * time.Second // calls in flight may finish
		}
		p.Stop(syscall.SIGTERM, grace)
	}
}

// processes are the replica's current processes that were started, provisioner first.
func (r *replica) processes() []*cluster.Process {
	var out []*cluster.Process
	for _, p := range []*cluster.Process{r.currentProvisioner(), r.driver} {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// checkAlive fails the test if the emulator or a driver died, or a provisioner could
// not be kept running.
func (st *controllerStack) checkAlive() {
	st.t.Helper()
	procs := []*cluster.Process{st.emulator}
	for _, r := range st.replicas {
		r.mu.Lock()
		err, stopped := r.provisionerStartErr, r.stopped
		r.mu.Unlock()
		if stopped {
			continue
		}
		if err != nil {
			st.t.Errorf("replica %s: restarting csi-provisioner: %v", r.name, err)
		}
		procs = append(procs, r.driver)
	}
	for _, p := range procs {
		select {
		case <-p.Done():
			st.t.Errorf("%s exited during the test; log %s", p.Name, p.LogPath)
		default:
		}
	}
}

// logUsage reports peak memory and CPU of the emulator and of the current driver and
// provisioner processes (since their last start): the figures to size the chart's
// resource requests from.
func (st *controllerStack) logUsage() {
	st.t.Helper()
	procs := []*cluster.Process{st.emulator}
	for _, r := range st.replicas {
		procs = append(procs, r.driver, r.currentProvisioner())
	}
	for _, p := range procs {
		u, err := p.Usage()
		if err != nil {
			st.t.Logf("usage of %s: %v", p.Name, err)
			continue
		}
		st.t.Logf("usage of %s since its last start: peak RSS %d MiB, CPU %v", p.Name, u.PeakRSS>>20, u.CPU)
	}
}

// The IAM policies the emulator enforces (docs/iam.md), by file in the repository.
const (
	managedPolicy         = "internal/emulator/iam/testdata/AmazonEFSCSIDriverPolicy.json"
	upstreamExamplePolicy = "internal/emulator/iam/testdata/upstream-iam-policy-example.json"
	controllerPolicy      = "docs/iam/controller.json"
	s3FilesPolicy         = "docs/iam/s3files.json"
	crossAccountPolicy    = "docs/iam/cross-account.json"
)

// policy is the emulator's --iam-policy flag for one of them: each adds to the others.
func (s *suite) policy(file string) string {
	return "--iam-policy=" + filepath.Join(s.repo, file)
}
