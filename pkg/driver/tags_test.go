package driver

import (
	"context"
	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/iam"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// --tags is parsed as upstream parses it (its docs' and unit tests'
// examples), and holds only tags EFS accepts.
func TestParseTagsAsUpstream(t *testing.T) {
	cases := []struct {
		in      string
		want    map[string]string
		dropped []string
		err     string
	}{
		// docs/parameters.md
		{in: `name:efs-tag-test date:Jan24`, want: map[string]string{"name": "efs-tag-test", "date": "Jan24"}},
		{in: `tag\:name:tag\:value`, want: map[string]string{"tag:name": "tag:value"}},
		// the issue's: an escaped space
		{in: `key\ with\ space:v`, want: map[string]string{"key with space": "v"}},
		// upstream's controller tests
		{in: `cluster:efs tag2\:name2:tag2\:val2`, want: map[string]string{"cluster": "efs", "tag2:name2": "tag2:val2"}},
		{in: `cluster-efs:value1:value2`, want: map[string]string{}, dropped: []string{"cluster-efs:value1:value2"}},
		// upstream's splitToList test, read as --tags: \\ is a backslash
		// (not valid in an EFS tag), \: a colon
		{in: `aa\:bb:cc`, want: map[string]string{"aa:bb": "cc"}},
		{in: `a\\b:c`, err: `key "a\\b"`},
		{in: "", want: map[string]string{}},
		{in: "  team:storage   env:prod  ", want: map[string]string{"team": "storage", "env": "prod"}},
		{in: "novalue", want: map[string]string{"novalue": ""}},
		{in: "k:", want: map[string]string{"k": ""}},
		{in: `k:v\ w`, want: map[string]string{"k": "v w"}},
		{in: "email:a@b.c path:/x/y=z+1 ünï:cödé", want: map[string]string{"email": "a@b.c", "path": "/x/y=z+1", "ünï": "cödé"}},
		{in: "url:http://x", want: map[string]string{}, dropped: []string{"url:http://x"}},
		{in: ":v", err: `key ""`},
		{in: `aws\:k:v`, err: "reserved"},
		{in: "AWS\\:x:y", err: "reserved"},
		{in: "k:a,b", err: `value "a,b"`},
		{in: "k*:v", err: `key "k*"`},
		{in: strings.Repeat("k", 129) + ":v", err: "128"},
		{in: "k:" + strings.Repeat("v", 257), err: "256"},
		{in: `k:v\`, err: "trailing"},
		{in: tagList(44), err: "at most 50"},
	}
	for _, c := range cases {
		got, dropped, err := ParseTags(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseTags(%q) = %v, %v; want an error with %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || !maps.Equal(got, c.want) || !slices.Equal(dropped, c.dropped) {
			t.Errorf("ParseTags(%q) = %q, dropped %q, %v; want %q, dropped %q", c.in, got, dropped, err, c.want, c.dropped)
		}
	}
	// 42 and the driver's 8 (the record life among them) are EFS's 50.
	if got, _, err := ParseTags(tagList(42)); err != nil || len(got) != 42 {
		t.Errorf("42 tags: %d, %v", len(got), err)
	}
	if _, _, err := ParseTags(tagList(43)); err == nil {
		t.Errorf("43 tags accepted: with the driver's 8 an access point would carry 51")
	}
}

func tagList(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString("k")
		b.WriteString(strings.Repeat("x", i))
		b.WriteString(":v ")
	}
	return b.String()
}

// Upstream's documented escape provisions, and the access point carries the
// unescaped tag.
func TestEscapedTagsProvision(t *testing.T) {
	tags, _, err := ParseTags(`tag\:name:tag\:value key\ with\ space:v`)
	if err != nil {
		t.Fatal(err)
	}
	var emuURL string
	// --tags needs a policy allowing their keys: upstream's example policy.
	socket, _, _ := startDriverOn(t, func(e *emulator.Config) { e.IAMPolicies = []string{iam.UpstreamExamplePolicy} },
		func(c *Config) { c.Mode = ModeController; c.Tags = tags; emuURL = c.EFS.Endpoint })
	ctl := csi.NewControllerClient(dial(t, socket))
	ctx := context.Background()
	vol, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-tags", VolumeCapabilities: []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}}, Parameters: map[string]string{"provisioningMode": "efs-ap", "fileSystemId": sanityFS, "directoryPerms": "700"}})
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	h, err := volume.ParseID(vol.GetVolume().GetVolumeId())
	if err != nil {
		t.Fatal(err)
	}
	client, err := efs.New(ctx, efs.Config{Region: "us-east-1", Endpoint: emuURL})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := client.DescribeAccessPoint(ctx, h.AccessPointID)
	if err != nil {
		t.Fatal(err)
	}
	if ap.Tags["tag:name"] != "tag:value" || ap.Tags["key with space"] != "v" {
		t.Errorf("access point tags %v, want tag:name=tag:value and \"key with space\"=v", ap.Tags)
	}
}
