package manifests

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Upstream's chart 4.4.1 (aws-efs-csi-driver v3.4.1): the reference for every values key.
// $EFS_UPSTREAM_CHART, else the fixture beside the repository; the tests skip without it.
func upstreamChart(t *testing.T) string {
	t.Helper()
	p, err := UpstreamChart(filepath.Join("..", "..", ".."))
	if errors.Is(err, ErrNoUpstreamChart) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var chartDir = filepath.Join("..", "..", "..", "charts", "efs-csi-driver")

// upstreamValues reads values.yaml out of upstream's chart archive.
func upstreamValues(t *testing.T, tgz string) map[string]any {
	t.Helper()
	f, err := os.Open(tgz)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no values.yaml in %s: %v", tgz, err)
		}
		if h.Name == "aws-efs-csi-driver/values.yaml" {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			var v map[string]any
			if err := yaml.Unmarshal(data, &v); err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
}

// withoutImages drops the image keys (image, sidecars.*.image): upstream's images cannot
// run with this chart (TestChartRefusesUpstreamImage).
func withoutImages(v map[string]any) map[string]any {
	v = deepCopy(v).(map[string]any)
	delete(v, "image")
	if s, ok := v["sidecars"].(map[string]any); ok {
		for _, sc := range s {
			delete(sc.(map[string]any), "image")
		}
	}
	return v
}

func deepCopy(v any) any {
	data, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(data, &out)
	return out
}

// render renders chart with values; the error carries helm's message.
func render(t *testing.T, chart string, values map[string]any) ([]*unstructured.Unstructured, error) {
	t.Helper()
	data, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(t.TempDir(), "values-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return RenderChart(helm(t), chart, "kube-system", f.Name())
}

// strictDecode decodes every object of a known kind into its Go type, refusing unknown
// fields: what the API server would silently drop (or refuse) fails here.
func strictDecode(objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		var typed any
		switch o.GetKind() {
		case "Deployment":
			typed = &appsv1.Deployment{}
		case "DaemonSet":
			typed = &appsv1.DaemonSet{}
		case "Service":
			typed = &corev1.Service{}
		case "ServiceAccount":
			typed = &corev1.ServiceAccount{}
		case "ConfigMap":
			typed = &corev1.ConfigMap{}
		case "ClusterRole":
			typed = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding":
			typed = &rbacv1.ClusterRoleBinding{}
		case "Role":
			typed = &rbacv1.Role{}
		case "RoleBinding":
			typed = &rbacv1.RoleBinding{}
		case "CSIDriver":
			typed = &storagev1.CSIDriver{}
		case "StorageClass":
			typed = &storagev1.StorageClass{}
		case "PodDisruptionBudget":
			typed = &policyv1.PodDisruptionBudget{}
		default:
			continue // ServiceMonitor, PrometheusRule: no Go types here
		}
		data, err := json.Marshal(o.Object)
		if err != nil {
			return err
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(typed); err != nil {
			return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// leaf is one values key (dotted path) and the value it is changed to.
type leaf struct {
	path  string
	value any
}

// samples: what an empty or list value is set to, by key name (any depth).
var samples = map[string]any{
	"hostAliases":               map[string]any{"fs-0123456789abcdef0": map[string]any{"ip": "10.0.0.10", "region": "us-east-1"}},
	"imagePullSecrets":          []any{"regcred"},
	"additionalArgs":            []any{"--retry-interval-max=5m"},
	"env":                       []any{map[string]any{"name": "EXAMPLE", "value": "1"}},
	"volumes":                   []any{map[string]any{"name": "extra", "emptyDir": map[string]any{}}},
	"volumeMounts":              []any{map[string]any{"name": "extra", "mountPath": "/extra"}},
	"topologySpreadConstraints": []any{map[string]any{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}},
	"tolerations":               []any{map[string]any{"key": "example.com/dedicated", "operator": "Exists"}},
	"storageClasses":            []any{map[string]any{"name": "efs-sc", "parameters": map[string]any{"provisioningMode": "efs-ap", "fileSystemId": "fs-0123456789abcdef0", "directoryPerms": "700"}}},
	"resources":                 map[string]any{"requests": map[string]any{"cpu": "20m"}},
	"dnsConfig":                 map[string]any{"nameservers": []any{"169.254.169.253"}},
	"rollingUpdate":             map[string]any{"maxUnavailable": 2},
	"readinessProbe":            map[string]any{"httpGet": map[string]any{"path": "/healthz", "port": "healthz"}, "periodSeconds": 7},
	"startupProbe":              map[string]any{"httpGet": map[string]any{"path": "/healthz", "port": "healthz"}, "failureThreshold": 31},
	"emptyDir":                  map[string]any{"medium": "Memory"},
	"affinity":                  map[string]any{"podAntiAffinity": map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{map[string]any{"weight": 1, "podAffinityTerm": map[string]any{"topologyKey": "kubernetes.io/hostname"}}}}},
}

// leaves lists every key of v with a changed value: booleans flipped, numbers and
// strings changed, empty maps and lists filled from samples (else a generic entry).
func leaves(v map[string]any, prefix string) []leaf {
	var out []leaf
	for k, x := range v {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		if s, ok := samples[k]; ok {
			if m, isMap := x.(map[string]any); !isMap || len(m) == 0 || k == "affinity" || k == "resources" {
				out = append(out, leaf{p, s})
				continue
			}
		}
		switch x := x.(type) {
		case map[string]any:
			if len(x) == 0 {
				out = append(out, leaf{p, map[string]any{"example.com/key": "value"}})
			} else {
				out = append(out, leaves(x, p)...)
			}
		case []any:
			if len(x) > 0 {
				if _, ok := x[0].(string); ok {
					out = append(out, leaf{p, append(slices.Clone(x), "example")})
					continue
				}
			}
			out = append(out, leaf{p, []any{map[string]any{"key": "example.com/key", "operator": "Exists"}}})
		case bool:
			out = append(out, leaf{p, !x})
		case float64:
			out = append(out, leaf{p, x + 1})
		case string:
			switch {
			case strings.HasSuffix(x, "s") && len(x) > 1 && strings.Trim(x[:len(x)-1], "0123456789") == "":
				out = append(out, leaf{p, "17s"})
			case x != "" && strings.Trim(x, "0123456789") == "":
				out = append(out, leaf{p, "21050"})
			case strings.HasPrefix(x, "/"):
				out = append(out, leaf{p, x + "-other"})
			default:
				out = append(out, leaf{p, x + "x"})
			}
		case nil:
			out = append(out, leaf{p, "x"})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

func set(v map[string]any, path string, value any) {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := v[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			v[p] = next
		}
		v = next
	}
	v[parts[len(parts)-1]] = value
}

// prerequisites: values a key acts under, in upstream's chart and in this one; set on both
// sides of the comparison.
var prerequisites = map[string]map[string]any{
	"controller.serviceMonitor":              {"controller.enableMetrics": true},
	"controller.enablePrometheusAnnotations": {"controller.enableMetrics": true},
	"controller.podDisruptionBudget":         {"controller.podDisruptionBudget.enabled": true},
}

// Keys upstream's template reads (hasKey) though its values.yaml does not declare them.
var undeclared = []leaf{
	{"node.maxInflightMountCalls", 7},
	{"node.maxInflightMountCallsOptIn", true},
	{"node.volumeAttachLimit", 5},
	{"node.volumeAttachLimitOptIn", true},
	{"node.forceUnmountAfterTimeout", true},
	{"node.unmountTimeout", "45s"},
	{"node.efsCloudWatchLogEnabled", true},
	{"node.s3filesCloudWatchLogEnabled", false},
	{"node.s3filesCloudWatchMetricsEnabled", false},
}

// TestChartTakesEveryUpstreamKey walks every key of upstream's values.yaml (and the keys
// its templates read undeclared), changes it, and renders both charts: wherever the change
// changes upstream's rendering, it must change this chart's too or fail rendering with a
// message naming the key. A key this chart accepts and ignores fails the test.
func TestChartTakesEveryUpstreamKey(t *testing.T) {
	up := upstreamChart(t)
	uv := upstreamValues(t, up)
	base := withoutImages(uv)
	keys := append(leaves(base, ""), undeclared...)

	type result struct {
		objs []*unstructured.Unstructured
		err  error
	}
	var mu sync.Mutex
	cache := map[string]result{}
	renderCached := func(chart string, values map[string]any) result {
		data, _ := json.Marshal(values)
		id := chart + "\x00" + string(data)
		mu.Lock()
		r, ok := cache[id]
		mu.Unlock()
		if !ok {
			objs, err := render(t, chart, values)
			r = result{objs, err}
			mu.Lock()
			cache[id] = r
			mu.Unlock()
		}
		return r
	}

	for _, k := range keys {
		t.Run(k.path, func(t *testing.T) {
			t.Parallel()
			with := func(v map[string]any) map[string]any {
				v = deepCopy(v).(map[string]any)
				for prefix, pre := range prerequisites {
					if k.path == prefix || strings.HasPrefix(k.path, prefix+".") {
						for p, x := range pre {
							if p != k.path {
								set(v, p, x)
							}
						}
					}
				}
				return v
			}
			upBase, upChanged := with(uv), with(uv)
			set(upChanged, k.path, k.value)
			ub, uc := renderCached(up, upBase), renderCached(up, upChanged)
			if ub.err != nil || uc.err != nil {
				t.Skipf("upstream's chart does not render: %v %v", ub.err, uc.err)
			}
			if reflect.DeepEqual(ub.objs, uc.objs) {
				t.Skipf("no effect in upstream's chart either")
			}
			ourBase, ourChanged := with(base), with(base)
			set(ourChanged, k.path, k.value)
			ob := renderCached(chartDir, ourBase)
			if ob.err != nil {
				t.Fatalf("upstream's values (without image keys) do not render: %v", ob.err)
			}
			oc := renderCached(chartDir, ourChanged)
			if oc.err != nil {
				if !strings.Contains(oc.err.Error(), k.path) && !strings.Contains(oc.err.Error(), k.path[strings.LastIndex(k.path, ".")+1:]) {
					t.Fatalf("%s=%v fails rendering without naming the key: %v", k.path, k.value, oc.err)
				}
				return
			}
			if err := strictDecode(oc.objs); err != nil {
				t.Fatalf("%s=%v: %v", k.path, k.value, err)
			}
			if reflect.DeepEqual(ob.objs, oc.objs) {
				t.Fatalf("%s=%v changes upstream's rendering but is silently ignored here", k.path, k.value)
			}
		})
	}
}

// TestChartRendersUpstreamValues: upstream's values.yaml without its image keys, and
// realistic user files written for upstream's chart, render and decode strictly.
func TestChartRendersUpstreamValues(t *testing.T) {
	up := upstreamChart(t)
	files := map[string]map[string]any{"upstream values.yaml": withoutImages(upstreamValues(t, up))}
	for name, doc := range userFiles {
		var v map[string]any
		if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatal(err)
		}
		files[name] = v
	}
	for name, v := range files {
		t.Run(name, func(t *testing.T) {
			objs, err := render(t, chartDir, v)
			if err != nil {
				t.Fatal(err)
			}
			if err := strictDecode(objs); err != nil {
				t.Fatal(err)
			}
			if _, err := render(t, up, v); err != nil {
				t.Fatalf("not a values file of upstream's chart: %v", err)
			}
		})
	}
}

// userFiles are values files as users of upstream's chart write them (its README, EKS
// add-on docs, cross-VPC and monitoring setups).
var userFiles = map[string]string{
	"irsa and storage class": `
controller:
  serviceAccount:
    annotations:
      eks.amazonaws.com/role-arn: arn:aws:iam::111122223333:role/efs-csi-role
node:
  serviceAccount:
    annotations:
      eks.amazonaws.com/role-arn: arn:aws:iam::111122223333:role/efs-csi-role
storageClasses:
  - name: efs-sc
    annotations:
      storageclass.kubernetes.io/is-default-class: "true"
    mountOptions: [tls]
    parameters:
      provisioningMode: efs-ap
      fileSystemId: fs-1122aabb
      directoryPerms: "700"
      gidRangeStart: "1000"
      gidRangeEnd: "2000"
      basePath: /dynamic_provisioning
      subPathPattern: ${.PVC.namespace}/${.PVC.name}
      ensureUniqueDirectory: true
    reclaimPolicy: Delete
    volumeBindingMode: Immediate
`,
	"cross vpc and fips and tuned node": `
useFIPS: true
portRangeUpperBound: "21100"
node:
  logLevel: 5
  hostAliases:
    fs-01234567:
      ip: 10.10.2.2
      region: us-east-2
  dnsPolicy: None
  dnsConfig:
    nameservers: [169.254.169.253]
  maxInflightMountCallsOptIn: true
  maxInflightMountCalls: 20
  volumeAttachLimitOptIn: true
  volumeAttachLimit: 64
  forceUnmountAfterTimeout: true
  unmountTimeout: 60s
  efsCloudWatchLogEnabled: true
  rollingUpdate:
    maxUnavailable: 20%
  tolerations:
    - operator: Exists
  resources:
    limits:
      memory: 512Mi
`,
	// Keys upstream's chart never had, copied from other drivers' charts (and one
	// misspelt): upstream ignores them, so this chart installs the file too and names them
	// (TestChartNamesValuesKeysItDoesNotKnow).
	"keys upstream never had": `
controller:
  extraArgs: [--v=5]
  replicaCout: 3
  podSecurityContext:
    fsGroup: 1000
  serviceAccount:
    annotations:
      eks.amazonaws.com/role-arn: arn:aws:iam::111122223333:role/efs-csi-role
node:
  extraArgs: [--vol-metrics-opt-in]
  toleratons:
    - operator: Exists
global:
  imageRegistry: registry.example.com
`,
	"monitoring and hardened controller": `
controller:
  replicaCount: 3
  logLevel: 4
  enableMetrics: true
  serviceMonitor:
    enabled: true
  topologySpreadConstraints:
    - maxSkew: 1
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: ScheduleAnyway
  podDisruptionBudget:
    enabled: true
    minAvailable: 1
  rollingUpdate:
    maxUnavailable: 1
    maxSurge: 0
  securityContext:
    runAsNonRoot: true
    runAsUser: 1000
    runAsGroup: 1000
    fsGroup: 1000
  containerSecurityContext:
    privileged: false
    readOnlyRootFilesystem: true
  readinessProbe:
    httpGet:
      path: /healthz
      port: healthz
    periodSeconds: 10
  socketDirVolume:
    emptyDir:
      medium: Memory
sidecars:
  csiProvisioner:
    securityContext:
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      runAsNonRoot: true
`,
}

// TestChartRefusesUpstreamImage: upstream's image keys, carried over, and image.* keys this
// chart does not take (which it would ignore) fail rendering with a message naming them
// and the keys to set instead (upstream's binary does not take this chart's flags).
func TestChartRefusesUpstreamImage(t *testing.T) {
	up := upstreamChart(t)
	uv := upstreamValues(t, up)
	const instead = `Set instead: image.repository: ghcr.io/efs-csi/efs-csi-driver (or your mirror of it, registry included) and image.tag: "" (the chart's appVersion`
	for _, c := range []struct{ key, value string }{
		{"image.repository", uv["image"].(map[string]any)["repository"].(string)},
		{"image.repository", "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efs-csi-driver"},
		{"image.tag", uv["image"].(map[string]any)["tag"].(string)},
		{"image.registry", "public.ecr.aws"},
		{"image.digest", "sha256:0123"},
	} {
		v := map[string]any{}
		set(v, c.key, c.value)
		_, err := render(t, chartDir, v)
		if err == nil || !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), instead) {
			t.Errorf("%s=%s: want a rendering error naming %s and the keys to set, got %v", c.key, c.value, c.key, err)
		}
	}
	// Upstream's whole values.yaml, image keys included: both keys named at once.
	_, err := render(t, chartDir, uv)
	for _, want := range []string{"image.repository", "image.tag", instead} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("upstream's values.yaml: want an error naming %s, got %v", want, err)
		}
	}
	// This chart's image keys, a mirror's included, render.
	if _, err := render(t, chartDir, map[string]any{"image": map[string]any{"repository": "registry.example.com/efs-csi-driver", "tag": "0.1.0", "pullPolicy": "Always"}}); err != nil {
		t.Errorf("a mirror of this chart's image: %v", err)
	}
}

func objByKind(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return o
		}
	}
	t.Fatalf("no %s %s in the rendering", kind, name)
	return nil
}

