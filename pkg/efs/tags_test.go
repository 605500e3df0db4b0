package efs_test

import (
	"errors"
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// TagResource adds tags and overwrites values, keeps the other tags, is
// idempotent, and names a missing access point with the sentinel.
func TestTagResourceAddsAndKeepsTags(t *testing.T) {
	c, _, _ := startEmulator(t, emulator.Config{})
	ctx := t.Context()
	ap, err := c.CreateAccessPoint(ctx, emuInput("pvc-tag"))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := c.TagResource(ctx, ap.ID, map[string]string{"efs.csi.aws.com/bound": "true", "efs.csi.aws.com/cluster": "yes"}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.DescribeAccessPoint(ctx, ap.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Tags) != 2 || got.Tags["efs.csi.aws.com/bound"] != "true" || got.Tags["efs.csi.aws.com/cluster"] != "yes" {
		t.Errorf("tags %v", got.Tags)
	}
	if err := c.TagResource(ctx, "fsap-ffffffffffffffff0", map[string]string{"k": "v"}); !errors.Is(err, efs.ErrAccessPointNotFound) {
		t.Errorf("missing access point: %v, want ErrAccessPointNotFound", err)
	}
}
