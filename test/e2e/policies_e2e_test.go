//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// chartRelease is the release name of docs/install.md's `helm upgrade --install`.
const chartRelease = "efs-csi-driver"

// policyClass is a StorageClass a row's values file makes through the chart's
// storageClasses: efs-ap on the EFS file system, or s3files-ap on the S3 Files one.
type policyClass struct{ name, mode, fs string }

// The chart installed with helm under each controller policy docs/iam.md ships, the
// emulator enforcing it: AWS's managed policy with default values; docs/iam/controller.json
// alone with controller.descriptiveTags (its access points carry the descriptive tags)
// and an S3 Files class; the managed policy with docs/iam/s3files.json beside it. Each
// row installs the chart (this checkout's, release efs-csi-driver in kube-system, its
// StorageClasses through storageClasses), runs the controller Deployment read back from
// the API server (one replica: the driver and csi-provisioner with its arguments, as its
// service account), and checks that a claim of each class is bound, that deleting them
// removes their access points, and that nothing was denied: no deniedAction in the
// emulator's log, no Unauthenticated/AccessDenied in the driver's or csi-provisioner's.
// The last row is controller.json without its AllowTagNewAccessPoints statement: the
// claim must stay Pending, with csi-provisioner's ProvisioningFailed event naming
// elasticfilesystem:TagResource (so the rows above can fail when a policy misses one).
func TestChartUnderEachShippedControllerPolicy(t *testing.T) {
	s := env(t)
	noTagging := policyWithout(t, s, controllerPolicy, "AllowTagNewAccessPoints")
	efsAP := func(name string) policyClass { return policyClass{name, "efs-ap", fileSystemID} }
	s3AP := func(name string) policyClass { return policyClass{name, "s3files-ap", s3FileSystem} }
	for _, row := range []struct {
		name     string
		policies []string
		values   string // chart values besides the classes
		classes  []policyClass
		// denied is the action the policy lacks: the claims must stay Pending, their
		// event naming it.
		denied string
		// tags are tag keys every EFS access point must carry.
		tags []string
	}{
		{name: "managed", policies: []string{s.policy(managedPolicy)},
			classes: []policyClass{efsAP("policy-managed-ap")}, tags: []string{"efs.csi.aws.com/cluster"}},
		{name: "controller.json", policies: []string{s.policy(controllerPolicy)},
			values:  "controller:\n  descriptiveTags: true\n",
			classes: []policyClass{efsAP("policy-controller-ap"), s3AP("policy-controller-s3files")},
			tags:    []string{"efs.csi.aws.com/cluster", "efs.csi.aws.com/pvc-name", "efs.csi.aws.com/volume-name"}},
		{name: "managed+s3files.json", policies: []string{s.policy(managedPolicy), s.policy(s3FilesPolicy)},
			classes: []policyClass{efsAP("policy-s3files-ap"), s3AP("policy-s3files-s3files")}},
		{name: "controller.json-without-TagResource", policies: []string{"--iam-policy=" + noTagging},
			values:  "controller:\n  descriptiveTags: true\n",
			classes: []policyClass{efsAP("policy-notag-ap")}, denied: "elasticfilesystem:TagResource"},
	} {
		t.Run(row.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			start := time.Now()
			values := row.values + "storageClasses:\n"
			for _, c := range row.classes {
				values += fmt.Sprintf("  - name: %s\n    parameters: {provisioningMode: %s, fileSystemId: %s, directoryPerms: \"700\"}\n", c.name, c.mode, c.fs)
			}
			valuesFile := filepath.Join(t.TempDir(), "values.yaml")
			writeFile(t, valuesFile, values)
			logs := markLogs(s, "efs-emulator", "efs-csi-driver-0", "csi-provisioner-0")
			h := installChart(ctx, t, s, valuesFile)
			st := newEmulatorStackUnder(ctx, t, s, row.policies, "--s3files-file-system="+s3FileSystem)
			startChartController(ctx, t, s, st)
			efsc := efsClient(st.endpoint)
			s3AccessPoints := s3FilesAccessPoints(ctx, st.endpoint)
			ns := newNamespace(ctx, t, s, "e2e-policy-"+strings.NewReplacer(".", "-", "+", "-").Replace(strings.ToLower(row.name)))

			if row.denied != "" {
				for _, c := range row.classes {
					msg := claimRefused(ctx, t, ns, c.name, c.name, row.denied)
					t.Logf("claim %s refused as expected: %s", c.name, msg)
				}
				if aps, err := accessPointsOf(ctx, efsc, fileSystemID); err != nil || len(aps) != 0 {
					t.Errorf("%d access points after refused creates (%v), want none", len(aps), err)
				}
				if !strings.Contains(logs.since(t, "efs-emulator"), "deniedAction="+row.denied) {
					t.Errorf("the emulator logged no denial of %s", row.denied)
				}
				if d := logs.since(t, "efs-csi-driver-0"); !strings.Contains(d, row.denied) {
					t.Errorf("the driver's log does not name %s", row.denied)
				}
				ns.deleteAll(ctx, t)
				h.uninstall(ctx, t)
				return
			}

			for _, c := range row.classes {
				pv := ns.boundClaim(ctx, t, c.name, c.name, nil)
				h := pv.Spec.CSI.VolumeHandle
				if !strings.Contains(h, c.fs+"::fsap-") || strings.HasPrefix(h, "s3files:") != (c.mode == "s3files-ap") {
					t.Errorf("claim of %s: volume handle %s is not a %s volume of %s", c.name, h, c.mode, c.fs)
				}
			}
			aps, err := accessPointsOf(ctx, efsc, fileSystemID)
			if err != nil {
				t.Fatal(err)
			}
			wantEFS, wantS3 := 0, 0
			for _, c := range row.classes {
				if c.mode == "efs-ap" {
					wantEFS++
				} else {
					wantS3++
				}
			}
			if len(aps) != wantEFS {
				t.Errorf("%d EFS access points, want %d", len(aps), wantEFS)
			}
			for _, ap := range aps {
				tags := tagMap(ap.Tags)
				for _, k := range row.tags {
					if _, ok := tags[k]; !ok {
						t.Errorf("access point %s has no tag %s (tags %v)", aws.ToString(ap.AccessPointId), k, tags)
					}
				}
			}
			// The test's own S3 Files reads are under the row's policy too (the
			// managed one names no s3files: action).
			if wantS3 > 0 {
				if n, err := s3AccessPoints(); err != nil || n != wantS3 {
					t.Errorf("%d S3 Files access points (%v), want %d", n, err, wantS3)
				}
			}
			ns.deleteAll(ctx, t)
			waitNoLeaks(ctx, t, s, efsc)
			if wantS3 > 0 {
				waitFor(ctx, t, "no S3 Files access point", func() (bool, error) {
					n, err := s3AccessPoints()
					return n == 0, err
				})
			}
			st.checkAlive()
			for _, name := range []string{"efs-emulator", "efs-csi-driver-0", "csi-provisioner-0"} {
				if lines := denials(logs.since(t, name)); len(lines) > 0 {
					t.Errorf("%s logged %d denials under %s, the first: %s", name, len(lines), row.name, lines[0])
				}
			}
			h.uninstall(ctx, t)
			t.Logf("%s: %d claims bound and deleted in %v", row.name, len(row.classes), time.Since(start).Round(time.Millisecond))
		})
	}
}

