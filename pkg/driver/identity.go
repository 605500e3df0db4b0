package driver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/efs-csi/efs-csi-driver/pkg/version"
)

// Version is the driver's version, pkg/version's (stamped at build time with -ldflags).
var Version = version.Version

type identity struct {
	csi.UnimplementedIdentityServer
	name       string
	controller bool
	// topology: advertise VOLUME_ACCESSIBILITY_CONSTRAINTS (see
	// GetPluginCapabilities): a controller, unless it is also this
	// process's node plugin and that knows no zone.
	topology bool
}

func (i *identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.name, VendorVersion: Version}, nil
}

func (i *identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	var caps []*csi.PluginCapability
	if i.controller {
		caps = append(caps, service(csi.PluginCapability_Service_CONTROLLER_SERVICE))
	}
	if i.topology {
		caps = append(caps,
			// The external-provisioner writes a volume's AccessibleTopology into
			// its PV's nodeAffinity, and passes WaitForFirstConsumer claims'
			// AccessibilityRequirements, only when the plugin advertises this
			// (and its Topology gate, on by default, is on). It is advertised
			// with the controller, which is what the provisioner asks, so that
			// One Zone volumes (enforceZoneAffinity) are scheduled to their zone;
			// in --mode=all only when this process's node plugin knows its zone,
			// since the CO matches volumes' topology with NodeGetInfo's.
			//
			// What it costs, from the provisioner's topology code: a regional
			// volume answers no topology, so its PV has no nodeAffinity, and
			// requirements are ignored for it. But with --immediate-topology
			// (the provisioner's default) an Immediate claim fails with "no
			// available topology found" while no node has reported a zone (no
			// node plugin running yet, or none knows its zone); the chart
			// therefore runs the provisioner with --immediate-topology=false,
			// and Immediate claims get no requirements at all (a One Zone
			// volume still answers its zone). A WaitForFirstConsumer claim on
			// a node that reported no zone is refused by the provisioner ("no
			// topology key found for node") whatever this driver answers: the
			// node plugin discovers its zone from --zone, the Node's zone label
			// or instance metadata, and warns when it finds none
			// (docs/backends.md, Topology).
			service(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS))
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

func service(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
	return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
}

// Probe answers ready, at once, whenever the process can answer at all: it
// is what the livenessprobe sidecar turns into the container's liveness, and
// a restart fixes nothing outside the process. An EFS outage would otherwise
// restart every controller of every cluster at once, and keep restarting
// them while it lasts. EFS reachability is reported by efsHealth instead
// (metric efs_csi_efs_api_reachable and a log line on each change); calls
// that need EFS are sent all along, and each that EFS does not answer ends
// UNAVAILABLE, which the CO retries.
func (i *identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
