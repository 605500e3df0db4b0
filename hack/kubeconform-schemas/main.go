// Command kubeconform-schemas turns the Kubernetes OpenAPI v2 document (swagger.json, as
// published in the k8s.io/kubernetes module) into the standalone, strict JSON schemas that
// kubeconform reads, one file per kind named <kind>-<group>-<version>.json.
//
// kubeconform's default schemas come from the network, which CI does not reach; this
// builds the same kind of schema offline from the API version the e2e test runs.
//
//	kubeconform-schemas -swagger .../api/openapi-spec/swagger.json -out DIR
//	kubeconform -strict -schema-location 'DIR/{{ .ResourceKind }}{{ .KindSuffix }}.json' ...
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

const refPrefix = "#/definitions/"

type gvk struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

type converter struct {
	defs map[string]map[string]any
}

func main() {
	swagger := flag.String("swagger", "", "path of the OpenAPI v2 document (swagger.json)")
	out := flag.String("out", "", "directory to write the schemas to")
	flag.Parse()
	if *swagger == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	n, err := run(*swagger, *out)
	if err != nil {
		slog.Error("kubeconform-schemas", "err", err)
		os.Exit(1)
	}
	slog.Info("kubeconform-schemas: wrote schemas", "count", n, "dir", *out)
}

func run(swaggerPath, out string) (int, error) {
	raw, err := os.ReadFile(swaggerPath)
	if err != nil {
		return 0, err
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return 0, fmt.Errorf("parse %s: %w", swaggerPath, err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return 0, err
	}
	c := converter{defs: doc.Definitions}
	n := 0
	for name, def := range doc.Definitions {
		for _, k := range kinds(def) {
			schema := c.convert(def, map[string]bool{name: true})
			b, err := json.Marshal(schema)
			if err != nil {
				return n, err
			}
			if err := os.WriteFile(filepath.Join(out, fileName(k)), b, 0o644); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// kinds lists the group/version/kinds a definition is the schema of (none for parts).
func kinds(def map[string]any) []gvk {
	raw, ok := def["x-kubernetes-group-version-kind"]
	if !ok {
		return nil
	}
	b, _ := json.Marshal(raw)
	var out []gvk
	_ = json.Unmarshal(b, &out)
	return out
}

// fileName follows kubeconform's {{ .ResourceKind }}{{ .KindSuffix }}: the lower-case kind,
// then the first label of the group (if any), then the version.
func fileName(k gvk) string {
	suffix := "-" + strings.ToLower(k.Version)
	if k.Group != "" {
		suffix = "-" + strings.ToLower(strings.Split(k.Group, ".")[0]) + suffix
	}
	return strings.ToLower(k.Kind) + suffix + ".json"
}

// convert inlines every $ref (a recursive reference becomes an open schema), closes
// objects to unknown fields (kubeconform -strict), and widens the string-typed
// int-or-string and Quantity to what YAML manifests really hold.
func (c converter) convert(node any, stack map[string]bool) any {
	switch v := node.(type) {
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = c.convert(e, stack)
		}
		return out
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok && strings.HasPrefix(ref, refPrefix) {
			name := strings.TrimPrefix(ref, refPrefix)
			if widened := widen(name, c.defs[name]); widened != nil {
				return widened
			}
			if stack[name] {
				return map[string]any{}
			}
			stack[name] = true
			defer delete(stack, name)
			return c.convert(c.defs[name], stack)
		}
		if v["format"] == "int-or-string" {
			return intOrString()
		}
		out := make(map[string]any, len(v)+1)
		for k, e := range v {
			if k == "x-kubernetes-group-version-kind" {
				continue
			}
			out[k] = c.convert(e, stack)
		}
		if _, hasProps := v["properties"]; hasProps {
			if _, set := v["additionalProperties"]; !set {
				out["additionalProperties"] = false
			}
		}
		return out
	default:
		return v
	}
}

func widen(name string, def map[string]any) any {
	switch {
	case def == nil:
		return nil
	case def["format"] == "int-or-string":
		return intOrString()
	case name == "io.k8s.apimachinery.pkg.api.resource.Quantity":
		return map[string]any{"oneOf": []any{
			map[string]any{"type": "string"},
			map[string]any{"type": "number"},
		}}
	}
	return nil
}

func intOrString() map[string]any {
	return map[string]any{"oneOf": []any{
		map[string]any{"type": "string"},
		map[string]any{"type": "integer"},
	}}
}
