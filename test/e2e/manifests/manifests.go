// Package manifests loads the deployment artifacts the end-to-end test sends to the API
// server: the Helm chart's rendering and the kustomize base, as unstructured objects.
package manifests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// ErrTransformers means a kustomization does more than list resources: reading its files
// would then not give what `kubectl apply -k` applies.
var ErrTransformers = errors.New("kustomization has transformers")

// UpstreamChartSHA256 is the sha256 of upstream's chart 4.4.1 archive
// (aws-efs-csi-driver v3.4.1), as the fixtures' README gives it.
const UpstreamChartSHA256 = "d59ed74c6c90137a2b850ba7f705c92ee6aa9c0af01cd1f6da4162083fda12d0"

// ErrNoUpstreamChart means upstream's chart archive is not on this machine: tests that
// need it skip.
var ErrNoUpstreamChart = errors.New("no upstream chart archive")

// UpstreamChart returns the path of upstream's chart 4.4.1 archive: $EFS_UPSTREAM_CHART,
// else the fixture beside the repository (repoRoot/../shared/fixtures). A file whose
// sha256 is not the release's is an error: a test must not pass against another chart.
func UpstreamChart(repoRoot string) (string, error) {
	p := os.Getenv("EFS_UPSTREAM_CHART")
	if p == "" {
		p = filepath.Join(repoRoot, "..", "shared", "fixtures", "aws-efs-csi-driver-4.4.1.tgz")
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w: %s (set EFS_UPSTREAM_CHART)", ErrNoUpstreamChart, p)
	}
	if err != nil {
		return "", err
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != UpstreamChartSHA256 {
		return "", fmt.Errorf("%s: sha256 %x, want %s (upstream's chart 4.4.1)", p, sum, UpstreamChartSHA256)
	}
	return p, nil
}

// Decode splits a multi-document YAML stream into objects, skipping empty documents
// (Helm leaves them where a template renders nothing).
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("document %d has no kind or apiVersion", len(out)+1)
		}
		out = append(out, u)
	}
}

// RenderChart runs `helm template` on chartDir into namespace with the given values files.
func RenderChart(helm, chartDir, namespace string, valuesFiles ...string) ([]*unstructured.Unstructured, error) {
	args := []string{"template", "efs-csi-driver", chartDir, "--namespace", namespace}
	for _, v := range valuesFiles {
		args = append(args, "-f", v)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(helm, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %w: %s", err, stderr.String())
	}
	return Decode(out)
}

// Kustomization reads the objects of a kustomization directory that only lists resources
// (files, not directories); any transformer gives ErrTransformers.
func Kustomization(dir string) ([]*unstructured.Unstructured, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k map[string]any
	if err := yaml.Unmarshal(raw, &k); err != nil {
		return nil, err
	}
	var resources []string
	for key, v := range k {
		switch key {
		case "apiVersion", "kind":
		case "resources":
			list, ok := v.([]any)
			if !ok {
				return nil, fmt.Errorf("%s: resources is not a list", dir)
			}
			for _, r := range list {
				s, ok := r.(string)
				if !ok {
					return nil, fmt.Errorf("%s: resource %v is not a file name", dir, r)
				}
				resources = append(resources, s)
			}
		default:
			return nil, fmt.Errorf("%s: %w: %q", dir, ErrTransformers, key)
		}
	}
	var out []*unstructured.Unstructured
	for _, r := range resources {
		data, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			return nil, err
		}
		objs, err := Decode(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// Files decodes every object of the given YAML files.
func Files(paths ...string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		objs, err := Decode(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}
