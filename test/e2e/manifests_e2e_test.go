//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/efs-csi/efs-csi-driver/test/e2e/manifests"
)

const releaseNamespace = "kube-system"

// applier applies unstructured objects with server-side apply.
type applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func newApplier(t *testing.T, s *suite) *applier {
	t.Helper()
	dyn, err := dynamic.NewForConfig(s.cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	disc := memory.NewMemCacheClient(s.cluster.Client.Discovery())
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(disc)}
}

// apply sends obj with server-side apply; dryRun asks the API server to run admission,
// validation and defaulting without storing anything.
func (a *applier) apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) error {
	ri, err := a.resource(obj)
	if err != nil {
		return err
	}
	opts := metav1.ApplyOptions{FieldManager: "efs-csi-e2e", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Apply(ctx, obj.GetName(), obj, opts)
	return err
}

// get reads the stored object of obj's kind, namespace and name.
func (a *applier) get(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ri, err := a.resource(obj)
	if err != nil {
		return nil, err
	}
	return ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
}

// resource is the dynamic client of obj's kind, in obj's namespace (default when unset)
// if the kind is namespaced.
func (a *applier) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gvk, err)
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return a.dyn.Resource(m.Resource), nil
	}
	ns := obj.GetNamespace()
	if ns == "" {
		ns = "default"
	}
	return a.dyn.Resource(m.Resource).Namespace(ns), nil
}

// It runs first (its file sorts before the scenarios'): a dry run of a
// StorageClass is refused once a scenario has created one of the same name
// with other parameters (they are immutable).
//
// Every object the project ships is accepted by a real API server of the supported
// version: the chart with default values and with every option on, the kustomize base,
// and the examples. kubeconform (hack/check-manifests.sh) checks schemas; this also runs
// admission (privileged pods, priority classes, RBAC escalation rules) and defaulting.
func TestEveryShippedManifestIsAcceptedByTheAPIServer(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	chart := filepath.Join(s.repo, "charts", "efs-csi-driver")
	deploy := filepath.Join(s.repo, "deploy", "kubernetes")
	sources := []struct {
		name string
		load func() ([]*unstructured.Unstructured, error)
	}{
		{"chart-defaults", func() ([]*unstructured.Unstructured, error) {
			return manifests.RenderChart(s.comps.Helm, chart, releaseNamespace)
		}},
		{"chart-full-values", func() ([]*unstructured.Unstructured, error) {
			return manifests.RenderChart(s.comps.Helm, chart, releaseNamespace, filepath.Join(chart, "ci", "full-values.yaml"))
		}},
		{"chart-upstream-values", func() ([]*unstructured.Unstructured, error) {
			return manifests.RenderChart(s.comps.Helm, chart, releaseNamespace, filepath.Join(chart, "ci", "upstream-values.yaml"))
		}},
		{"kustomize-base", func() ([]*unstructured.Unstructured, error) {
			return manifests.Kustomization(filepath.Join(deploy, "base"))
		}},
		{"examples", func() ([]*unstructured.Unstructured, error) {
			paths, err := filepath.Glob(filepath.Join(deploy, "examples", "*.yaml"))
			if err != nil {
				return nil, err
			}
			return manifests.Files(paths...)
		}},
	}
	a := newApplier(t, s)
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			objs, err := src.load()
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) == 0 {
				t.Fatal("no objects")
			}
			for _, obj := range objs {
				if err := a.apply(ctx, obj, true); err != nil {
					t.Errorf("%s %s/%s rejected: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
				}
			}
			t.Logf("%d objects accepted (server-side dry run)", len(objs))
		})
	}
}
