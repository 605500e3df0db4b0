package efsutils

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/testutil"
)

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// conf is a Conf of efs-utils.conf alone.
func conf(efs string) Conf { return Conf{EFSUtils: []byte(efs)} }

type dirsFixture struct {
	Dirs
	base string
}

func newDirs(t *testing.T) dirsFixture {
	base := t.TempDir()
	d := dirsFixture{base: base, Dirs: Dirs{
		ConfigDir:      filepath.Join(base, "var/amazon/efs"),
		LegacyDir:      filepath.Join(base, "etc/amazon/efs-legacy"),
		StaticFilesDir: filepath.Join(base, "etc/amazon/efs-static-files"),
		EtcDir:         filepath.Join(base, "etc/amazon/efs"),
	}}
	write(t, filepath.Join(d.StaticFilesDir, "efs-utils.crt"), "CA")
	return d
}

// TestSetupChoosesTheDirectory: the legacy directory when it holds a
// configuration (mounts of an older driver), else the config directory;
// /etc/amazon/efs links to the one chosen, and the configuration and the
// static files are in it.
func TestSetupChoosesTheDirectory(t *testing.T) {
	tests := []struct {
		name       string
		prepare    func(t *testing.T, d dirsFixture)
		wantLegacy bool
	}{
		{"fresh node", func(*testing.T, dirsFixture) {}, false},
		{"empty legacy directory", func(t *testing.T, d dirsFixture) { os.MkdirAll(d.LegacyDir, 0o755) }, false},
		{"legacy directory with other files only", func(t *testing.T, d dirsFixture) {
			write(t, filepath.Join(d.LegacyDir, "efs-utils.crt"), "old CA")
		}, false},
		{"legacy configuration", func(t *testing.T, d dirsFixture) {
			write(t, filepath.Join(d.LegacyDir, ConfFileName), "old")
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDirs(t)
			tt.prepare(t, d)
			dir, err := Setup(d.Dirs, conf("conf"), nil)
			if err != nil {
				t.Fatal(err)
			}
			want := d.ConfigDir
			if tt.wantLegacy {
				want = d.LegacyDir
			}
			if dir != want {
				t.Fatalf("chose %s, want %s", dir, want)
			}
			if l, err := os.Readlink(d.EtcDir); err != nil || l != want {
				t.Errorf("%s -> %q, %v; want a link to %s", d.EtcDir, l, err, want)
			}
			if got := read(t, filepath.Join(d.EtcDir, ConfFileName)); got != "conf" {
				t.Errorf("conf through the link: %q", got)
			}
			if _, err := os.Stat(filepath.Join(want, "efs-utils.crt")); err != nil {
				t.Errorf("static file: %v", err)
			}
		})
	}
}

// TestSetupRestoresTheStaticFiles: at every start, as upstream, the
// image's CA bundle replaces the one in the directory (a stale certificate
// left on the host by an older image heals: stunnel otherwise says "No
// trusted certificates"); another static file is copied only when missing;
// the package's configuration files are never copied over the ones written
// from the flags.
func TestSetupRestoresTheStaticFiles(t *testing.T) {
	tests := []struct {
		name, file, before, static, want string // before "": absent
	}{
		{"a stale CA bundle is replaced", CertFileName, "stale CA", "CA", "CA"},
		{"a missing CA bundle is restored", CertFileName, "", "CA", "CA"},
		{"another static file is kept", "extra.pem", "local", "image", "local"},
		{"another static file is restored", "extra.pem", "", "image", "image"},
		{"the image's efs-utils.conf is not copied", ConfFileName, "", "package conf", "conf"},
		{"the image's s3files-utils.conf is not copied", S3FilesConfFileName, "", "package conf", "s3 conf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDirs(t)
			write(t, filepath.Join(d.StaticFilesDir, tt.file), tt.static)
			if tt.before != "" {
				write(t, filepath.Join(d.ConfigDir, tt.file), tt.before)
			}
			if _, err := Setup(d.Dirs, Conf{EFSUtils: []byte("conf"), S3FilesUtils: []byte("s3 conf")}, nil); err != nil {
				t.Fatal(err)
			}
			if got := read(t, filepath.Join(d.ConfigDir, tt.file)); got != tt.want {
				t.Errorf("%s = %q, want %q", tt.file, got, tt.want)
			}
		})
	}
}

