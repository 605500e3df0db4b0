package mount

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/reaper"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// cleanupTimeout bounds a roll-back unmount after the caller's context ended.
const cleanupTimeout = 30 * time.Second

// NewEFS returns the production Mounter: `mount -t efs` through the
// efs-utils mount helper (amazon-efs-utils must be installed on the node).
func NewEFS(opts ...Option) (*Mounter, error) {
	m := newMounter(nil, opts)
	m.b = &efsBackend{run: m.run, types: m.efsTypes}
	return m, nil
}

type efsBackend struct {
	run   Runner
	types []string // WithMountTypes
}

func (e *efsBackend) mount(ctx context.Context, vol Volume, target string) error {
	args := efsMountArgs(vol, target)
	out, err := e.run(ctx, "mount", args...)
	if err != nil {
		return fmt.Errorf("mount %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// efsMountArgs builds the argv of `mount` (without the command name) the way
// efs-utils expects it:
//
//	mount -t efs -o tls,accesspoint=fsap-Y,mounttargetip=IP,crossaccount,ro,OPTS fs-X:/path target
//	mount -t s3files -o tls,accesspoint=fsap-Y,nos3readcache,ro,OPTS fs-X:/path target
//
// The source path is relative to the access point root when there is one.
// S3 Files mounts are always TLS (its mount helper has no other way).
func efsMountArgs(vol Volume, target string) []string {
	s3 := vol.API == volume.APIS3Files
	var o []string
	if !vol.NoTLS || vol.AccessPointID != "" || s3 {
		o = append(o, "tls")
	}
	if vol.AccessPointID != "" {
		o = append(o, "accesspoint="+vol.AccessPointID)
	}
	if s3 && vol.NoS3ReadCache {
		o = append(o, "nos3readcache")
	}
	if vol.MountTargetIP != "" {
		o = append(o, "mounttargetip="+vol.MountTargetIP)
	}
	if vol.CrossAccount {
		o = append(o, "crossaccount")
	}
	if vol.ReadOnly {
		o = append(o, "ro")
	}
	for _, f := range vol.Options {
		if !contains(o, f) {
			o = append(o, f)
		}
	}
	fsType := "efs"
	if s3 {
		fsType = "s3files"
	}
	args := []string{"-t", fsType}
	if len(o) > 0 {
		args = append(args, "-o", strings.Join(o, ","))
	}
	return append(args, efsSource(vol), target)
}

func efsSource(vol Volume) string {
	p := vol.Path
	if p == "" {
		p = "/"
	}
	return vol.FileSystemID + ":" + p
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// classify compares an NFS mount with vol. efs-utils mounts show up as nfs4
// from 127.0.0.1:/path (TLS, through its stunnel) or from the mount
// target's address: the path is all that can be compared, so two volumes of
// one file system with the same path (or two access points) look alike. The
// CO gives every volume its own target, so that is enough to recognise a
// retry; a read-only mismatch is a conflict, since `mount -o ro` is atomic.
//
// A mount of a file system type given by WithMountTypes (a stand-in helper's
// bind mount) has no server path to compare: only its read-only setting is.
func (e *efsBackend) classify(_ context.Context, vol Volume, m mountInfo, _ *unix.Stat_t) (State, error) {
	if contains(e.types, m.FSType) {
		if m.readOnly() != vol.ReadOnly {
			return Conflict, nil
		}
		return Mounted, nil
	}
	if !strings.HasPrefix(m.FSType, "nfs") && m.FSType != "efs" && m.FSType != "s3files" {
		return Conflict, nil
	}
	_, p, ok := strings.Cut(m.Source, ":")
	want := vol.Path
	if want == "" {
		want = "/"
	}
	if !ok || p != want || m.readOnly() != vol.ReadOnly {
		return Conflict, nil
	}
	return Mounted, nil
}

// execRunner runs a command; when ctx ends it kills it and stops waiting for
// its output soon after (a mount helper stuck on a dead server). The child
// is registered with the reaper, which leaves its exit status to Wait.
func execRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 5 * time.Second
	return reaper.CombinedOutput(cmd)
}
