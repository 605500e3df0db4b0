//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Lease record keeps the journal.Store contract through a real
// kube-apiserver and etcd: pkg/kube's conformance run against this control
// plane (EFS_JOURNAL_KUBECONFIG), as the fake runs it in make test.
func TestLeaseRecordConformanceOnARealAPIServer(t *testing.T) {
	s := env(t)
	cmd := exec.CommandContext(t.Context(), "go", "test", "./pkg/kube", "-count=1",
		"-run", "^TestLeaseJournalConformanceRealAPIServer$", "-v")
	cmd.Dir = s.repo
	cmd.Env = append(os.Environ(), "EFS_JOURNAL_KUBECONFIG="+s.cluster.Kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if passed := strings.Count(string(out), "    --- PASS: TestLeaseJournalConformanceRealAPIServer/"); passed < 20 {
		t.Fatalf("%d subtests passed, want every one\n%s", passed, out)
	}
}

// TestRecordBenchmark (EFS_BENCH_RECORD=1, make bench-record): the same
// storm through the stress tool with the record in a file and in Leases of
// this control plane, default flags but --journal, the controller under
// upstream's RBAC (Leases, ConfigMaps get only); pairs per second and the
// API server's Lease requests per pair. Then EFS_BENCH_AT_REST volumes
// (default 10,000) at rest: objects, bytes, start-up listing.
func TestRecordBenchmark(t *testing.T) {
	if os.Getenv("EFS_BENCH_RECORD") != "1" {
		t.Skip("EFS_BENCH_RECORD=1 runs it (make bench-record)")
	}
	s := env(t)
	ctx := t.Context()
	dir := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", dir+"/", "./cmd/efs-csi-stress")
	build.Dir = s.repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	tokenFile := benchServiceAccount(t, s, dir)
	volumes := envInt("EFS_BENCH_VOLUMES", 1000)
	runs := envInt("EFS_BENCH_RUNS", 2)
	kubeArgs := []string{"--journal=kubernetes", "--kube-api-url=" + s.cluster.Server, "--kube-token-file=" + tokenFile,
		"--kube-ca-file=" + filepath.Join(s.cluster.Dir, "ca.crt"), "--leader-election-namespace=" + benchNamespace}
	for i := range runs {
		for _, rec := range []struct {
			name string
			args []string
		}{{"file", []string{"--journal=file"}}, {"leases", kubeArgs}} {
			before := leaseRequests(t, s)
			r := stressRun(t, s, dir, fmt.Sprintf("%s-%d", rec.name, i), volumes, rec.args)
			after := leaseRequests(t, s)
			secs := 0.0
			for _, p := range r.Phases {
				secs += p.Seconds
			}
			line := fmt.Sprintf("BENCH record=%s run=%d volumes=%d workers=100: %.1f pairs/s (create+delete %.1f vol/s; phases", rec.name, i, volumes,
				float64(r.Volumes.Created)/secs, float64(r.Volumes.Created+r.Volumes.Deleted)/secs)
			for _, p := range r.Phases {
				line += fmt.Sprintf(" %s %.1f vol/s", p.Name, p.Throughput)
			}
			line += ")"
			if rec.name == "leases" {
				total := 0.0
				for verb, n := range after {
					d := n - before[verb]
					total += d
					line += fmt.Sprintf(" %s %.2f/pair", verb, d/float64(r.Volumes.Created))
				}
				line += fmt.Sprintf(" all %.2f/pair", total/float64(r.Volumes.Created))
			}
			t.Log(line)
			if r.Outcome != "clean" {
				t.Errorf("%s: outcome %s", rec.name, r.Outcome)
			}
		}
	}
	atRest := envInt("EFS_BENCH_AT_REST", 10000)
	if atRest == 0 {
		return
	}
	cmd := exec.CommandContext(ctx, "go", "test", "./pkg/kube", "-count=1", "-timeout=30m",
		"-run", "^TestLeaseJournalAtRestRealAPIServer$", "-v")
	cmd.Dir = s.repo
	cmd.Env = append(os.Environ(), "EFS_JOURNAL_KUBECONFIG="+s.cluster.Kubeconfig, "EFS_JOURNAL_AT_REST="+strconv.Itoa(atRest))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "AT REST") || strings.Contains(l, "wrote") {
			t.Log(strings.TrimSpace(l))
		}
	}
}

