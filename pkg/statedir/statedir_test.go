package statedir

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Nothing is made before the first write; what is written is read back,
// listed and removed; a name cannot leave the directory, not even through a
// symlink planted in it; a Dir of no path stores nothing.
func TestDirStoresInsideItselfAndOnlyOnceWritten(t *testing.T) {
	top := t.TempDir()
	path := filepath.Join(top, "state")
	d := New(path)
	if _, ok := d.Read("a"); ok || d.Names() != nil {
		t.Fatal("an unwritten directory has content")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the directory exists before a write: %v", err)
	}
	if err := d.Write("a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if data, ok := d.Read("a"); !ok || string(data) != "1" {
		t.Fatalf("read %q, %v", data, ok)
	}
	if got := d.Names(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("names %v, want [a] (no temporary file left)", got)
	}
	outside := filepath.Join(top, "outside")
	if err := os.Symlink(top, filepath.Join(path, "link")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../outside", "link/outside"} {
		if err := d.Write(name, []byte("x")); err == nil {
			t.Errorf("write of %q succeeded", name)
		}
		if _, ok := d.Read(name); ok {
			t.Errorf("read of %q succeeded", name)
		}
	}
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Errorf("a file was made outside the directory: %v", err)
	}
	d.Remove("a")
	d.Remove("a") // missing: no error to give
	if _, ok := d.Read("a"); ok {
		t.Error("removed name still read")
	}
	var none Dir
	if err := none.Write("a", nil); err != nil || none.Names() != nil {
		t.Errorf("a Dir of no path: write %v, names %v", err, none.Names())
	}
}

// A directory this user did not make for itself is neither read nor
// written: one another user owns (made first in a shared /tmp, filled with
// forged files), one others may write, a symlink to a directory of ours.
func TestDirRefusesADirectoryItDoesNotOwnAlone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a directory to another user needs root")
	}
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, path string)
	}{
		{"owned by another user", func(t *testing.T, path string) {
			mkdirWith(t, path, 0o700)
			if err := os.Chown(path, 4242, 4242); err != nil {
				t.Fatal(err)
			}
		}},
		{"writable by others", func(t *testing.T, path string) {
			mkdirWith(t, path, 0o777)
		}},
		{"a symlink to a directory of ours", func(t *testing.T, path string) {
			real := path + ".real"
			mkdirWith(t, real, 0o700)
			if err := os.WriteFile(filepath.Join(real, "a"), []byte("forged"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state")
			tc.plant(t, path)
			if err := os.WriteFile(filepath.Join(path, "a"), []byte("forged"), 0o600); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
			d := New(path)
			if data, ok := d.Read("a"); ok {
				t.Errorf("read %q from it", data)
			}
			if names := d.Names(); names != nil {
				t.Errorf("listed %v from it", names)
			}
			if err := d.Write("b", []byte("1")); err == nil {
				t.Error("wrote into it")
			}
		})
	}
}

func mkdirWith(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(path, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}
