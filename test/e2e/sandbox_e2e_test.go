//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	appsv1 "k8s.io/api/apps/v1"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/efs-csi/efs-csi-driver/test/e2e/cluster"
	"github.com/efs-csi/efs-csi-driver/test/e2e/manifests"
)

// The image's ENTRYPOINT, where the sandbox puts the driver binary.
const imageEntrypoint = "/usr/bin/efs-csi-driver"

// The controller as the chart renders it runs in its pod's file system (read-only root,
// the chart's volumes, its user): volumes are created, including an S3 Files one whose
// identity the controller keeps on disk, and deleted (with root-directory removal when
// the values ask for it, whose temporary mount points go under --tmp-dir), and nothing
// the driver writes is refused or lands outside the chart's volumes. The last row
// removes the chart's /tmp volume: the same checks must then fail, or they prove
// nothing.
func TestChartControllerWritesOnlyToItsVolumes(t *testing.T) {
	s := env(t)
	for i, tc := range []struct {
		name   string
		values string // chart values (YAML)
		// unmount drops the efs-plugin container's volumeMount at this path, as a chart
		// change that loses a writable place would.
		unmount string
		// rootDirs: the values remove each deleted volume's directory, which the
		// driver does by mounting the file system (the emulator's data through
		// --local-root, bound into the pod at the same path).
		rootDirs bool
		// args are added to the rendered ones: the record in a file under --tmp-dir
		// (the fallback outside a cluster) must find its place too.
		args []string
		// stateDirs are what the driver must have written in a volume by the time the
		// claims are bound.
		stateDirs      []string
		wantViolations bool
	}{
		{name: "default values", values: "", stateDirs: []string{"/tmp/efs-csi-s3files-identities"}},
		{name: "record in a file", values: "", args: []string{"--journal=file"},
			stateDirs: []string{"/tmp/efs-csi-s3files-identities", "/tmp/efs-csi-journal"}},
		{name: "deleteAccessPointRootDir", values: "controller:\n  deleteAccessPointRootDir: true\n", rootDirs: true},
		{name: "without the /tmp volume", values: "", unmount: "/tmp", wantViolations: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			st := newControllerStack(ctx, t, s, "--s3files-file-system="+s3FileSystem, s.policy(s3FilesPolicy))
			deployment, pod := renderedPod(t, s, tc.values, "Deployment", "efs-csi-controller")
			c := podContainer(t, &pod, "efs-plugin")
			dropMount(t, c, tc.unmount)
			metricsPort, err := cluster.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			// The pod's network is the host's here: a free port instead of the chart's,
			// and the collector's period shortened as the stack's replicas have it.
			replaceArgs(c, map[string]string{
				"--http-endpoint=":      fmt.Sprintf("127.0.0.1:%d", metricsPort),
				"--orphan-gc-interval=": "2s",
				"--orphan-gc-grace=":    "5s",
			})
			sb := newSandbox(ctx, t, s, pod, "efs-plugin", "efs-csi-controller-0")
			if tc.unmount != "" {
				sb.Empty = []string{tc.unmount} // the image's, not what the host holds there
			}
			sb.Env = emulatorEnv(st.endpoint)
			c.Args = append(c.Args, tc.args...)
			if tc.rootDirs {
				c.Args = append(c.Args, "--local-root="+st.dataDir)
				sb.ExtraMounts = []cluster.BindMount{{Source: st.dataDir, Target: st.dataDir}}
			}
			r := startSandboxedReplica(ctx, t, st, sb, deployment)

			efsClass, s3Class := fmt.Sprintf("e2e-sandbox-efs-%d", i), fmt.Sprintf("e2e-sandbox-s3files-%d", i)
			newClass(ctx, t, s, efsClass, map[string]string{"provisioningMode": "efs-ap", "fileSystemId": fileSystemID,
				"directoryPerms": "700"}, nil)
			newClass(ctx, t, s, s3Class, map[string]string{"provisioningMode": "s3files-ap", "fileSystemId": s3FileSystem, "directoryPerms": "700"}, nil)
			ns := newNamespace(ctx, t, s, fmt.Sprintf("e2e-sandbox-%d", i))
			efsc := efsClient(st.endpoint)
			var dirs []string
			for i := range 3 {
				pv := ns.boundClaim(ctx, t, fmt.Sprintf("efs-%d", i), efsClass, nil)
				ap, err := efsc.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{AccessPointId: aws.String(accessPointOf(pv.Spec.CSI.VolumeHandle))})
				if err != nil || len(ap.AccessPoints) != 1 {
					t.Fatalf("access point of %s: %v", pv.Name, err)
				}
				dirs = append(dirs, filepath.Join(st.dataDir, fileSystemID, rootPath(ap.AccessPoints[0])))
			}
			ns.boundClaim(ctx, t, "s3files", s3Class, nil)
			for _, d := range tc.stateDirs {
				host, ok := sb.HostPath(d)
				if !ok {
					t.Errorf("%s is on the root file system, not in one of the chart's volumes", d)
					continue
				}
				if entries, err := os.ReadDir(host); err != nil || len(entries) == 0 {
					t.Errorf("the driver kept nothing in %s (%d entries, %v)", d, len(entries), err)
				}
			}
			ns.deleteAll(ctx, t)
			waitNoLeaks(ctx, t, s, efsc)
			if tc.rootDirs {
				waitFor(ctx, t, "the deleted volumes' directories removed", func() (bool, error) {
					for _, d := range dirs {
						if _, err := os.Stat(d); err == nil {
							return false, nil
						}
					}
					return true, nil
				})
			}
			st.checkAlive()
			r.stop()

			violations := fileSystemViolations(t, sb, r.driver.LogPath)
			reportViolations(t, "the driver", violations, tc.wantViolations, tc.unmount)
		})
	}
}