// TestSetupWritesBothFiles: efs-utils.conf and s3files-utils.conf land in
// the directory efs-utils reads (through /etc/amazon/efs), where mount.efs
// and mount.s3files look for them.
func TestSetupWritesBothFiles(t *testing.T) {
	d := newDirs(t)
	if _, err := Setup(d.Dirs, Conf{EFSUtils: []byte("efs"), S3FilesUtils: []byte("s3files")}, nil); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{ConfFileName: "efs", S3FilesConfFileName: "s3files"} {
		if got := read(t, filepath.Join(d.EtcDir, name)); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

// TestSetupWarnsOfAMissingCABundle: a region whose CA bundle is absent
// (an iso region's system bundle in an image without it) is said at start;
// Setup still succeeds (other regions' mounts, bind mounts, work).
func TestSetupWarnsOfAMissingCABundle(t *testing.T) {
	for _, tt := range []struct {
		name   string
		cafile func(d dirsFixture) string
		warned bool
	}{
		{"present", func(d dirsFixture) string { return filepath.Join(d.StaticFilesDir, CertFileName) }, false},
		{"missing", func(d dirsFixture) string { return filepath.Join(d.base, "no-such-bundle.pem") }, true},
		{"region unknown", func(dirsFixture) string { return "" }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newDirs(t)
			logs := testutil.NewLogs()
			c := conf("conf")
			c.CAFile = tt.cafile(d)
			if _, err := Setup(d.Dirs, c, logs.Logger()); err != nil {
				t.Fatal(err)
			}
			if got := logs.Count(slog.LevelWarn, "CA bundle") > 0; got != tt.warned {
				t.Errorf("warned %v, want %v: %v", got, tt.warned, logs.Records())
			}
		})
	}
}

// TestSetupIsIdempotent: a second run with the same configuration does not
// rewrite the file; a different one replaces it.
func TestSetupIsIdempotent(t *testing.T) {
	d := newDirs(t)
	if _, err := Setup(d.Dirs, conf("one"), nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d.ConfigDir, ConfFileName)
	before, _ := os.Stat(path)
	if _, err := Setup(d.Dirs, conf("one"), nil); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(path)
	if !os.SameFile(before, after) {
		t.Error("an unchanged configuration was rewritten")
	}
	if _, err := Setup(d.Dirs, conf("two"), nil); err != nil {
		t.Fatal(err)
	}
	if got := read(t, path); got != "two" {
		t.Errorf("conf = %q", got)
	}
	ents, _ := os.ReadDir(d.ConfigDir)
	if len(ents) != 2 {
		t.Errorf("directory holds %d entries (temporary files left?): %v", len(ents), ents)
	}
}

// TestSetupDoesNotFollowSymlinksOut: a symlink named efs-utils.conf or as
// a static file, pointing outside the directory, never has its target
// written.
func TestSetupDoesNotFollowSymlinksOut(t *testing.T) {
	d := newDirs(t)
	outside := filepath.Join(d.base, "outside")
	write(t, outside, "precious")
	os.MkdirAll(d.ConfigDir, 0o755)
	must(t, os.Symlink(outside, filepath.Join(d.ConfigDir, ConfFileName)))
	must(t, os.Symlink(outside, filepath.Join(d.ConfigDir, "efs-utils.crt")))
	if _, err := Setup(d.Dirs, conf("conf"), nil); err != nil {
		t.Fatal(err)
	}
	if got := read(t, outside); got != "precious" {
		t.Fatalf("write followed a symlink out of the directory: %q", got)
	}
	fi, err := os.Lstat(filepath.Join(d.ConfigDir, ConfFileName))
	if err != nil || !fi.Mode().IsRegular() {
		t.Errorf("efs-utils.conf is not a regular file: %v %v", fi, err)
	}
}

// TestSetupRetargetsTheLink: a link left by a previous run to another
// directory is replaced; a real /etc/amazon/efs directory is used as is.
func TestSetupRetargetsTheLink(t *testing.T) {
	d := newDirs(t)
	os.MkdirAll(filepath.Dir(d.EtcDir), 0o755)
	must(t, os.Symlink(d.LegacyDir, d.EtcDir))
	if _, err := Setup(d.Dirs, conf("conf"), nil); err != nil {
		t.Fatal(err)
	}
	if l, _ := os.Readlink(d.EtcDir); l != d.ConfigDir {
		t.Errorf("link -> %q, want %s", l, d.ConfigDir)
	}

	d = newDirs(t)
	os.MkdirAll(d.EtcDir, 0o755)
	dir, err := Setup(d.Dirs, conf("conf"), nil)
	if err != nil || dir != d.EtcDir {
		t.Fatalf("Setup = %s, %v; want the real directory %s", dir, err, d.EtcDir)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
