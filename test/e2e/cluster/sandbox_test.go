package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestExpandVarsAsTheKubelet(t *testing.T) {
	vars := map[string]string{"NODE_NAME": "n1", "A": "x"}
	for _, tc := range []struct{ in, want string }{
		{"--node-id=$(NODE_NAME)", "--node-id=n1"},
		{"$(A)$(A)", "xx"},
		{"$(MISSING) stays", "$(MISSING) stays"},
		{"$$(A) is literal", "$(A) is literal"},
		{"no refs", "no refs"},
	} {
		if got := ExpandVars(tc.in, vars); got != tc.want {
			t.Errorf("ExpandVars(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The environment and the resolved fields as the kubelet gives them, without starting
// anything.
func TestSandboxEnvironmentFillsValueFrom(t *testing.T) {
	c := corev1.Container{Name: "c", Env: []corev1.EnvVar{
		{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "ID", Value: "node/$(NODE_NAME)"},
		{Name: "MEM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
			ContainerName: "c", Resource: "limits.memory", Divisor: resource.MustParse("1")}}},
		{Name: "MEM_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
			Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
	}}
	sb := &Sandbox{NodeName: "n1", PodName: "p", APIServer: "https://127.0.0.1:6443", NodeMemory: 3 << 30}
	env, err := sb.environment(&c)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NODE_NAME=n1", "ID=node/n1", "MEM=3221225472", "MEM_MI=3072",
		"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=6443", "HOSTNAME=p"} {
		if !slices.Contains(env, want) {
			t.Errorf("env %q lacks %q", env, want)
		}
	}
	c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("200Mi")}
	if env, _ = sb.environment(&c); !slices.Contains(env, "MEM_MI=200") {
		t.Errorf("with a limit: env %q lacks MEM_MI=200", env)
	}
}

// A container runs with the rendered user, root file system and volumes: what it writes
// lands in its volumes' host directories (under Dir, never the host's own paths), a
// read-only root refuses the rest, and a writable root keeps it in the overlay's upper
// layer, which RootWrites lists.
func TestSandboxRunsAContainerAsRendered(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mount namespace, overlay and bind mounts")
	}
	// The script reports into the emptyDir; the root write is expected to fail on a
	// read-only root.
	script := `r=/scratch/report
echo "uid=$(id -u) groups=$(id -G)" > $r
echo "node=$NODE_NAME" >> $r
echo "token=$(cat ` + ServiceAccountDir + `/token) ns=$(cat ` + ServiceAccountDir + `/namespace)" >> $r
echo data > /var/lib/kubelet/written
if echo x > /tmp/sandbox-root-write-$$ 2>/dev/null; then echo root=writable >> $r; else echo root=refused >> $r; fi
if echo x > ` + ServiceAccountDir + `/x 2>/dev/null; then echo sa=writable >> $r; else echo sa=refused >> $r; fi
echo done >> $r`
	uid, gid, fsGroup := int64(65532), int64(65532), int64(65533)
	pod := func(readOnly bool) corev1.PodSpec {
		dirType := corev1.HostPathDirectoryOrCreate
		return corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &gid, FSGroup: &fsGroup},
			Containers: []corev1.Container{{
				Name:            "c",
				Command:         []string{"/bin/sh", "-c", script},
				SecurityContext: &corev1.SecurityContext{ReadOnlyRootFilesystem: &readOnly},
				Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "scratch", MountPath: "/scratch"},
					{Name: "kubelet", MountPath: "/var/lib/kubelet"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "kubelet", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/kubelet", Type: &dirType}}},
			},
		}
	}
	for _, tc := range []struct {
		name       string
		readOnly   bool
		wantRoot   string
		wantWrites bool
	}{
		{"read-only root", true, "root=refused", false},
		{"writable root", false, "root=writable", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A hostPath the container writes must be created under Dir, not on the host.
			hostFile := "/var/lib/kubelet/written"
			if _, err := os.Stat(hostFile); err == nil {
				t.Skipf("%s exists on this host", hostFile)
			}
			sb := &Sandbox{Dir: t.TempDir(), Pod: pod(tc.readOnly), Container: "c", PodName: "p",
				Namespace: "ns1", NodeName: "n1", Token: "tok", CACert: []byte("ca")}
			// A world-writable host directory, as the node's kubelet directory is not:
			// the write below is the container's, not refused by ownership.
			if err := os.MkdirAll(filepath.Join(sb.Dir, "host", "/var/lib/kubelet"), 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(sb.Dir, "host", "/var/lib/kubelet"), 0o777); err != nil {
				t.Fatal(err)
			}
			p, err := sb.Start("sandboxed", t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Done():
			case <-time.After(30 * time.Second):
				p.Kill()
				t.Fatal("the container did not exit")
			}
			report, ok := sb.HostPath("/scratch/report")
			if !ok {
				t.Fatal("/scratch is not a volume")
			}
			b, err := os.ReadFile(report)
			if err != nil {
				p.Tail(testLog{t}, 20)
				t.Fatal(err)
			}
			got := strings.Fields(string(b))
			for _, want := range []string{"uid=65532", "groups=65532", "65533", "node=n1", "token=tok", "ns=ns1", tc.wantRoot, "sa=refused", "done"} {
				if !slices.Contains(got, want) {
					t.Errorf("report %q lacks %q", got, want)
				}
			}
			if _, err := os.Stat(filepath.Join(sb.Dir, "host", hostFile)); err != nil {
				t.Errorf("the hostPath write is not under Dir: %v", err)
			}
			if _, err := os.Stat(hostFile); err == nil {
				t.Errorf("the host's %s was written", hostFile)
			}
			writes, err := sb.RootWrites()
			if err != nil {
				t.Fatal(err)
			}
			if hasTmp := slices.ContainsFunc(writes, func(w RootWrite) bool {
				return strings.HasPrefix(w.Path, "/tmp/sandbox-root-write-") && w.Mode.IsRegular()
			}); hasTmp != tc.wantWrites {
				t.Errorf("root writes %q: /tmp/sandbox-root-write-* listed %v, want %v", writes, hasTmp, tc.wantWrites)
			}
		})
	}
}

// What the kubelet refuses, the sandbox refuses before starting anything.
func TestSandboxRefusesWhatTheKubeletRefuses(t *testing.T) {
	yes := true
	for _, tc := range []struct {
		name string
		pod  corev1.PodSpec
		want string
	}{
		{"runAsNonRoot without a user", corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes},
			Containers:      []corev1.Container{{Name: "c", Command: []string{"/bin/true"}}},
		}, "runAsNonRoot"},
		{"a mount of no volume", corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Command: []string{"/bin/true"},
				VolumeMounts: []corev1.VolumeMount{{Name: "gone", MountPath: "/x"}}}},
		}, "names no volume"},
		{"no such container", corev1.PodSpec{}, "no container"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			no := false
			tc.pod.AutomountServiceAccountToken = &no
			sb := &Sandbox{Dir: t.TempDir(), Pod: tc.pod, Container: "c"}
			if _, err := sb.Start("never", t.TempDir()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Start: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
