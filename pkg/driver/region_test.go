package driver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

// noAWSRegion clears every source of the SDK's region.
func noAWSRegion(t *testing.T) {
	t.Helper()
	for _, env := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ENDPOINT_URL_EFS", "AWS_ENDPOINT_URL", "KUBERNETES_SERVICE_HOST"} {
		t.Setenv(env, "")
	}
	none := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
}

// The region comes from the AWS configuration, else instance metadata, else
// the Node's topology.kubernetes.io/region label, as upstream (whose
// manifests set no AWS_REGION); the first source that answers wins.
func TestRegionDiscoveryConfigThenIMDSThenNodeLabel(t *testing.T) {
	labelled := map[string]string{RegionKey: "eu-west-1", "other": "x"}
	cases := []struct {
		name     string
		flag     string            // cfg.EFS.Region
		env      string            // AWS_REGION
		imds     string            // "": 404
		nodeName string            // CSI_NODE_NAME
		node     map[string]string // nil: no Node object
		kube     bool
		want     string
		wantSrc  regionSource
		wantIMDS bool
	}{
		{name: "configured first", flag: "us-west-2", env: "us-east-2", imds: "ap-south-1", nodeName: "n1", node: labelled, kube: true, want: "us-west-2", wantSrc: regionFromConfig},
		{name: "AWS_REGION before IMDS", env: "us-east-2", imds: "ap-south-1", nodeName: "n1", node: labelled, kube: true, want: "us-east-2", wantSrc: regionFromConfig},
		{name: "IMDS before the Node label", imds: "ap-south-1", nodeName: "n1", node: labelled, kube: true, want: "ap-south-1", wantSrc: regionFromIMDS, wantIMDS: true},
		{name: "no IMDS: the Node label", nodeName: "n1", node: labelled, kube: true, want: "eu-west-1", wantSrc: regionFromNode, wantIMDS: true},
		{name: "Node without the label", nodeName: "n1", node: map[string]string{"other": "x"}, kube: true, wantIMDS: true},
		{name: "no Node object", nodeName: "n1", kube: true, wantIMDS: true},
		{name: "no node name", node: labelled, kube: true, wantIMDS: true},
		{name: "no Kubernetes API", nodeName: "n1", node: labelled, wantIMDS: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			noAWSRegion(t)
			t.Setenv("AWS_REGION", c.env)
			reads := fakeIMDSPath(t, "placement/region", c.imds)
			t.Setenv("NODE_NAME", "")
			t.Setenv("CSI_NODE_NAME", c.nodeName)
			api := kubetest.Start(t)
			if c.node != nil {
				api.SetNodeLabels("n1", c.node)
			}
			var cfg Config
			cfg.EFS.Region = c.flag
			if c.kube {
				cfg.Kube = kube.Config{URL: api.URL, TokenFile: api.TokenFile("controller"), CAFile: api.CAFile}
			}
			got, src, err := discoverRegion(context.Background(), cfg)
			if got != c.want || src != c.wantSrc || (err == nil) != (c.want != "") {
				t.Errorf("discoverRegion = %q, %q, %v; want %q from %q", got, src, err, c.want, c.wantSrc)
			}
			if (reads.Load() > 0) != c.wantIMDS {
				t.Errorf("%d instance metadata reads, want any: %v", reads.Load(), c.wantIMDS)
			}
		})
	}
}

// Without AWS_REGION, a controller (and the default mode "all", which
// upstream's node manifests run) starts with the region instance metadata
// or the Node label gives, and fails, naming the sources, with none.
func TestNewWithoutAWSRegion(t *testing.T) {
	for _, mode := range []string{ModeController, ModeAll} {
		t.Run(mode, func(t *testing.T) {
			newCfg := func() Config {
				journal := filepath.Join(t.TempDir(), "journal")
				if err := os.Mkdir(journal, 0o700); err != nil {
					t.Fatal(err)
				}
				return Config{
					Endpoint: "unix://" + filepath.Join(t.TempDir(), "csi.sock"), Mode: mode, NodeID: "node-1",
					TempDir: t.TempDir(), Journal: "file:" + journal, ClusterID: "c1", LocalRoot: t.TempDir(),
				}
			}
			noAWSRegion(t)
			t.Setenv("NODE_NAME", "")
			t.Setenv("CSI_NODE_NAME", "n1")
			fakeIMDSPath(t, "placement/region", "ap-south-1")
			d, err := New(context.Background(), newCfg())
			if err != nil {
				t.Fatalf("New with the region in instance metadata: %v", err)
			}
			if got := d.cfg.EFS.Region; got != "ap-south-1" {
				t.Errorf("region %q, want instance metadata's ap-south-1", got)
			}

			fakeIMDSPath(t, "placement/region", "")
			api := kubetest.Start(t)
			api.SetNodeLabels("n1", map[string]string{RegionKey: "eu-west-1"})
			cfg := newCfg()
			cfg.Kube = kube.Config{URL: api.URL, TokenFile: api.TokenFile("controller"), CAFile: api.CAFile}
			if d, err = New(context.Background(), cfg); err != nil {
				t.Fatalf("New with the region in the Node label: %v", err)
			}
			if got := d.cfg.EFS.Region; got != "eu-west-1" {
				t.Errorf("region %q, want the Node label's eu-west-1", got)
			}

			t.Setenv("CSI_NODE_NAME", "")
			_, err = New(context.Background(), newCfg())
			if err == nil || !strings.Contains(err.Error(), "no AWS region") || !strings.Contains(err.Error(), "placement/region") {
				t.Errorf("New with no region anywhere: %v, want an error naming the sources", err)
			}
		})
	}
}
