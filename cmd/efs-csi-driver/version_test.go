package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

// --version prints upstream's JSON, with upstream's keys in upstream's
// order, that scripts parse; it exits 0 without an AWS region (the image's
// own build runs it).
func TestVersionPrintsUpstreamsJSON(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--version")
	cmd.Env = append(os.Environ(), beMainEnv+"=1", "AWS_REGION=", "AWS_EC2_METADATA_DISABLED=true")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	var v map[string]string
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("--version printed no JSON object of strings: %v\n%s", err, out)
	}
	// The order, as upstream's VersionInfo marshals it.
	dec := json.NewDecoder(bytes.NewReader(out))
	var keys []string
	dec.Token() // {
	for dec.More() {
		k, _ := dec.Token()
		keys = append(keys, k.(string))
		dec.Token() // its value
	}
	want := []string{"driverVersion", "gitCommit", "buildDate", "efsClientSource", "goVersion", "compiler", "platform"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys %q, want upstream's %q", keys, want)
	}
	if v["driverVersion"] == "" || v["goVersion"] != runtime.Version() || v["compiler"] != runtime.Compiler ||
		v["platform"] != runtime.GOOS+"/"+runtime.GOARCH || v["efsClientSource"] != "k8s" {
		t.Errorf("--version: %s", out)
	}
}

// Upstream's documented tag escapes start the controller and provision
// (before, the first exited and the second failed every CreateVolume).
func TestUpstreamTagEscapesProvision(t *testing.T) {
	conn, out, _ := start(t, func(sock string) []string {
		return []string{"--endpoint=unix:" + sock, "--mode=controller", `--tags=tag\:name:tag\:value key\ with\ space:v date:Jan24`}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := csi.NewControllerClient(conn).CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-escapes",
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}},
		Parameters: map[string]string{"provisioningMode": "efs-ap", "fileSystemId": "fs-0123456789abcdef0", "directoryPerms": "700"}},
		grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("CreateVolume: %v\n%s", err, out)
	}
}