// policyWithout writes the repository's policy file without the statement sid to a file
// of the test and returns its path.
func policyWithout(t *testing.T, s *suite, file, sid string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.repo, file))
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	stmts, _ := p["Statement"].([]any)
	var kept []any
	for _, st := range stmts {
		if m, _ := st.(map[string]any); m["Sid"] != sid {
			kept = append(kept, st)
		}
	}
	if len(kept) != len(stmts)-1 {
		t.Fatalf("%s has no statement %s", file, sid)
	}
	p["Statement"] = kept
	out, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "without-"+sid+".json")
	writeFile(t, path, string(out))
	return path
}

// chartInstall is a release of this checkout's chart installed by installChart.
type chartInstall struct {
	h       *helm
	release string
	removed bool
}

// installChart installs this checkout's chart as release efs-csi-driver in the release
// namespace with the values file (after removing the objects earlier scenarios applied
// outside any release: helm refuses to own them) and uninstalls it when the test ends
// unless the test did. Register it before the emulator stack: cleanups run in reverse,
// so the controller stops before its objects go.
func installChart(ctx context.Context, t *testing.T, s *suite, values string, args ...string) *chartInstall {
	t.Helper()
	h := newHelm(t, s)
	chart := filepath.Join(s.repo, "charts", "efs-csi-driver")
	c := &chartInstall{h: h, release: chartRelease}
	removeUnreleased(ctx, t, newApplier(t, s), h, values, chart)
	t.Cleanup(func() {
		if !c.removed {
			c.uninstall(context.Background(), t)
		}
	})
	if len(args) == 0 {
		args = []string{"install", chartRelease, chart, "--namespace", releaseNamespace, "-f", values}
	}
	if out, err := h.run(ctx, args...); err != nil {
		t.Fatalf("helm install of this chart: %v\n%s", err, out)
	}
	return c
}

