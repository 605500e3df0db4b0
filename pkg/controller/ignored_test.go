package controller

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/testutil"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// A class with a key this driver does not know (mountOptions under
// parameters, a typo beside the right key) provisions, as upstream, with a
// warning logged once per file system and key; a known key with a bad value
// is still INVALID_ARGUMENT.
func TestUnknownStorageClassParametersAreIgnoredWithAWarning(t *testing.T) {
	var logs testutil.Buffer
	b := newBed(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	stray := params("mountOptions", "tls", "directoryPerm", "755", "csi.storage.k8s.io/pvc/uid", "u")
	for _, name := range []string{"pvc-stray-1", "pvc-stray-2"} {
		if _, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, stray)); err != nil {
			t.Fatalf("CreateVolume(%s) with stray keys: %v", name, err)
		}
	}
	b.wantAccessPoints(2)
	out := logs.String()
	for _, k := range []string{"mountOptions", "directoryPerm", "csi.storage.k8s.io/pvc/uid"} {
		if n := strings.Count(out, "parameter="+k+" "); n != 1 {
			t.Errorf("%d warnings about %s, want 1:\n%s", n, k, out)
		}
	}
	if strings.Count(out, "StorageClass parameter ignored") != 3 {
		t.Errorf("want 3 warnings:\n%s", out)
	}

	_, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-bad", 1<<30, params("mountOptions", "tls", "directoryPerms", "800")))
	if !errors.Is(err, volume.ErrInvalidParameter) {
		t.Errorf("a known key with a bad value beside a stray key: %v, want INVALID_ARGUMENT", err)
	}
}