func containerOf(t *testing.T, o *unstructured.Unstructured, name string) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		if c.(map[string]any)["name"] == name {
			return c.(map[string]any)
		}
	}
	t.Fatalf("no container %s in %s", name, o.GetName())
	return nil
}

// TestChartUpstreamMeanings: the keys whose meaning differed (issue 23, item 5) and the
// metrics objects (item 4) as upstream's chart renders them.
func TestChartUpstreamMeanings(t *testing.T) {
	mustRender := func(t *testing.T, doc string) []*unstructured.Unstructured {
		t.Helper()
		var v map[string]any
		if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatal(err)
		}
		objs, err := render(t, chartDir, v)
		if err != nil {
			t.Fatal(err)
		}
		if err := strictDecode(objs); err != nil {
			t.Fatal(err)
		}
		return objs
	}
	t.Run("useFIPS", func(t *testing.T) {
		objs := mustRender(t, "useFIPS: true")
		for _, c := range []map[string]any{
			containerOf(t, objByKind(t, objs, "Deployment", ""), "efs-plugin"),
			containerOf(t, objByKind(t, objs, "DaemonSet", ""), "efs-plugin"),
		} {
			if e, ok := env(c, "AWS_USE_FIPS_ENDPOINT"); !ok || e["value"] != "true" {
				t.Errorf("no AWS_USE_FIPS_ENDPOINT=true: %v", c["env"])
			}
		}
	})
	t.Run("replicaCount 0", func(t *testing.T) {
		for _, doc := range []string{"controller: {replicaCount: 0}", "replicaCount: 0"} {
			d := objByKind(t, mustRender(t, doc), "Deployment", "")
			if r, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); r != 0 {
				t.Errorf("%s: replicas %d", doc, r)
			}
		}
	})
	t.Run("topologySpreadConstraints", func(t *testing.T) {
		d := objByKind(t, mustRender(t, "controller: {topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}]}"), "Deployment", "")
		tsc, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "topologySpreadConstraints")
		if len(tsc) != 1 {
			t.Fatalf("constraints %v", tsc)
		}
		app, _, _ := unstructured.NestedString(tsc[0].(map[string]any), "labelSelector", "matchLabels", "app")
		labels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
		if app == "" || labels["app"] != app {
			t.Errorf("constraint selects app=%q, pods are app=%q", app, labels["app"])
		}
	})
	t.Run("controller.name", func(t *testing.T) {
		objs := mustRender(t, "controller: {name: my-efs-controller, enableMetrics: true, podDisruptionBudget: {enabled: true}}")
		d := objByKind(t, objs, "Deployment", "my-efs-controller")
		sel, _, _ := unstructured.NestedStringMap(d.Object, "spec", "selector", "matchLabels")
		if sel["app"] != "my-efs-controller" {
			t.Errorf("selector %v", sel)
		}
		pdb := objByKind(t, objs, "PodDisruptionBudget", "")
		if s, _, _ := unstructured.NestedStringMap(pdb.Object, "spec", "selector", "matchLabels"); !reflect.DeepEqual(s, sel) {
			t.Errorf("PDB selects %v, pods %v", s, sel)
		}
	})
	t.Run("sidecar log levels", func(t *testing.T) {
		objs := mustRender(t, "controller: {logLevel: 5}\nnode: {logLevel: 4}")
		for kind, want := range map[string]string{"Deployment": "--v=5", "DaemonSet": "--v=4"} {
			o := objByKind(t, objs, kind, "")
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range cs {
				if !slices.Contains(args(c.(map[string]any)), want) {
					t.Errorf("%s container %v: no %s in %v", kind, c.(map[string]any)["name"], want, args(c.(map[string]any)))
				}
			}
		}
	})
	t.Run("hostAliases map form", func(t *testing.T) {
		ds := objByKind(t, mustRender(t, "node: {hostAliases: {fs-01234567: {ip: 10.10.2.2, region: us-east-2}}}"), "DaemonSet", "")
		ha, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "hostAliases")
		want := []any{map[string]any{"ip": "10.10.2.2", "hostnames": []any{"fs-01234567.efs.us-east-2.amazonaws.com"}}}
		if !reflect.DeepEqual(ha, want) {
			t.Errorf("hostAliases %v, want %v", ha, want)
		}
	})
	t.Run("unmount flags", func(t *testing.T) {
		c := containerOf(t, objByKind(t, mustRender(t, "node: {forceUnmountAfterTimeout: true, unmountTimeout: 60s}"), "DaemonSet", ""), "efs-plugin")
		for _, a := range []string{"--force-unmount-after-timeout", "--unmount-timeout=60s"} {
			if !slices.Contains(args(c), a) {
				t.Errorf("no %s in %v", a, args(c))
			}
		}
		c = containerOf(t, objByKind(t, mustRender(t, ""), "DaemonSet", ""), "efs-plugin")
		if slices.Contains(args(c), "--force-unmount-after-timeout") {
			t.Errorf("forced unmounts by default: %v", args(c))
		}
	})
	t.Run("defaults as upstream", func(t *testing.T) {
		objs := mustRender(t, "")
		ds := objByKind(t, objs, "DaemonSet", "")
		terms, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "affinity", "nodeAffinity",
			"requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
		data, _ := json.Marshal(terms)
		if !strings.Contains(string(data), `"hybrid"`) || !strings.Contains(string(data), `"fargate"`) {
			t.Errorf("node affinity does not exclude fargate and hybrid nodes: %s", data)
		}
		d := objByKind(t, objs, "Deployment", "")
		tol, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "tolerations")
		data, _ = json.Marshal(tol)
		if !strings.Contains(string(data), "efs.csi.aws.com/agent-not-ready") {
			t.Errorf("controller does not tolerate agent-not-ready: %s", data)
		}
		for _, o := range []*unstructured.Unstructured{d, ds} {
			labels, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
			for _, l := range []string{"app.kubernetes.io/version", "helm.sh/chart"} {
				if _, ok := labels[l]; ok {
					t.Errorf("%s pod template carries %s: every chart bump restarts its pods", o.GetName(), l)
				}
			}
		}
	})
	t.Run("dashboard and alerts opt-in", func(t *testing.T) {
		for _, o := range mustRender(t, "") {
			if k := o.GetKind(); k == "PrometheusRule" || k == "ConfigMap" && strings.Contains(o.GetName(), "dashboard") {
				t.Errorf("%s %s rendered by default", k, o.GetName())
			}
		}
		_, errD := os.Stat(filepath.Join(chartDir, "files", "grafana-dashboard.json"))
		_, errR := os.Stat(filepath.Join(chartDir, "files", "prometheus-rules.yaml"))
		objs := mustRender(t, "metrics: {grafanaDashboard: {enabled: true}, prometheusRule: {enabled: true}}")
		found := map[string]bool{}
		for _, o := range objs {
			switch o.GetKind() {
			case "ConfigMap":
				data, _, _ := unstructured.NestedStringMap(o.Object, "data")
				for _, d := range data {
					if !json.Valid([]byte(d)) {
						t.Errorf("ConfigMap %s: the dashboard is not JSON", o.GetName())
					}
				}
				found["dashboard"] = o.GetLabels()["grafana_dashboard"] == "1"
			case "PrometheusRule":
				groups, _, _ := unstructured.NestedSlice(o.Object, "spec", "groups")
				found["rules"] = len(groups) > 0
			}
		}
		if (errD == nil) != found["dashboard"] || (errR == nil) != found["rules"] {
			t.Errorf("files: dashboard %v, rules %v; rendered %v", errD == nil, errR == nil, found)
		}
	})
	t.Run("metrics as upstream", func(t *testing.T) {
		objs := mustRender(t, "controller: {enableMetrics: true, serviceMonitor: {enabled: true}}")
		svc := objByKind(t, objs, "Service", "efs-csi-controller")
		ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		if len(ports) != 1 || ports[0].(map[string]any)["port"] != int64(3301) && ports[0].(map[string]any)["port"] != float64(3301) {
			t.Errorf("Service ports %v, want 3301", ports)
		}
		d := objByKind(t, objs, "Deployment", "")
		ann, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "annotations")
		if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != "3301" {
			t.Errorf("pod annotations %v", ann)
		}
		if !slices.Contains(args(containerOf(t, d, "efs-plugin")), "--http-endpoint=0.0.0.0:3301") {
			t.Errorf("driver args %v", args(containerOf(t, d, "efs-plugin")))
		}
		podLabels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
		sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
		for k, v := range sel {
			if podLabels[k] != v {
				t.Errorf("Service selects %s=%s, pods have %q", k, v, podLabels[k])
			}
		}
		sm := objByKind(t, objs, "ServiceMonitor", "")
		match, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		for k, v := range match {
			if svc.GetLabels()[k] != v {
				t.Errorf("ServiceMonitor selects %s=%s, the Service has %q", k, v, svc.GetLabels()[k])
			}
		}
		if len(match) == 0 {
			t.Error("ServiceMonitor selects every Service")
		}
	})
}

