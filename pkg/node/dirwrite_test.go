package node_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/mount/mounttest"
)

// writerUID is a uid no volume is owned by: the pod's user, whatever it is.
const writerUID = 4242

// TestDirVolumeWritableByItsGroup: an efs-dir volume (a class without
// directoryPerms) made by the controller and published on the node takes
// a write from a non-root uid that holds the volume's gid as a
// supplementary group (a pod's fsGroup or supplementalGroups, from the gid
// in the volume context), and refuses the same write without the group.
// What it makes keeps the volume's gid (setgid).
func TestDirVolumeWritableByItsGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: bind mounts, and a child process run as another uid")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("needs sh to write as another uid")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, _, _ := startDriver(t, e2eConfig(t))
	ctrl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	created, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name:               "pvc-dir-write",
		VolumeCapabilities: []*csi.VolumeCapability{e2eCapability},
		Parameters:         map[string]string{"provisioningMode": "efs-dir", "fileSystemId": e2eFS},
	})
	must(t, err)
	vol := created.GetVolume()
	vc := vol.GetVolumeContext()
	gid, err := strconv.ParseUint(vc["gid"], 10, 32)
	if err != nil {
		t.Fatalf("volume context %v: no gid a pod could hold (%v)", vc, err)
	}
	if uid, err := strconv.ParseUint(vc["uid"], 10, 32); err != nil || uid == writerUID || gid == writerUID {
		t.Fatalf("volume context %v: uid %v; the writer must be another uid", vc, err)
	}

	target := mounttest.Target(t)
	// The writer must reach the target: its temporary parents are root's 0700.
	for p := filepath.Dir(target); p != filepath.Dir(filepath.Dir(filepath.Dir(target))); p = filepath.Dir(p) {
		must(t, os.Chmod(p, 0o755))
	}
	must(t, publishVolume(ctx, node, vol, target))
	defer func() {
		_, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol.GetVolumeId(), TargetPath: target})
		must(t, err)
	}()

	write := func(name string, groups []uint32) error {
		cmd := exec.CommandContext(ctx, sh, "-c", `echo written > "$1"`, "sh", filepath.Join(target, name))
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: writerUID, Gid: writerUID, Groups: groups}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Logf("write %s as uid %d, groups %v: %v: %s", name, writerUID, groups, err, out)
		}
		return err
	}
	if err := write("without-group", []uint32{}); err == nil {
		t.Errorf("uid %d without gid %d wrote into the volume", writerUID, gid)
	}
	if err := write("with-group", []uint32{uint32(gid)}); err != nil {
		t.Fatalf("uid %d holding gid %d cannot write into the volume: %v", writerUID, gid, err)
	}
	fi, err := os.Stat(filepath.Join(target, "with-group"))
	must(t, err)
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != writerUID || uint64(st.Gid) != gid {
		t.Errorf("the file written is %d:%d, want %d:%d (the volume's gid, setgid)", st.Uid, st.Gid, writerUID, gid)
	}
}
