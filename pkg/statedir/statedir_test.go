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
