package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// helm is the helm binary hack/e2e-components.sh keeps ($EFS_E2E_HELM, else its cache);
// without one the test is skipped (hack/check-manifests.sh fetches it).
func helm(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("EFS_E2E_HELM"); h != "" {
		return h
	}
	cache := os.Getenv("EFS_E2E_CACHE")
	if cache == "" {
		cache = "/var/cache/efs-csi-e2e"
	}
	found, _ := filepath.Glob(filepath.Join(cache, "helm-*", "helm"))
	if len(found) == 0 {
		t.Skip("no helm: run hack/e2e-components.sh helm")
	}
	return found[len(found)-1]
}

// nodePlugin returns the efs-plugin container of the DaemonSet and the rules of
// efs-csi-node-role in the chart rendered with values.
func nodePlugin(t *testing.T, values string) (container map[string]any, rules []any) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	write(t, f, values)
	objs, err := RenderChart(helm(t), filepath.Join("..", "..", "..", "charts", "efs-csi-driver"), "kube-system", f)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		switch {
		case o.GetKind() == "DaemonSet":
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range cs {
				if c.(map[string]any)["name"] == "efs-plugin" {
					container = c.(map[string]any)
				}
			}
		case o.GetKind() == "ClusterRole" && o.GetName() == "efs-csi-node-role":
			rules, _, _ = unstructured.NestedSlice(o.Object, "rules")
		}
	}
	if container == nil || rules == nil {
		t.Fatalf("no efs-plugin container or efs-csi-node-role in the rendering")
	}
	return container, rules
}

func env(c map[string]any, name string) (map[string]any, bool) {
	es, _, _ := unstructured.NestedSlice(c, "env")
	for _, e := range es {
		if e := e.(map[string]any); e["name"] == name {
			return e, true
		}
	}
	return nil, false
}

func args(c map[string]any) []string {
	as, _, _ := unstructured.NestedStringSlice(c, "args")
	return as
}

// The node plugin gets what upstream's chart gives it: its memory limit for the S3 Files
// read cache decision, DISABLE_TAINT_WATCHER and no patch on Nodes with
// node.serviceAccount.disableMutation, and both override values as flags.
func TestChartNodePluginAsUpstream(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		c, rules := nodePlugin(t, "{}\n")
		e, ok := env(c, "CSI_NODE_MEMORY_LIMIT")
		ref, _, _ := unstructured.NestedStringMap(e, "valueFrom", "resourceFieldRef")
		if !ok || ref["containerName"] != "efs-plugin" || ref["resource"] != "limits.memory" {
			t.Errorf("CSI_NODE_MEMORY_LIMIT = %v, want the efs-plugin container's limits.memory", e)
		}
		if _, ok := env(c, "DISABLE_TAINT_WATCHER"); ok {
			t.Error("DISABLE_TAINT_WATCHER set by default")
		}
		if got := fmt.Sprint(rules); got != "[map[apiGroups:[] resources:[nodes] verbs:[get patch]]]" {
			t.Errorf("node role rules %s, want get and patch on nodes", got)
		}
	})
	t.Run("disableMutation", func(t *testing.T) {
		c, rules := nodePlugin(t, "node:\n  serviceAccount:\n    disableMutation: true\n")
		if e, ok := env(c, "DISABLE_TAINT_WATCHER"); !ok || e["value"] != "true" {
			t.Errorf("DISABLE_TAINT_WATCHER = %v, want true", e)
		}
		if got := fmt.Sprint(rules); got != "[map[apiGroups:[] resources:[nodes] verbs:[get]]]" {
			t.Errorf("node role rules %s, want get only", got)
		}
	})
	t.Run("overrides", func(t *testing.T) {
		c, _ := nodePlugin(t, "node:\n  efsUtilsConfOverrides: mount:retry_nfs_mount_command_count=5\n"+
			"  s3filesUtilsConfOverrides: proxy:read_bypass_denylist_size=20000\n  s3filesCloudWatchMetricsEnabled: false\n")
		for _, want := range []string{"--efs-utils-conf-overrides=mount:retry_nfs_mount_command_count=5",
			"--s3files-utils-conf-overrides=proxy:read_bypass_denylist_size=20000", "--s3files-cloudwatch-metrics-enabled=false"} {
			if !slices.Contains(args(c), want) {
				t.Errorf("args %v lack %s", args(c), want)
			}
		}
	})
}
