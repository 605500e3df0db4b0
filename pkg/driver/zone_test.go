package driver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// fakeIMDS serves IMDSv2 (a token, then metadata carrying it) with zone as
// placement/availability-zone ("" answers 404), and counts metadata reads.
func fakeIMDS(t *testing.T, zone string) *atomic.Int64 {
	t.Helper()
	return fakeIMDSPath(t, "placement/availability-zone", zone)
}

// fakeIMDSPath serves IMDSv2 with value at the metadata path ("" answers
// 404), and counts that path's reads.
func fakeIMDSPath(t *testing.T, path, value string) *atomic.Int64 {
	t.Helper()
	var reads atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			w.Header().Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", "21600")
			w.Write([]byte("tok"))
		case r.URL.Path == "/latest/meta-data/"+path:
			reads.Add(1)
			if r.Header.Get("X-Aws-Ec2-Metadata-Token") != "tok" || value == "" {
				http.NotFound(w, r)
				return
			}
			w.Write([]byte(value))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", srv.URL)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
	return &reads
}

// The zone NodeGetInfo reports comes from --zone, else the Node object's
// zone label, else instance metadata; the first source that answers wins and
// the later ones are not asked. No zone at all is not fatal: the node
// reports no topology, and in --mode=all the plugin then does not advertise
// VOLUME_ACCESSIBILITY_CONSTRAINTS.
func TestZoneDiscoveryOrderFlagThenNodeLabelThenIMDS(t *testing.T) {
	labelled := map[string]string{volume.TopologyZoneKey: "us-east-1b", "other": "x"}
	cases := []struct {
		name     string
		flag     string
		nodeName string            // $NODE_NAME
		node     map[string]string // the Node's labels; nil: no Node object
		kube     bool              // a Kubernetes API is configured
		imds     string            // "": IMDS answers 404
		want     string
		wantKube bool // the Node was read
		wantIMDS bool // instance metadata was read
		wantCap  bool // VOLUME_ACCESSIBILITY_CONSTRAINTS in --mode=all
	}{
		{name: "flag first", flag: "us-east-1a", nodeName: "n1", node: labelled, kube: true, imds: "us-east-1c", want: "us-east-1a", wantCap: true},
		{name: "Node label before IMDS", nodeName: "n1", node: labelled, kube: true, imds: "us-east-1c", want: "us-east-1b", wantKube: true, wantCap: true},
		{name: "Node without the label: IMDS", nodeName: "n1", node: map[string]string{"other": "x"}, kube: true, imds: "us-east-1c", want: "us-east-1c", wantKube: true, wantIMDS: true, wantCap: true},
		{name: "no Node object: IMDS", nodeName: "n1", kube: true, imds: "us-east-1c", want: "us-east-1c", wantKube: true, wantIMDS: true, wantCap: true},
		{name: "no node name: IMDS", node: labelled, kube: true, imds: "us-east-1c", want: "us-east-1c", wantIMDS: true, wantCap: true},
		{name: "no Kubernetes API: IMDS", nodeName: "n1", node: labelled, imds: "us-east-1c", want: "us-east-1c", wantIMDS: true, wantCap: true},
		{name: "nothing answers: unknown, not fatal", nodeName: "n1", kube: true, want: "", wantKube: true, wantIMDS: true, wantCap: false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reads := fakeIMDS(t, c.imds)
			t.Setenv("NODE_NAME", c.nodeName)
			t.Setenv("CSI_NODE_NAME", "")
			t.Setenv("KUBERNETES_SERVICE_HOST", "")
			api := kubetest.Start(t)
			if c.node != nil {
				api.SetNodeLabels("n1", c.node)
			}
			socket, _ := startDriver(t, func(cfg *Config) {
				cfg.Zone = c.flag
				cfg.noStartupTaint = true // it reads the Node too
				if c.kube {
					cfg.Kube = kube.Config{URL: api.URL, TokenFile: api.TokenFile("node"), CAFile: api.CAFile}
				}
			})
			conn := dial(t, socket)
			info, err := csi.NewNodeClient(conn).NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
			if err != nil {
				t.Fatal(err)
			}
			got := info.GetAccessibleTopology().GetSegments()[volume.TopologyZoneKey]
			if got != c.want || (c.want == "") != (info.GetAccessibleTopology() == nil) {
				t.Errorf("NodeGetInfo topology %v, want zone %q", info.GetAccessibleTopology(), c.want)
			}
			readNode := slices.ContainsFunc(api.Requests(), func(r kubetest.Request) bool { return r.Path == "/api/v1/nodes/n1" })
			if readNode != c.wantKube {
				t.Errorf("Node read: %v, want %v", readNode, c.wantKube)
			}
			if (reads.Load() > 0) != c.wantIMDS {
				t.Errorf("%d instance metadata reads, want any: %v", reads.Load(), c.wantIMDS)
			}
			caps, err := csi.NewIdentityClient(conn).GetPluginCapabilities(context.Background(), &csi.GetPluginCapabilitiesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if has := hasCapability(caps, csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS); has != c.wantCap {
				t.Errorf("VOLUME_ACCESSIBILITY_CONSTRAINTS advertised: %v, want %v", has, c.wantCap)
			}
		})
	}
}

// The controller advertises VOLUME_ACCESSIBILITY_CONSTRAINTS (the
// provisioner then writes One Zone volumes' nodeAffinity); a node plugin
// alone advertises nothing, as it serves no controller.
func TestTopologyCapabilityByMode(t *testing.T) {
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, c := range []struct {
		mode string
		want bool
	}{{ModeController, true}, {ModeNode, false}} {
		t.Run(c.mode, func(t *testing.T) {
			socket, _ := startDriver(t, func(cfg *Config) { cfg.Mode = c.mode })
			caps, err := csi.NewIdentityClient(dial(t, socket)).GetPluginCapabilities(context.Background(), &csi.GetPluginCapabilitiesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if has := hasCapability(caps, csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS); has != c.want {
				t.Errorf("advertised: %v, want %v", has, c.want)
			}
		})
	}
}

func hasCapability(r *csi.GetPluginCapabilitiesResponse, want csi.PluginCapability_Service_Type) bool {
	return slices.ContainsFunc(r.GetCapabilities(), func(c *csi.PluginCapability) bool { return c.GetService().GetType() == want })
}