const benchNamespace = "efs-record-bench"

// benchServiceAccount makes the controller's service account with
// upstream's grants for the record (Leases; ConfigMaps get only) and
// returns a file holding its token.
func benchServiceAccount(t *testing.T, s *suite, dir string) string {
	t.Helper()
	ctx := t.Context()
	c := s.cluster.Client
	for _, err := range []error{
		ignoreExists(c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}, metav1.CreateOptions{})),
		ignoreExists(c.CoreV1().ServiceAccounts(benchNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "controller"}}, metav1.CreateOptions{})),
		ignoreExists(c.RbacV1().Roles(benchNamespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "record"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "watch", "list", "delete", "update", "create"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
		}}, metav1.CreateOptions{})),
		ignoreExists(c.RbacV1().RoleBindings(benchNamespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "record"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "record"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "controller", Namespace: benchNamespace}}}, metav1.CreateOptions{})),
		// The cluster ID: a get of kube-system (upstream's ClusterRole grants no namespaces; --cluster-id would do).
		ignoreExists(c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "efs-record-bench"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
		}}, metav1.CreateOptions{})),
		ignoreExists(c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "efs-record-bench"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "efs-record-bench"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "controller", Namespace: benchNamespace}}}, metav1.CreateOptions{})),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	exp := int64(3600)
	tok, err := c.CoreV1().ServiceAccounts(benchNamespace).CreateToken(ctx, "controller",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "controller.token")
	if err := os.WriteFile(f, []byte(tok.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func ignoreExists[T any](_ T, err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// benchReport is what the benchmark reads of the stress tool's report.
type benchReport struct {
	Outcome string `json:"outcome"`
	Volumes struct {
		Created int `json:"created"`
		Deleted int `json:"deleted"`
	} `json:"volumes"`
	Phases []struct {
		Name       string  `json:"name"`
		Seconds    float64 `json:"seconds"`
		Throughput float64 `json:"volumesPerSecond"`
	} `json:"phases"`
}

// stressRun runs the quiet storm (100 workers, no faults, no kills; the
// tool's duplicate and delete-during-create rates) with driverArgs.
func stressRun(t *testing.T, s *suite, dir, name string, volumes int, driverArgs []string) benchReport {
	t.Helper()
	out := filepath.Join(dir, name)
	args := []string{"--embedded", "--driver-binary=" + filepath.Join(s.bins, "efs-csi-driver"),
		"--volumes=" + strconv.Itoa(volumes), "--concurrency=100", "--fault-profile=none", "--chaos=false",
		"--progress=false", "--seed=7", "--out-dir=" + out}
	// EFS_BENCH_DRIVER_ARGS: more driver flags for both records, e.g.
	// --delete-access-point-root-dir=false (the chart's default; as root the
	// stress tool turns root removal on, whose listing-lag wait bounds the
	// deletes at about the worker count per second).
	for _, a := range append(driverArgs, strings.Fields(os.Getenv("EFS_BENCH_DRIVER_ARGS"))...) {
		args = append(args, "--driver-arg="+a)
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(dir, "efs-csi-stress"), args...)
	cmd.Env = append(os.Environ(), "PATH="+s.bins+":"+os.Getenv("PATH"))
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("stress %s: %v\n%s", name, err, b)
	}
	raw, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r benchReport
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// leaseRequests are the API server's Lease requests so far, by verb
// (apiserver_request_total).
func leaseRequests(t *testing.T, s *suite) map[string]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	raw, err := s.cluster.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		// Every Lease request: the driver's, and the API server's own
		// identity Lease, renewed every 10 s (a few a run).
		if !strings.HasPrefix(l, "apiserver_request_total{") || !strings.Contains(l, `resource="leases"`) {
			continue
		}
		_, after, ok := strings.Cut(l, `verb="`)
		if !ok {
			continue
		}
		verb, _, _ := strings.Cut(after, `"`)
		f := strings.Fields(l)
		n, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			out[verb] += n
		}
	}
	return out
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
	}
	return def
}
