package efsutils

import (
	"os"
	"path/filepath"
	"testing"
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
			dir, err := Setup(d.Dirs, []byte("conf"), nil)
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

// TestSetupKeepsExistingStaticFiles: a static file already in the
// directory (efs-utils may have updated it) is not overwritten.
func TestSetupKeepsExistingStaticFiles(t *testing.T) {
	d := newDirs(t)
	write(t, filepath.Join(d.ConfigDir, "efs-utils.crt"), "newer CA")
	if _, err := Setup(d.Dirs, []byte("conf"), nil); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(d.ConfigDir, "efs-utils.crt")); got != "newer CA" {
		t.Errorf("static file overwritten: %q", got)
	}
}

// TestSetupIsIdempotent: a second run with the same configuration does not
// rewrite the file; a different one replaces it.
func TestSetupIsIdempotent(t *testing.T) {
	d := newDirs(t)
	if _, err := Setup(d.Dirs, []byte("one"), nil); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(d.ConfigDir, ConfFileName)
	before, _ := os.Stat(conf)
	if _, err := Setup(d.Dirs, []byte("one"), nil); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(conf)
	if !os.SameFile(before, after) {
		t.Error("an unchanged configuration was rewritten")
	}
	if _, err := Setup(d.Dirs, []byte("two"), nil); err != nil {
		t.Fatal(err)
	}
	if got := read(t, conf); got != "two" {
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
	if _, err := Setup(d.Dirs, []byte("conf"), nil); err != nil {
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
	if _, err := Setup(d.Dirs, []byte("conf"), nil); err != nil {
		t.Fatal(err)
	}
	if l, _ := os.Readlink(d.EtcDir); l != d.ConfigDir {
		t.Errorf("link -> %q, want %s", l, d.ConfigDir)
	}

	d = newDirs(t)
	os.MkdirAll(d.EtcDir, 0o755)
	dir, err := Setup(d.Dirs, []byte("conf"), nil)
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
