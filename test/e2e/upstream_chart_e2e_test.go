//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	efstypes "github.com/aws/aws-sdk-go-v2/service/efs/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/efs-csi/efs-csi-driver/test/e2e/manifests"
)

const (
	// The release name of upstream's install instructions (`helm upgrade --install
	// aws-efs-csi-driver ...`): it is in the immutable selectors, so it stays.
	helmRelease = "aws-efs-csi-driver"
	// A user's values file, written for upstream's chart, used unchanged with this one.
	helmValues = "upstream-user-values.yaml"
	helmClass  = "efs-apps" // the StorageClass the values file makes (upstream's storageClasses)

	helmBefore       = 60  // claims upstream's release provisions before the upgrade
	helmStorm        = 100 // created just before `helm upgrade`, provisioned across it
	helmDeleteBefore = 20  // of helmBefore, deleted just before `helm upgrade`
	helmAfter        = 60  // created while the replicas roll to the upgraded Deployment
	helmDeleteStorm  = 30  // of helmStorm, deleted while the replicas roll
)

// A user of upstream's chart switches to this one in place: upstream's chart 4.4.1 (the
// real archive, sha256 checked) is installed with helm into the API server with the
// user's values file (two controller replicas, root-directory removal, tags, a
// StorageClass through upstream's storageClasses key), and its controller Deployment, read
// back from the API server, runs: this driver with upstream's container arguments and
// the real csi-provisioner with upstream's sidecar arguments, as upstream's service
// account (its RBAC is what runs). Claims are provisioned; then, with claims being created
// and deleted, `helm upgrade` moves the same release to this chart with the same values
// file. The upgrade must apply in place (every object both charts render keeps its UID:
// nothing immutable stands in the way), and the replicas roll to the upgraded
// Deployment's arguments as its RollingUpdate does (a new replica up, then an old one
// stopped with SIGTERM, calls in flight) while more claims come and go. In the end every
// volume provisioned before the upgrade is still bound to the same PV with its access
// point and its data, there is one access point per PV with distinct GIDs, and deleting
// every claim leaves no access point.
func TestHelmUpgradeFromUpstreamChartMidStorm(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	archive, chart, values, h, a := upstreamRelease(ctx, t, s, "root-directory removal bind-mounts the emulator's file system")
	st := newEmulatorStack(ctx, t, s, s.policy(upstreamExamplePolicy)) // upstream's users' policy
	fsDir := filepath.Join(st.dataDir, fileSystemID)
	efsc := efsClient(st.endpoint)

	if out, err := h.run(ctx, "install", helmRelease, archive, "--namespace", releaseNamespace, "-f", values); err != nil {
		t.Fatalf("helm install of upstream's chart: %v\n%s", err, out)
	}
	installed := releaseObjects(ctx, t, a, h)
	upstream := findDeployment(t, slices.Collect(maps.Values(installed)))
	st.deployment = upstream
	st.authenticate(ctx)
	n, _, _ := unstructured.NestedInt64(upstream.Object, "spec", "replicas")
	if n < 1 {
		t.Fatalf("upstream's controller Deployment asks for %d replicas", n)
	}
	var old []*replica
	var oldTmp []string // each upstream-args replica's /tmp, where its record is (no ConfigMap grant)
	for range n {
		spec := podSpec(t, s, st, upstream)
		for _, e := range spec.driverEnv {
			if dir, ok := strings.CutPrefix(e, "TMPDIR="); ok {
				oldTmp = append(oldTmp, dir)
			}
		}
		old = append(old, st.addReplica(ctx, spec))
	}

	ns := newNamespace(ctx, t, s, "e2e-helm-upgrade")
	ns.class = helmClass
	pre := func(i int) string { return fmt.Sprintf("pre-%03d", i) }
	storm := func(i int) string { return fmt.Sprintf("storm-%03d", i) }
	after := func(i int) string { return fmt.Sprintf("after-%03d", i) }
	ns.create(ctx, t, helmBefore, pre)
	ns.waitLive(ctx, t, helmBefore)
	seen := map[string]int32{}
	checkAccessPoints(ctx, t, s, efsc, seen, helmBefore)
	// What a pod of each volume wrote: live volumes keep it, deleted ones lose it.
	volumes := boundVolumes(ctx, t, ns, helmBefore, pre)
	roots := accessPointRoots(ctx, t, st)
	for claim, pv := range volumes {
		writeFile(t, filepath.Join(fsDir, roots[accessPointOf(pv.handle)], "written-by-a-pod"), claim)
	}
	t.Logf("upstream's chart installed and %d claims bound by %d replicas with its arguments in %v",
		helmBefore, n, time.Since(start).Round(time.Millisecond))

	// The storm: claims created and deleted, `helm upgrade` while they are in flight.
	ns.create(ctx, t, helmStorm, storm)
	ns.delete(ctx, t, helmDeleteBefore, pre)
	pending := ns.pending(ctx, helmStorm, storm)
	t0 := time.Now()
	if out, err := h.run(ctx, "upgrade", helmRelease, chart, "--namespace", releaseNamespace, "-f", values); err != nil {
		t.Fatalf("helm upgrade to this chart: %v\n%s", err, out)
	}
	t.Logf("helm upgrade applied in %v with %d of %d new claims pending and %d deletions issued",
		time.Since(t0).Round(time.Millisecond), pending, helmStorm, helmDeleteBefore)
	upgraded := releaseObjects(ctx, t, a, h)
	checkUpgradedInPlace(ctx, t, a, h, installed, upgraded)
	ours := findDeployment(t, slices.Collect(maps.Values(upgraded)))
	if ours.GetUID() != upstream.GetUID() {
		t.Errorf("the controller Deployment was replaced (UID %s, was %s), not upgraded", ours.GetUID(), upstream.GetUID())
	}
	if args := containerArgs(t, ours, "efs-plugin", nil); !slices.Contains(args, "--mode=controller") {
		t.Fatalf("the upgraded Deployment does not run this chart's arguments: %q", args)
	}

	// The rolling update (this chart's maxSurge 1, maxUnavailable 0): for each old replica
	// a new one starts, then the old one gets SIGTERM with claims in flight.
	ns.delete(ctx, t, helmDeleteStorm, storm)
	per := helmAfter / len(old)
	for i, o := range old {
		st.addReplica(ctx, podSpec(t, s, st, ours))
		ns.create(ctx, t, per, func(j int) string { return after(i*per + j) })
		inFlight := ns.pending(ctx, helmAfter, after) + ns.pending(ctx, helmStorm, storm)
		o.stop()
		t.Logf("upstream-args replica %s stopped with %d claims pending", o.name, inFlight)
	}

	// The upstream-args replicas keep their record in Leases (upstream's RBAC grants
	// them), shared with this chart's controllers, whose orphan collector then
	// collects what they made for a claim deleted while its CreateVolume was in
	// flight when they were stopped. Releases before that kept it in their pods'
	// files, gone with the pods: what such a record names (recordedTokens) is left,
	// logged, for `efs-csi-driver audit`, as the upstream driver leaves it; anything
	// else left fails.
	tokens := recordedTokens(t, oldTmp)
	leftByOld := unnamedLeftBy(ctx, t, s, "an upstream-args replica (its record was its pod's file)",
		func(ap efstypes.AccessPointDescription) bool { return tokens[aws.ToString(ap.ClientToken)] })

	live := helmBefore - helmDeleteBefore + helmStorm - helmDeleteStorm + per*len(old)
	ns.waitLive(ctx, t, live)
	t.Logf("%d live volumes %v after the upgrade began", live, time.Since(t0).Round(time.Millisecond))
	checkAccessPoints(ctx, t, s, efsc, seen, live, leftByOld)
	now := boundVolumes(ctx, t, ns, helmBefore, pre)
	for i := range helmBefore {
		claim := pre(i)
		was, is := volumes[claim], now[claim]
		path := filepath.Join(fsDir, roots[accessPointOf(was.handle)], "written-by-a-pod")
		_, statErr := os.Stat(path)
		switch deleted := i < helmDeleteBefore; {
		case deleted && !errors.Is(statErr, os.ErrNotExist):
			t.Errorf("deleted claim %s: its volume's data %s is still there (%v)", claim, path, statErr)
		case deleted:
		case is.pv != was.pv || is.handle != was.handle:
			t.Errorf("claim %s was bound to %s (%s) before the upgrade, now to %q (%s)", claim, was.pv, was.handle, is.pv, is.handle)
		case statErr != nil:
			t.Errorf("claim %s: its volume lost its data: %v", claim, statErr)
		}
	}

	t1 := time.Now()
	ns.deleteAll(ctx, t)
	waitNoLeaks(ctx, t, s, efsc, leftByOld)
	t.Logf("every volume deleted in %v; whole scenario %v", time.Since(t1).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	st.checkAlive()
}

// upstreamRelease prepares a scenario that installs upstream's chart as release
// helmRelease and upgrades it to this chart: it skips the test when not root (needsRoot
// says what needs it) or without upstream's chart archive, and returns that archive,
// this chart, the user's values file, helm and an applier. `helm uninstall` of the
// release is registered first, so that it runs last, once the replicas are stopped (the
// later scenarios apply the objects they need again), and the objects the earlier
// scenarios applied outside any release are removed.
func upstreamRelease(ctx context.Context, t *testing.T, s *suite, needsRoot string) (archive, chart, values string, h *helm, a *applier) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip(needsRoot + ": needs root")
	}
	archive, err := manifests.UpstreamChart(s.repo)
	if errors.Is(err, manifests.ErrNoUpstreamChart) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	chart = filepath.Join(s.repo, "charts", "efs-csi-driver")
	values = filepath.Join(chart, "ci", helmValues)
	h = newHelm(t, s)
	a = newApplier(t, s)
	t.Cleanup(func() {
		if out, err := h.run(context.Background(), "uninstall", helmRelease, "--namespace", releaseNamespace); err != nil {
			t.Logf("helm uninstall: %v\n%s", err, out)
		}
	})
	removeUnreleased(ctx, t, a, h, values, archive, chart)
	return archive, chart, values, h, a
}