// The node plugin as the DaemonSet renders it runs in its pod's file system: its
// hostPath volumes (kubelet directory, plugin socket, efs-utils state and configuration,
// the host's legacy /etc/amazon/efs) under the test's directory, its projected token. It
// serves, writes efs-utils' configuration where the chart keeps it on the host, removes
// its Node's startup taint through the API as the pod's service account, and leaves no
// file in its container layer (lost at each restart). The second row drops the
// efs-utils configuration volume: the configuration then lands in the container layer,
// and the check must say so.
func TestChartNodePluginWritesOnlyToItsVolumes(t *testing.T) {
	s := env(t)
	for _, tc := range []struct {
		name           string
		unmount        string
		wantViolations bool
	}{
		{name: "as rendered"},
		{name: "without the efs-utils configuration volume", unmount: "/var/amazon/efs", wantViolations: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, pod := renderedPod(t, s, "", "DaemonSet", "efs-csi-node")
			c := podContainer(t, &pod, "efs-plugin")
			dropMount(t, c, tc.unmount)
			metricsPort, err := cluster.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			replaceArgs(c, map[string]string{"--http-endpoint=": fmt.Sprintf("127.0.0.1:%d", metricsPort)})

			nodeName := fmt.Sprintf("e2e-sandbox-node-%d", len(tc.unmount))
			nodes := s.cluster.Client.CoreV1().Nodes()
			if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Spec: corev1.NodeSpec{
				Taints: []corev1.Taint{{Key: agentNotReadyTaint, Effect: corev1.TaintEffectNoSchedule}}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = nodes.Delete(context.Background(), nodeName, metav1.DeleteOptions{}) })

			sb := newSandbox(ctx, t, s, pod, "efs-plugin", "efs-csi-node-0")
			if tc.unmount != "" {
				sb.Empty = []string{tc.unmount} // the image's, not what the host holds there
			}
			sb.NodeName = nodeName
			sb.Env = []string{"AWS_EC2_METADATA_DISABLED=true"}
			p, err := sb.Start("efs-csi-node-sandbox-"+fmt.Sprint(len(tc.unmount)), s.dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				p.Stop(syscall.SIGTERM, 10*time.Second)
				if t.Failed() {
					p.Tail(testWriter{t}, 40)
				}
			})
			socket, ok := sb.HostPath("/csi/csi.sock")
			if !ok {
				t.Fatal("the chart's node plugin has no volume at /csi")
			}
			if err := p.WaitReady(ctx, dialable(socket)); err != nil {
				t.Fatal(err)
			}
			// The taint goes once the plugin serves: its API access (in-cluster, the
			// projected token) works from inside the pod's file system.
			waitFor(ctx, t, "the startup taint removed", func() (bool, error) {
				n, err := nodes.Get(ctx, nodeName, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				return !slices.ContainsFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == agentNotReadyTaint }), nil
			})
			if conf, ok := sb.HostPath("/var/amazon/efs/efs-utils.conf"); ok {
				if _, err := os.Stat(conf); err != nil {
					t.Errorf("efs-utils.conf is not in the chart's host directory: %v", err)
				}
			}
			p.Stop(syscall.SIGTERM, 30*time.Second)

			violations := fileSystemViolations(t, sb, p.LogPath)
			reportViolations(t, "the node plugin", violations, tc.wantViolations, tc.unmount)
		})
	}
}