// TestChartNamesValuesKeysItDoesNotKnow: a values key neither this chart nor upstream's
// has is not a failed install (upstream's chart, without a schema, ignores it): the
// rendering carries a comment naming it, NOTES.txt names it, and a key one letter away
// from a known one names the known one. Known keys, keys inside free-form maps (tags,
// resources, annotations) and Helm's global (a parent chart's) are not named.
func TestChartNamesValuesKeysItDoesNotKnow(t *testing.T) {
	var values map[string]any
	if err := yaml.Unmarshal([]byte(userFiles["keys upstream never had"]), &values); err != nil {
		t.Fatal(err)
	}
	values["controller"].(map[string]any)["tags"] = map[string]any{"extraArgs": "a tag, not a key"}
	values["controller"].(map[string]any)["leaderElection"] = map[string]any{"leaseDuraton": "20s"}
	want := []string{
		"controller.extraArgs",
		"controller.leaderElection.leaseDuraton (did you mean controller.leaderElection.leaseDuration?)",
		"controller.podSecurityContext",
		"controller.replicaCout (did you mean controller.replicaCount?)",
		"node.extraArgs",
		"node.toleratons (did you mean node.tolerations?)",
	}
	data, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// The chart, with NOTES.txt also rendered as a template of comments: helm template
	// does not render NOTES.txt, and helm install --dry-run needs a cluster.
	chart := filepath.Join(t.TempDir(), "efs-csi-driver")
	if err := os.CopyFS(chart, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	notes, err := os.ReadFile(filepath.Join(chart, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	asComments := `{{- define "test.notes" -}}` + string(notes) + "{{- end -}}\n" +
		`{{ include "test.notes" . | replace "\n" "\n#NOTES " | printf "#NOTES %s" }}` + "\n"
	if err := os.WriteFile(filepath.Join(chart, "templates", "zz-notes.yaml"), []byte(asComments), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(helm(t), "template", "efs-csi-driver", chart, "--namespace", "kube-system", "-f", file).Output()
	if err != nil {
		t.Fatalf("helm template with keys upstream never had: %v\n%s", err, out)
	}
	var warned, noted []string
	inNotes := false
	for _, line := range strings.Split(string(out), "\n") {
		if k, ok := strings.CutPrefix(line, "#   "); ok {
			warned = append(warned, k)
		}
		if n, ok := strings.CutPrefix(line, "#NOTES "); ok {
			if inNotes && strings.HasPrefix(n, "  ") {
				noted = append(noted, strings.TrimSpace(n))
			}
			inNotes = inNotes || strings.HasPrefix(n, "WARNING: values keys")
		}
	}
	if !slices.Equal(warned, want) {
		t.Errorf("the rendering's warning names\n%s\nwant\n%s", strings.Join(warned, "\n"), strings.Join(want, "\n"))
	}
	if !slices.Equal(noted, want) {
		t.Errorf("NOTES.txt names\n%s\nwant\n%s", strings.Join(noted, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(string(out), "# WARNING: values keys this chart does not know") {
		t.Errorf("no warning comment in the rendering")
	}

	// Known keys only (every upstream key, this chart's defaults): no warning.
	plain, err := exec.Command(helm(t), "template", "efs-csi-driver", chartDir, "--namespace", "kube-system").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(plain), "WARNING") {
		t.Errorf("the default values are warned about:\n%s", plain)
	}
}