// podSpec is what a pod of the controller Deployment dep runs here: its containers'
// arguments and environment, plus what a process outside a pod lacks. The emulator's
// file system for root-directory removal (--local-root); a /tmp of its own (TMPDIR);
// a host name of its own (csi-provisioner's leader identity); and its namespace, which a pod reads from its service account's files and csi-provisioner
// and the driver outside one do not know: it is the leader-election namespace, unless the
// arguments name one.
func podSpec(t *testing.T, s *suite, st *controllerStack, dep *unstructured.Unstructured) replicaSpec {
	t.Helper()
	spec := replicaSpec{bins: s.bins, deployment: dep, leaderElection: true, podHostname: true,
		driverArgs: []string{"--local-root=" + st.dataDir},
		driverEnv:  append(containerEnv(t, dep, "efs-plugin"), "TMPDIR="+t.TempDir()),
	}
	inNamespace := "--leader-election-namespace=" + releaseNamespace
	for _, c := range []struct {
		name string
		args *[]string
	}{{"efs-plugin", &spec.driverArgs}, {"csi-provisioner", &spec.provArgs}} {
		if !slices.ContainsFunc(containerArgs(t, dep, c.name, nil), func(a string) bool {
			return strings.HasPrefix(a, "--leader-election-namespace=")
		}) {
			*c.args = append(*c.args, inNamespace)
		}
	}
	return spec
}