// renderedPod renders the chart with values (YAML, "" for the defaults) and returns the
// named workload of kind and its pod template's spec.
func renderedPod(t *testing.T, s *suite, values, kind, name string) (*unstructured.Unstructured, corev1.PodSpec) {
	t.Helper()
	var files []string
	if values != "" {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	objs, err := manifests.RenderChart(s.comps.Helm, filepath.Join(s.repo, "charts", "efs-csi-driver"), releaseNamespace, files...)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != kind || o.GetName() != name {
			continue
		}
		var spec corev1.PodSpec
		switch kind {
		case "Deployment":
			var d appsv1.Deployment
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d)
			spec = d.Spec.Template.Spec
		case "DaemonSet":
			var d appsv1.DaemonSet
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d)
			spec = d.Spec.Template.Spec
		}
		if err != nil {
			t.Fatal(err)
		}
		return o, spec
	}
	t.Fatalf("the chart renders no %s %s", kind, name)
	return nil, corev1.PodSpec{}
}

func podContainer(t *testing.T, pod *corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	i := slices.IndexFunc(pod.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("the pod has no container %s", name)
	}
	return &pod.Containers[i]
}

// replaceArgs sets the value of each flag prefix of replace in the container's args.
func replaceArgs(c *corev1.Container, replace map[string]string) {
	for i, a := range c.Args {
		for prefix, v := range replace {
			if strings.HasPrefix(a, prefix) {
				c.Args[i] = prefix + v
			}
		}
	}
}