// uninstall runs `helm uninstall` of the release (the doc's section 6 runs its own).
func (c *chartInstall) uninstall(ctx context.Context, t *testing.T) {
	t.Helper()
	c.removed = true
	if out, err := c.h.run(ctx, "uninstall", c.release, "--namespace", releaseNamespace); err != nil {
		t.Errorf("helm uninstall: %v\n%s", err, out)
	}
}

// startChartController reads the installed controller Deployment back from the API
// server and starts one replica of it on the stack, as its service account.
func startChartController(ctx context.Context, t *testing.T, s *suite, st *controllerStack) *replica {
	t.Helper()
	dep := &unstructured.Unstructured{}
	dep.SetAPIVersion("apps/v1")
	dep.SetKind("Deployment")
	dep.SetNamespace(releaseNamespace)
	dep.SetName("efs-csi-controller")
	live, err := newApplier(t, s).get(ctx, dep)
	if err != nil {
		t.Fatalf("the installed controller Deployment: %v", err)
	}
	st.deployment = live
	st.authenticate(ctx)
	spec := podSpec(t, s, st, live)
	spec.podHostname = false // one replica: its leader identity needs no host name of its own
	return st.addReplica(ctx, spec)
}

// claimRefused creates claim name of class and waits for csi-provisioner's
// ProvisioningFailed event on it naming action; the claim must still be Pending then.
// It returns the event's message.
func claimRefused(ctx context.Context, t *testing.T, ns *namespace, name, class, action string) string {
	t.Helper()
	ns.class = class
	ns.create(ctx, t, 1, func(int) string { return name })
	var msg string
	waitFor(ctx, t, "a ProvisioningFailed event of claim "+name+" naming "+action, func() (bool, error) {
		evs, err := ns.s.cluster.Client.CoreV1().Events(ns.name).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=PersistentVolumeClaim,involvedObject.name=" + name})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == "ProvisioningFailed" && strings.Contains(e.Message, action) {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if !strings.Contains(msg, "Unauthenticated") || !strings.Contains(msg, "Access Denied") {
		t.Errorf("the event names %s but not as a denial (Unauthenticated, Access Denied): %s", action, msg)
	}
	pvc, err := ns.pvcs().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" {
		t.Errorf("claim %s is %s (volume %q) under a policy without %s, want Pending", name, pvc.Status.Phase, pvc.Spec.VolumeName, action)
	}
	return msg
}

// logMark holds the sizes of the suite's process logs (s.dir/NAME.log, appended by every
// test) when a test began, so that it reads only what its own processes wrote.
type logMark struct {
	dir  string
	size map[string]int64
}

func markLogs(s *suite, names ...string) logMark {
	m := logMark{dir: s.dir, size: map[string]int64{}}
	for _, n := range names {
		if fi, err := os.Stat(filepath.Join(s.dir, n+".log")); err == nil {
			m.size[n] = fi.Size()
		}
	}
	return m
}

// since is what was appended to log name after the mark.
func (m logMark) since(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b[min(m.size[name], int64(len(b))):])
}

// denials are the lines of a log that record a refused AWS call: the emulator's
// deniedAction, the driver's and csi-provisioner's Unauthenticated or AccessDenied.
func denials(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		low := strings.ToLower(l)
		for _, w := range []string{"deniedaction", "unauthenticated", "accessdenied", "access denied"} {
			if strings.Contains(low, w) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}