// helm runs the component cache's helm against the e2e API server as its admin, with
// helm's own configuration, cache and data in a directory of the test.
type helm struct {
	bin, kubeconfig, home string
}

func newHelm(t *testing.T, s *suite) *helm {
	return &helm{bin: s.comps.Helm, kubeconfig: s.cluster.Kubeconfig, home: t.TempDir()}
}

// run returns helm's standard output; an error carries its standard error.
func (h *helm) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, h.bin, append(args, "--kubeconfig", h.kubeconfig)...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(h.home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(h.home, "cache"), "HELM_DATA_HOME="+filepath.Join(h.home, "data"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w: %s", args[0], err, stderr.String())
	}
	return string(out), nil
}

// objectKey names an object across releases: kind, namespace, name.
type objectKey struct{ kind, namespace, name string }

func keyOf(o *unstructured.Unstructured) objectKey {
	return objectKey{o.GetKind(), o.GetNamespace(), o.GetName()}
}

// releaseObjects are the stored objects of the release's current manifest (hooks
// excluded, as helm keeps them apart; namespaced ones in the release namespace when the
// template names none, as helm installs them).
func releaseObjects(ctx context.Context, t *testing.T, a *applier, h *helm) map[objectKey]*unstructured.Unstructured {
	t.Helper()
	out, err := h.run(ctx, "get", "manifest", helmRelease, "--namespace", releaseNamespace)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Decode([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	m := map[objectKey]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetNamespace() == "" && isNamespaced(a, o) {
			o.SetNamespace(releaseNamespace)
		}
		live, err := a.get(ctx, o)
		if err != nil {
			t.Fatalf("%s %s/%s of release %s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), helmRelease, err)
		}
		m[keyOf(o)] = live
	}
	return m
}

func isNamespaced(a *applier, o *unstructured.Unstructured) bool {
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	return err == nil && m.Scope.Name() == meta.RESTScopeNameNamespace
}

// checkUpgradedInPlace checks that `helm upgrade` changed the release's objects in place:
// the release is deployed at revision 2 with this chart; every object both charts render
// keeps its UID (patched, not deleted and created: a selector or another immutable field
// that differs would have failed the upgrade or forced a replacement); what only this
// chart renders exists; what only upstream's rendered is gone; and the CSIDriver, a hook
// of both charts, is there.
func checkUpgradedInPlace(ctx context.Context, t *testing.T, a *applier, h *helm, before, after map[objectKey]*unstructured.Unstructured) {
	t.Helper()
	out, err := h.run(ctx, "list", "--namespace", releaseNamespace, "--filter", "^"+helmRelease+"$", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var releases []struct {
		Revision string `json:"revision"`
		Status   string `json:"status"`
		Chart    string `json:"chart"`
	}
	if err := json.Unmarshal([]byte(out), &releases); err != nil {
		t.Fatalf("helm list: %v: %s", err, out)
	}
	if len(releases) != 1 || releases[0].Status != "deployed" || releases[0].Revision != "2" ||
		!strings.HasPrefix(releases[0].Chart, "efs-csi-driver-") {
		t.Errorf("after the upgrade helm lists %+v, want revision 2 of efs-csi-driver deployed", releases)
	}
	uid := func(o *unstructured.Unstructured) (types.UID, error) {
		live, err := a.get(ctx, o)
		if err != nil {
			return "", err
		}
		return live.GetUID(), nil
	}
	kept, added, removed := 0, 0, 0
	for k, o := range after {
		now, err := uid(o)
		if err != nil {
			t.Errorf("%s %s/%s of the upgraded release: %v", k.kind, k.namespace, k.name, err)
			continue
		}
		prev, ok := before[k]
		if !ok {
			added++
			continue
		}
		kept++
		if was := prev.GetUID(); was != now {
			t.Errorf("%s %s/%s was replaced (UID %s, was %s), not patched", k.kind, k.namespace, k.name, now, was)
		}
	}
	for k, o := range before {
		if _, ok := after[k]; ok {
			continue
		}
		removed++
		if _, err := uid(o); !apierrors.IsNotFound(err) {
			t.Errorf("%s %s/%s of upstream's release only is still there after the upgrade (%v)", k.kind, k.namespace, k.name, err)
		}
	}
	csiDriver := &unstructured.Unstructured{}
	csiDriver.SetAPIVersion("storage.k8s.io/v1")
	csiDriver.SetKind("CSIDriver")
	csiDriver.SetName("efs.csi.aws.com")
	if _, err := uid(csiDriver); err != nil {
		t.Errorf("CSIDriver after the upgrade: %v", err)
	}
	t.Logf("upgrade in place: %d objects patched, %d added, %d removed", kept, added, removed)
}

// removeUnreleased deletes the objects that either chart renders and that the earlier
// scenarios applied outside any release (service accounts, RBAC, the CSIDriver): helm
// refuses to install over objects it does not own, and a user of upstream's chart has
// none of them.
func removeUnreleased(ctx context.Context, t *testing.T, a *applier, h *helm, values string, charts ...string) {
	t.Helper()
	for _, chart := range charts {
		objs, err := manifests.RenderChart(h.bin, chart, releaseNamespace, values)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			ri, err := a.resource(o)
			if err != nil {
				t.Fatal(err)
			}
			live, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if live.GetAnnotations()["meta.helm.sh/release-name"] == helmRelease {
				continue
			}
			if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
}

// boundVolume is a claim's PV and volume handle.
type boundVolume struct{ pv, handle string }

// boundVolumes returns the PV and handle of each bound claim among name(0..n-1).
func boundVolumes(ctx context.Context, t *testing.T, ns *namespace, n int, name func(int) string) map[string]boundVolume {
	t.Helper()
	out := map[string]boundVolume{}
	for i := range n {
		pvc, err := ns.pvcs().Get(ctx, name(i), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			continue
		}
		pv, err := ns.s.cluster.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pv.Status.Phase != corev1.VolumeBound || pv.Spec.CSI == nil {
			continue
		}
		out[pvc.Name] = boundVolume{pv: pv.Name, handle: pv.Spec.CSI.VolumeHandle}
	}
	return out
}

// accessPointOf is the access point ID of a volume handle ([efs:]fs-X::fsap-Y).
func accessPointOf(handle string) string { return handle[strings.LastIndex(handle, "::")+2:] }

// accessPointRoots maps each access point of the file system to its root directory.
func accessPointRoots(ctx context.Context, t *testing.T, st *controllerStack) map[string]string {
	t.Helper()
	aps, err := accessPoints(ctx, efsClient(st.endpoint))
	if err != nil {
		t.Fatal(err)
	}
	roots := map[string]string{}
	for _, ap := range aps {
		roots[aws.ToString(ap.AccessPointId)] = rootPath(ap)
	}
	return roots
}

// recordedTokens reads the client tokens of the volumes recorded in the file records
// (pkg/journal's File: JSON lines, a volume entry's name is its token) under each of
// the /tmp directories dirs.
func recordedTokens(t *testing.T, dirs []string) map[string]bool {
	t.Helper()
	tokens := map[string]bool{}
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "efs-csi-journal", "journal.log"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(data)) {
			var rec struct {
				Op    string `json:"op"`
				Kind  string `json:"k"`
				Name  string `json:"n"`
				Value []byte `json:"v"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Op == "put" && rec.Kind == "volume" {
				tokens[rec.Name] = true
				// The token its access point carries, when not the key: a
				// GID token (journal.Volume.ClientToken).
				var v struct {
					ClientToken string `json:"clientToken"`
				}
				if json.Unmarshal(rec.Value, &v) == nil && v.ClientToken != "" {
					tokens[v.ClientToken] = true
				}
			}
		}
	}
	return tokens
}