// newSandbox returns a sandbox for container of pod with what the kubelet gives a pod:
// a token of the pod's service account, the cluster CA, the API server's address.
func newSandbox(ctx context.Context, t *testing.T, s *suite, pod corev1.PodSpec, container, podName string) *cluster.Sandbox {
	t.Helper()
	tok, err := s.cluster.Client.CoreV1().ServiceAccounts(releaseNamespace).CreateToken(ctx, pod.ServiceAccountName,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: aws.Int64(3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(s.cluster.Dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir(): the socket's host path must fit a unix socket address.
	dir, err := os.MkdirTemp("", "sbx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	return &cluster.Sandbox{
		Dir: dir, Pod: pod, Container: container, PodName: podName, Namespace: releaseNamespace,
		NodeName: "e2e-node", Binary: filepath.Join(s.bins, "efs-csi-driver"), Entrypoint: imageEntrypoint,
		APIServer: s.cluster.Server, Token: tok.Status.Token, CACert: ca, NodeMemory: 8 << 30,
	}
}

// startSandboxedReplica starts the driver in sb and a supervised csi-provisioner with
// the rendered Deployment's arguments on the socket in the pod's /csi volume, as one
// replica of st.
func startSandboxedReplica(ctx context.Context, t *testing.T, st *controllerStack, sb *cluster.Sandbox, deployment *unstructured.Unstructured) *replica {
	t.Helper()
	r := &replica{t: t, s: st.s, name: fmt.Sprintf("sandbox-%d", len(st.replicas)), endpoint: st.endpoint}
	startInSandbox(ctx, t, st, sb, r, "/csi/csi.sock", deployment)
	// One replica: no election to wait for (a Lease another test's provisioner held).
	r.provArgs = slices.DeleteFunc(r.provArgs, func(a string) bool { return strings.HasPrefix(a, "--leader-election") })
	r.supervise()
	return r
}

// startInSandbox starts r's driver in sb, as a replica of st, and waits until it serves
// at socket (its path in the pod); r's csi-provisioner is to run with deployment's
// arguments on that socket (r.provArgs; the caller supervises it).
func startInSandbox(ctx context.Context, t *testing.T, st *controllerStack, sb *cluster.Sandbox, r *replica, socket string, deployment *unstructured.Unstructured) {
	t.Helper()
	p, err := sb.Start("efs-csi-driver-"+r.name, st.s.dir)
	if err != nil {
		t.Fatal(err)
	}
	r.driver = p
	st.replicas = append(st.replicas, r)
	var ok bool
	if r.socket, ok = sb.HostPath(socket); !ok {
		t.Fatalf("the controller pod has no volume at %s", filepath.Dir(socket))
	}
	if err := p.WaitReady(ctx, dialable(r.socket)); err != nil {
		t.Fatal(err)
	}
	provPort, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r.provHealth = fmt.Sprintf("127.0.0.1:%d", provPort)
	r.provArgs = append(containerArgs(t, deployment, "csi-provisioner", map[string]string{
		"--csi-address=":   r.socket,
		"--http-endpoint=": r.provHealth,
	}), "--kubeconfig="+st.kubeconfig)
}

// dialable is a readiness check: the unix socket accepts a connection.
func dialable(socket string) func(context.Context) error {
	return func(context.Context) error {
		c, err := net.Dial("unix", socket)
		if err == nil {
			c.Close()
		}
		return err
	}
}

// accessPointOf is the access point ID of an EFS volume handle fs-X::fsap-Y.

// fileSystemViolations lists what a sandboxed process did with its file system that the
// chart gives no place for: writes its read-only root refused (EROFS, as the driver logs
// them), and regular files written to a writable root, which a container restart loses
// (state belongs on a volume; directories and symlinks, such as mount points and the
// image's /etc/amazon/efs link, are not state).
// dropMount removes the container's volumeMount at path ("" = none), as a chart
// that lost that writable place would render it.
func dropMount(t *testing.T, c *corev1.Container, path string) {
	t.Helper()
	if path == "" {
		return
	}
	n := len(c.VolumeMounts)
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == path })
	if len(c.VolumeMounts) == n {
		t.Fatalf("the chart mounts nothing at %s", path)
	}
}

// reportViolations fails the test when who wrote where the chart gives it no place,
// or, when want (the rendering lost the volume at unmount), when nothing was caught.
func reportViolations(t *testing.T, who string, violations []string, want bool, unmount string) {
	t.Helper()
	switch {
	case want && len(violations) == 0:
		t.Errorf("without the %s volume nothing was refused nor misplaced: the check cannot catch a chart that loses a writable place", unmount)
	case !want:
		for _, v := range violations {
			t.Errorf("%s wrote where the chart gives it no place: %s", who, v)
		}
	default:
		t.Logf("without the %s volume, as expected: %q", unmount, violations)
	}
}

func fileSystemViolations(t *testing.T, sb *cluster.Sandbox, logPath string) []string {
	t.Helper()
	var out []string
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// EROFS: the read-only root refused a write. "kept in memory only": state
		// the driver keeps across restarts found no place it may use (on the
		// root file system, a directory another user made first is refused
		// before any write is tried).
		if line := sc.Text(); strings.Contains(line, syscall.EROFS.Error()) || strings.Contains(line, "kept in memory only") {
			out = append(out, "refused: "+line)
		}
	}
	writes, err := sb.RootWrites()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range writes {
		if w.Mode.IsRegular() || w.Removed {
			out = append(out, "in the container layer: "+w.String())
		}
	}
	if len(writes) > 0 {
		t.Logf("root file system writes: %v", writes)
	}
	return out
}
