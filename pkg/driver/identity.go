package driver

import (
	"context"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Version is set at build time with -ldflags "-X .../pkg/driver.Version=v1.2.3".
var Version = "v0.1.0-dev"

// Pinger reports whether the EFS API can be reached.
type Pinger interface {
	Ping(ctx context.Context) error
}

type identity struct {
	csi.UnimplementedIdentityServer
	name       string
	controller bool
	ping       Pinger // nil in node mode: nothing remote to be ready for
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

// probeTimeout keeps a Probe short when the API hangs: a hung API is not ready.
const probeTimeout = 5 * time.Second

// Probe is ready only while the EFS API answers, so a controller that cannot
// reach it is restarted or taken out of service instead of failing every call.
func (i *identity) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if i.ping != nil {
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		if err := i.ping.Ping(ctx); err != nil {
			return &csi.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil
		}
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
