package controller

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// An efs-dir class without directoryPerms makes its directory 2770 (group-
// writable, setgid, on the volume's gid), and the answer's volume context
// carries the directory's uid and gid for the pod's securityContext.
func TestDirVolumeDefaultModeAndContextIDs(t *testing.T) {
	r := newRootBed(t)
	p := dirParams()
	delete(p, volume.ParamDirectoryPerms)
	resp, err := r.svc.CreateVolume(r.ctx(), createReq("pvc-1", 1<<30, p))
	if err != nil {
		t.Fatal(err)
	}
	vol := resp.GetVolume()
	uid, gid, mode := ownerOf(t, r.dirOf(vol.GetVolumeId()))
	if mode&os.ModeSetgid == 0 || mode.Perm() != 0o770 {
		t.Errorf("mode %v, want setgid 0770 (2770)", mode)
	}
	vc := vol.GetVolumeContext()
	if vc[CtxUID] != strconv.FormatUint(uint64(uid), 10) || vc[CtxGID] != strconv.FormatUint(uint64(gid), 10) {
		t.Errorf("volume context %v, want uid %d and gid %d", vc, uid, gid)
	}
	// A class's directoryPerms is honoured.
	vol2 := r.mustCreateDir("pvc-2", "directoryPerms", "750")
	if _, _, mode := ownerOf(t, r.dirOf(vol2)); mode&os.ModeSetgid != 0 || mode.Perm() != 0o750 {
		t.Errorf("mode %v, want 0750 as the class says", mode)
	}
}

// A controller that cannot mount (the chart's unprivileged default) refuses
// an efs-dir create before it records anything, naming the chart value.
func TestDirVolumeRefusedEarlyWithoutMountPrivileges(t *testing.T) {
	r := newRootBed(t, func(c *Config) {
		c.DirPreflight = func() error { return errors.New("its process lacks CAP_SYS_ADMIN (mount)") }
	})
	_, err := r.createDir("pvc-1")
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "controller.directoryVolumes") {
		t.Fatalf("CreateVolume: %v, want ErrNotSupported naming controller.directoryVolumes", err)
	}
	if n := len(r.records()); n != 0 {
		t.Errorf("%d records after a refused create, want 0", n)
	}
}

// This test process (root in CI) may make directories.
func TestMountPrivilegesOfRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if err := MountPrivileges(); err != nil {
		t.Errorf("root: %v", err)
	}
}
