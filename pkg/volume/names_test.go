package volume

import (
	"strings"
	"testing"
)

func TestUpstreamTokenShapes(t *testing.T) {
	for s, want := range map[string]bool{
		"pvc-6f1c2d3e-0000-4000-8000-00000000c1d0":    true,
		"data.x-6f1c2d3e-0000-4000-8000-00000000c1d0": true,
		"pvc-6f1c2d3e":                         false,
		"6f1c2d3e-0000-4000-8000-00000000c1d0": false,
	} {
		if got := IsProvisionerVolumeName(s); got != want {
			t.Errorf("IsProvisionerVolumeName(%q) = %v", s, got)
		}
	}
	if !IsClaimNameHash(strings.Repeat("ab", 32)) || IsClaimNameHash(strings.Repeat("AB", 32)) || IsClaimNameHash("ab") {
		t.Error("IsClaimNameHash")
	}
}
