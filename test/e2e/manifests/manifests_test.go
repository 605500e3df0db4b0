package manifests

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestDecodeSkipsEmptyDocumentsAndKeepsOrder(t *testing.T) {
	objs, err := Decode([]byte("---\n# only a comment\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n---\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: b\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].GetName() != "a" || objs[1].GetName() != "b" {
		t.Fatalf("got %d objects %v, want a then b", len(objs), objs)
	}
}

func TestDecodeRejectsDocumentWithoutKind(t *testing.T) {
	if _, err := Decode([]byte("metadata:\n  name: a\n")); err == nil {
		t.Fatal("a document without kind/apiVersion was accepted")
	}
}

func TestKustomization(t *testing.T) {
	const sa = "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n"
	tests := []struct {
		name          string
		kustomization string
		wantObjects   int
		wantErr       error
	}{
		{"resources only are read", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- sa.yaml\n", 1, nil},
		// A namespace transformer would change what kubectl applies: the test must not
		// silently apply something else.
		{"a transformer is refused", "resources:\n- sa.yaml\nnamespace: other\n", 0, ErrTransformers},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, "kustomization.yaml"), tc.kustomization)
			write(t, filepath.Join(dir, "sa.yaml"), sa)
			objs, err := Kustomization(dir)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if len(objs) != tc.wantObjects {
				t.Fatalf("got %d objects, want %d", len(objs), tc.wantObjects)
			}
		})
	}
}

// The committed kustomize base is what the e2e test applies: it must stay loadable.
func TestRepositoryBaseLoads(t *testing.T) {
	objs, err := Kustomization(filepath.Join("..", "..", "..", "deploy", "kubernetes", "base"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	for _, k := range []string{"CSIDriver", "Deployment", "DaemonSet", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "PodDisruptionBudget"} {
		if kinds[k] == 0 {
			t.Errorf("deploy/kubernetes/base has no %s (kinds: %v)", k, kinds)
		}
	}
}

// The driver's record lives in Leases of the release namespace: the controller's
// service account gets them there by a Role (namespaced) it shares with leader election,
// and nothing lets it write ConfigMaps (only get, for fileSystemIdConfigRef).
func TestRepositoryBaseGrantsTheRecordInItsNamespaceOnly(t *testing.T) {
	objs, err := Kustomization(filepath.Join("..", "..", "..", "deploy", "kubernetes", "base"))
	if err != nil {
		t.Fatal(err)
	}
	var role, binding bool
	for _, o := range objs {
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		switch {
		case o.GetKind() == "Role" && o.GetName() == "efs-csi-external-provisioner-leases":
			role = true
			if o.GetNamespace() != "kube-system" || len(rules) != 1 {
				t.Fatalf("Role %s/%s rules %v", o.GetNamespace(), o.GetName(), rules)
			}
			r := rules[0].(map[string]any)
			if fmt.Sprint(r["apiGroups"], r["resources"]) != "[coordination.k8s.io] [leases]" {
				t.Errorf("record rule %v", r)
			}
		case o.GetKind() == "RoleBinding" && o.GetName() == "efs-csi-external-provisioner-leases":
			binding = true
			ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			if o.GetNamespace() != "kube-system" || ref != "efs-csi-external-provisioner-leases" || len(subjects) != 1 ||
				subjects[0].(map[string]any)["name"] != "efs-csi-controller-sa" {
				t.Errorf("RoleBinding %s/%s: role %q, subjects %v", o.GetNamespace(), o.GetName(), ref, subjects)
			}
		}
		for _, r := range rules {
			r := r.(map[string]any)
			if strings.Contains(fmt.Sprint(r["resources"]), "configmaps") && fmt.Sprint(r["verbs"]) != "[get]" {
				t.Errorf("%s %s grants %v on configmaps", o.GetKind(), o.GetName(), r["verbs"])
			}
		}
	}
	if !role || !binding {
		t.Errorf("record Role %v, RoleBinding %v", role, binding)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
