//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/efs-csi/efs-csi-driver/test/e2e/manifests"
)

// The OCI reference docs/install.md installs from; a checkout's chart directory stands
// for it (the doc says so).
const installOCIChart = "oci://ghcr.io/efs-csi/charts/efs-csi-driver"

// docs/install.md, followed on the emulator-backed cluster: the test reads the doc
// itself, so that the two cannot drift. Sections 1 and 2 are AWS's ([AWS]: the emulator
// stands for the file system, mount targets and the role, under AWS's managed policy
// as section 2 attaches). Section 3: its values block (the file system ID the
// emulator's, the IRSA roleArn kept: it must render as the service account's
// annotation) and its `helm upgrade --install` command, the OCI reference replaced by
// the checkout's chart, run with helm; the objects its rollout lines wait for exist,
// and the controller Deployment read back from the API server runs (there is no kubelet
// here: that is what the rollout stands for). Section 4: its manifest applied (the
// claim and the pod: the pod stays unscheduled, it needs NFS) and the claim Bound, its
// access point under the class's basePath. Section 5 is run by
// TestHelmUpgradeFromUpstreamsRealControllerMidCreates: here, every values key it says
// carries over must be one of the chart's values.yaml. Section 6: the claims deleted
// (their access points go), `efs-csi-driver audit` clean, its `helm uninstall` run (the release and its objects go,
// the record stays) and its lease deletion run as client-go (it must match the record).
func TestInstallGuide(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	b, err := os.ReadFile(filepath.Join(s.repo, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, n := range []int{1, 2} {
		if h := docHeading(t, doc, n); !strings.Contains(h, "[AWS]") {
			t.Errorf("docs/install.md section %d (%q) is AWS's alone but not marked [AWS]", n, h)
		}
	}
	chart := filepath.Join(s.repo, "charts", "efs-csi-driver")
	var chartMeta struct{ Version string }
	if b, err := os.ReadFile(filepath.Join(chart, "Chart.yaml")); err != nil {
		t.Fatal(err)
	} else if err := yaml.Unmarshal(b, &chartMeta); err != nil {
		t.Fatal(err)
	}

	// 3. Install the chart.
	sec3 := docSection(t, doc, 3)
	if !strings.Contains(sec3, "`charts/efs-csi-driver` in place of the OCI reference") {
		t.Errorf("section 3 no longer says a checkout's charts/efs-csi-driver stands for %s", installOCIChart)
	}
	valuesText := strings.ReplaceAll(docFence(t, sec3, "yaml", ""), "fs-0123456789abcdef0", fileSystemID)
	var values struct {
		Controller struct {
			ServiceAccount struct{ RoleArn string } `json:"serviceAccount"`
		}
		StorageClasses []struct {
			Name       string
			Parameters map[string]string
		} `json:"storageClasses"`
	}
	if err := yaml.Unmarshal([]byte(valuesText), &values); err != nil {
		t.Fatalf("section 3's values: %v", err)
	}
	if len(values.StorageClasses) != 1 {
		t.Fatalf("section 3's values make %d StorageClasses, want the one section 4 uses", len(values.StorageClasses))
	}
	class := values.StorageClasses[0]
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	writeFile(t, valuesFile, valuesText)
	sh3 := docFence(t, sec3, "sh", "helm upgrade --install")
	install := shellWords(docCommand(t, sh3, "helm upgrade --install"))
	for i, w := range install {
		switch {
		case w == installOCIChart:
			install[i] = chart
		case w == "values.yaml" && i > 0 && (install[i-1] == "-f" || install[i-1] == "--values"):
			install[i] = valuesFile
		case w == "--version" && i+1 < len(install) && install[i+1] != chartMeta.Version:
			t.Errorf("section 3 installs --version %s, the chart is %s", install[i+1], chartMeta.Version)
		}
	}
	if !slices.Contains(install, chart) || !slices.Contains(install, valuesFile) || flagValue(install, "--namespace") != releaseNamespace {
		t.Fatalf("section 3's command %q: want the OCI chart, -f values.yaml and --namespace %s", install, releaseNamespace)
	}
	release := install[3] // helm upgrade --install RELEASE CHART
	t.Logf("section 3: helm %s", strings.Join(install[1:], " "))
	// A new user's cluster has no record of this driver: the earlier scenarios' (a
	// refused create's entry stays for the collector's grace period) is removed, so that
	// section 6's audit reports this walkthrough alone. Nor a csi-provisioner leader
	// lease of a killed replica, which the new one would wait out (about 20 s).
	removeRecord(ctx, t, s)
	err = s.cluster.Client.CoordinationV1().Leases(releaseNamespace).Delete(ctx, "efs-csi-aws-com", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	rel := installChart(ctx, t, s, valuesFile, install[1:]...)
	rel.release = release
	st := newEmulatorStack(ctx, t, s)
	a := newApplier(t, s)
	rollouts := regexp.MustCompile(`(?m)^kubectl -n (\S+) rollout status (\S+)/(\S+)\s*(#.*)?$`).FindAllStringSubmatch(sh3, -1)
	if len(rollouts) == 0 {
		t.Error("section 3 waits for no rollout")
	}
	for _, m := range rollouts {
		kind := map[string]string{"deploy": "Deployment", "deployment": "Deployment", "ds": "DaemonSet", "daemonset": "DaemonSet"}[m[2]]
		o := &unstructured.Unstructured{}
		o.SetAPIVersion("apps/v1")
		o.SetKind(kind)
		o.SetNamespace(m[1])
		o.SetName(m[3])
		if _, err := a.get(ctx, o); kind == "" || err != nil {
			t.Errorf("section 3 waits for %s/%s in %s: %v", m[2], m[3], m[1], err)
		}
	}
	sa, err := s.cluster.Client.CoreV1().ServiceAccounts(releaseNamespace).Get(ctx, controllerSA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := sa.Annotations["eks.amazonaws.com/role-arn"]; got != values.Controller.ServiceAccount.RoleArn {
		t.Errorf("the controller's service account has role ARN %q, section 3's values %q", got, values.Controller.ServiceAccount.RoleArn)
	}
	startChartController(ctx, t, s, st)

	// 4. A claim and a pod writing.
	sh4 := docFence(t, docSection(t, doc, 4), "sh", "kubectl apply")
	manifest := regexp.MustCompile(`(?s)<<'YAML'\n(.*?)\nYAML\n`).FindStringSubmatch(sh4)
	if manifest == nil {
		t.Fatal("section 4 has no kubectl apply heredoc")
	}
	objs, err := manifests.Decode([]byte(manifest[1]))
	if err != nil {
		t.Fatalf("section 4's manifest: %v", err)
	}
	claimName := regexp.MustCompile(`(?m)^kubectl get pvc (\S+) +# Bound`).FindStringSubmatch(sh4)
	if claimName == nil {
		t.Fatal("section 4 does not check a claim Bound")
	}
	for _, o := range objs {
		if o.GetNamespace() == "" && isNamespaced(a, o) {
			o.SetNamespace("default") // as kubectl, with no --namespace
		}
		if o.GetKind() == "Pod" {
			// A real cluster's service account controller makes each namespace's
			// default account; this one runs only the volume controllers.
			_, err := s.cluster.Client.CoreV1().ServiceAccounts(o.GetNamespace()).Create(ctx,
				&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
		if err := a.apply(ctx, o, false); err != nil {
			t.Fatalf("section 4: apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	t.Cleanup(func() {
		for _, o := range objs {
			if ri, err := a.resource(o); err == nil {
				_ = ri.Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
			}
		}
	})
	ns := &namespace{s: s, name: "default", class: class.Name}
	var pvc *corev1.PersistentVolumeClaim
	waitFor(ctx, t, "section 4's claim "+claimName[1]+" Bound", func() (bool, error) {
		p, err := ns.pvcs().Get(ctx, claimName[1], metav1.GetOptions{})
		pvc = p
		return err == nil && p.Status.Phase == corev1.ClaimBound, err
	})
	if got := aws.ToString(pvc.Spec.StorageClassName); got != class.Name {
		t.Errorf("claim %s is of class %q, section 3 makes %q", pvc.Name, got, class.Name)
	}
	efsc := efsClient(st.endpoint)
	aps, err := accessPointsOf(ctx, efsc, class.Parameters["fileSystemId"])
	if err != nil || len(aps) != 1 {
		t.Fatalf("%d access points on %s (%v), want 1", len(aps), class.Parameters["fileSystemId"], err)
	}
	if root, base := rootPath(aps[0]), class.Parameters["basePath"]; !strings.HasPrefix(root, base+"/") {
		t.Errorf("access point %s at %s, not under the class's basePath %s", aws.ToString(aps[0].AccessPointId), root, base)
	}

	// 5. Upgrading from upstream's chart: the keys said to carry over are this chart's.
	checkCarriedOverKeys(t, s, docSection(t, doc, 5))

	// 6. Uninstall: the claims first, then the release.
	for _, o := range objs {
		ri, err := a.resource(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	waitNoLeaks(ctx, t, s, efsc)
	st.checkAlive()
	sec6 := docSection(t, doc, 6)
	// "`efs-csi-driver audit` (docs/audit.md) lists anything left": from a workstation,
	// as docs/audit.md runs it (the kubeconfig, AWS's environment): nothing is left.
	if !strings.Contains(sec6, "`efs-csi-driver audit`") {
		t.Error("section 6 no longer audits before uninstalling")
	}
	audit := exec.CommandContext(ctx, filepath.Join(s.bins, "efs-csi-driver"), "audit", "--namespace", releaseNamespace)
	audit.Env = append(append(os.Environ(), emulatorEnv(st.endpoint)...), "KUBECONFIG="+s.cluster.Kubeconfig)
	if out, err := audit.CombinedOutput(); err != nil {
		t.Errorf("section 6: efs-csi-driver audit: %v (exit 1: findings, 2: error)\n%s", err, out)
	} else {
		t.Logf("section 6: efs-csi-driver audit: clean\n%s", out)
	}
	sh6 := docFence(t, sec6, "sh", "helm uninstall")
	uninstall := shellWords(docCommand(t, sh6, "helm uninstall"))
	if len(uninstall) < 3 || uninstall[2] != release || flagValue(uninstall, "--namespace") != releaseNamespace {
		t.Errorf("section 6 uninstalls %q, section 3 installed release %s in %s", uninstall, release, releaseNamespace)
	}
	st.replicas[0].stop() // the pods go with the Deployment
	if out, err := rel.h.run(ctx, uninstall[1:]...); err != nil {
		t.Fatalf("section 6: %v\n%s", err, out)
	}
	rel.removed = true
	if out, err := rel.h.run(ctx, "list", "--namespace", releaseNamespace, "--short"); err != nil || strings.Contains(out, release) {
		t.Errorf("after section 6, helm list: %q (%v)", out, err)
	}
	if _, err := s.cluster.Client.AppsV1().Deployments(releaseNamespace).Get(ctx, "efs-csi-controller", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the controller Deployment after helm uninstall: %v", err)
	}
	if _, err := s.cluster.Client.StorageV1().StorageClasses().Get(ctx, class.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("StorageClass %s after helm uninstall: %v", class.Name, err)
	}
	// "The record ... stays; ... delete it with kubectl -n NS delete lease -l SELECTOR".
	lease := regexp.MustCompile("`kubectl -n (\\S+) delete lease -l (\\S+)`").FindStringSubmatch(sec6)
	if lease == nil {
		t.Fatal("section 6 gives no command deleting the record's Leases")
	}
	leases := s.cluster.Client.CoordinationV1().Leases(lease[1])
	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: lease[2]})
	if err != nil || len(list.Items) == 0 {
		t.Fatalf("section 6's selector %s in %s matches %d Leases (%v): the record is not what it deletes", lease[2], lease[1], len(list.Items), err)
	}
	if err := leases.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: lease[2]}); err != nil {
		t.Fatal(err)
	}
	t.Logf("docs/install.md sections 3, 4 and 6 followed in %v (record: %d Leases deleted)", time.Since(start).Round(time.Millisecond), len(list.Items))
}

// checkCarriedOverKeys checks that each values key section 5 says carries over from
// upstream's chart ("Values that carry over: `a.b`, `c.*`, ...") is in this chart's
// values.yaml (a `.*` key: a map there).
func checkCarriedOverKeys(t *testing.T, s *suite, sec5 string) {
	t.Helper()
	_, list, ok := strings.Cut(sec5, "Values that carry over:")
	if !ok {
		t.Fatal("section 5 names no values that carry over")
	}
	list, _, _ = strings.Cut(list, ". ")
	b, err := os.ReadFile(filepath.Join(s.repo, "charts", "efs-csi-driver", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(list, -1) {
		key := m[1]
		keys = append(keys, key)
		var v any = values
		path, wild := strings.CutSuffix(key, ".*")
		for _, k := range strings.Split(path, ".") {
			mv, _ := v.(map[string]any)
			var found bool
			if v, found = mv[k]; !found {
				t.Errorf("section 5 says %s carries over: charts/efs-csi-driver/values.yaml has no %s", key, path)
				break
			}
		}
		if _, isMap := v.(map[string]any); wild && !isMap {
			t.Errorf("section 5 says %s carries over: %s is not a map in values.yaml", key, path)
		}
	}
	if len(keys) < 3 {
		t.Errorf("section 5's carried-over keys: %q, want the list", keys)
	}
	t.Logf("section 5: %d carried-over keys in values.yaml: %s", len(keys), strings.Join(keys, ", "))
}

// docSection is section n of docs/install.md: from its "## n." heading to the next.
func docSection(t *testing.T, doc string, n int) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, fmt.Sprintf("\n## %d. ", n))
	if !ok {
		t.Fatalf("docs/install.md has no section %d", n)
	}
	sec, _, _ := strings.Cut(rest, "\n## ")
	return sec
}

// docHeading is the heading line of section n.
func docHeading(t *testing.T, doc string, n int) string {
	t.Helper()
	h, _, _ := strings.Cut(docSection(t, doc, n), "\n")
	return h
}

// docFence is the body of the first fenced block of lang in sec that contains has.
func docFence(t *testing.T, sec, lang, has string) string {
	t.Helper()
	for _, m := range regexp.MustCompile("(?ms)^```"+lang+"\n(.*?)^```").FindAllStringSubmatch(sec, -1) {
		if strings.Contains(m[1], has) {
			return m[1]
		}
	}
	t.Fatalf("docs/install.md: no ```%s block with %q in %.60q...", lang, has, sec)
	return ""
}

// docCommand is the command of block that begins with prefix, its continuation lines
// (a trailing backslash) joined.
func docCommand(t *testing.T, block, prefix string) string {
	t.Helper()
	_, rest, ok := strings.Cut(block, prefix)
	if !ok {
		t.Fatalf("docs/install.md: no command %q", prefix)
	}
	cmd := prefix
	for _, l := range strings.SplitAfter(rest, "\n") {
		l = strings.TrimRight(l, "\n")
		if c, more := strings.CutSuffix(l, "\\"); more {
			cmd += c
			continue
		}
		cmd += l
		break
	}
	return cmd
}

// shellWords splits a command of the doc into words: it quotes nothing and expands
// nothing (a comment ends it).
func shellWords(cmd string) []string {
	cmd, _, _ = strings.Cut(cmd, " #")
	return strings.Fields(cmd)
}

// flagValue is the value of flag in args ("--flag v" or "--flag=v"), or "".
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}
