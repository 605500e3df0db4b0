package realefs

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hack/install-efs-utils.sh, the image's install step, installs the pinned release in the
// image's layout, and refuses a tarball that is not the pin: another checksum, a release
// whose config.ini names another version, programs that print another version.
func TestInstallScript(t *testing.T) {
	tarball := Tarball(t)
	version, _ := Pin(t)
	root := filepath.Join(t.TempDir(), "root")
	Install(t, root, tarball)
	for path, mode := range map[string]fs.FileMode{
		"sbin/mount.efs": 0o755, "sbin/mount.s3files": 0o755, "usr/bin/amazon-efs-mount-watchdog": 0o755,
		"sbin/efs_utils_common/mount_utils.py": 0o644, "sbin/mount_efs/dns_resolver.py": 0o644,
		"sbin/mount_s3files/dns_resolver.py":        0o644,
		"etc/amazon/efs-static-files/efs-utils.crt": 0o444, "etc/amazon/efs-static-files/efs-utils.conf": 0o644,
		"etc/amazon/efs-static-files/s3files-utils.conf": 0o644,
	} {
		fi, err := os.Stat(filepath.Join(root, path))
		if err != nil {
			t.Errorf("not installed: %v", err)
		} else if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), mode)
		}
	}

	// A tarball of the same release whose programs say another version.
	src := t.TempDir()
	run(t, "", "tar", "-xzf", tarball, "-C", src)
	top := filepath.Join(src, "efs-utils-"+version)
	constants := filepath.Join(top, "src", "efs_utils_common", "constants.py")
	b, err := os.ReadFile(constants)
	must(t, err)
	if !strings.Contains(string(b), `VERSION = "`+version+`"`) {
		t.Fatalf("%s has no VERSION = %q", constants, version)
	}
	must(t, os.WriteFile(constants, []byte(strings.Replace(string(b), `VERSION = "`+version+`"`, `VERSION = "0.0.1"`, 1)), 0o644))
	other := filepath.Join(t.TempDir(), "other.tar.gz")
	run(t, src, "tar", "-czf", other, "efs-utils-"+version)
	otherSum := sum(t, other)

	for _, tc := range []struct {
		name, tarball string
		env           []string
		want          string
	}{
		{"another checksum", tarball, []string{"EFS_UTILS_SHA256=" + strings.Repeat("0", 64)}, "sha256"},
		{"another version", tarball, []string{"EFS_UTILS_VERSION=9.9.9"}, "config.ini says version=" + version + ", want 9.9.9"},
		{"programs of another version", other, []string{"EFS_UTILS_SHA256=" + otherSum}, "--version printed"},
		{"not a version", tarball, []string{"EFS_UTILS_VERSION=latest"}, "not X.Y.Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "root")
			cmd := exec.Command("bash", filepath.Join(RepoRoot(t), "hack", "install-efs-utils.sh"), dest, tc.tarball)
			cmd.Env = append(cleanEnv(), tc.env...)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("install-efs-utils.sh: %v, want a failure saying %q:\n%s", err, tc.want, out)
			}
		})
	}
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func sum(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	must(t, err)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
