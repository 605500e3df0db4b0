package driver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Version is set at build time with -ldflags "-X .../pkg/driver.Version=v1.2.3".
var Version = "v0.1.0-dev"

type identity struct {
	csi.UnimplementedIdentityServer
	name       string
	controller bool
}

func (i *identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.name, VendorVersion: Version}, nil
}

func (i *identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	var caps []*csi.PluginCapability
	if i.controller {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
			Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}})
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe answers ready, at once, whenever the process can answer at all: it
// is what the livenessprobe sidecar turns into the container's liveness, and
// a restart fixes nothing outside the process. An EFS outage would otherwise
// restart every controller of every cluster at once, and keep restarting
// them while it lasts. EFS reachability is reported by efsHealth instead
// (metric efs_csi_efs_api_reachable and a log line on each change), and every
// call that needs EFS answers UNAVAILABLE meanwhile.
func (i *identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
