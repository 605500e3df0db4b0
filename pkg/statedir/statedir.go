// Package statedir keeps small files, one per name, in a directory that
// processes on one host share and that outlives them: written atomically (a
// temporary file renamed into place, so a reader never sees half a file),
// read and removed through an os.Root (a name cannot reach outside the
// directory, nor follow a symlink out of it). The directory is made at the
// first write, so a process that stores nothing leaves no trace. Callers
// check their names and do not trust what they read beyond what they can
// verify: every operation is best effort.
//
// The directory must be one this user owns, that no one else may write,
// and not a symlink (Owned): nothing is read from, or written to, a
// directory another user could have made or filled first (a shared /tmp).
package statedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Owned makes dir 0700 if missing (and its parents 0755), then checks it as
// CheckOwned does.
func Owned(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return CheckOwned(dir)
}

// CheckOwned reports, as an error, why dir is not a directory (a symlink is
// not) owned by this process's user that no one else may write.
func CheckOwned(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s is not a directory (a symlink is refused)", dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s is owned by uid %d, not this process's %d", dir, st.Uid, os.Geteuid())
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s has mode %o: others may write it", dir, st.Mode&0o777)
	}
	return nil
}

// Dir is one such directory. Safe for concurrent use; the zero Dir and a Dir
// of path "" store nothing.
type Dir struct {
	path string
	mu   sync.Mutex
	root *os.Root
	seq  atomic.Uint64
}

// New returns the directory at path ("" = none); nothing is made yet.
func New(path string) *Dir { return &Dir{path: path} }

// open returns the directory's root, made first if create; nil if there is
// none (yet).
func (d *Dir) open(create bool) (*os.Root, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.root != nil || d.path == "" {
		return d.root, nil
	}
	check := CheckOwned
	if create {
		check = Owned
	}
	if err := check(d.path); err != nil {
		if !create && errors.Is(err, fs.ErrNotExist) {
			err = nil // not made yet: nothing stored
		}
		return nil, err
	}
	root, err := os.OpenRoot(d.path)
	if err != nil {
		if !create {
			err = nil // not made yet: nothing stored
		}
		return nil, err
	}
	d.root = root
	return root, nil
}

// Read returns the content of name, false if there is none.
func (d *Dir) Read(name string) ([]byte, bool) {
	root, _ := d.open(false)
	if root == nil {
		return nil, false
	}
	data, err := root.ReadFile(name)
	return data, err == nil
}

// Write replaces name's content atomically.
func (d *Dir) Write(name string, data []byte) error {
	root, err := d.open(true)
	if root == nil {
		return err
	}
	tmp := ".tmp-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(d.seq.Add(1), 10)
	if err := root.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := root.Rename(tmp, name); err != nil {
		_ = root.Remove(tmp)
		return err
	}
	return nil
}

// Remove removes name; a missing one is not an error.
func (d *Dir) Remove(name string) {
	if root, _ := d.open(false); root != nil {
		_ = root.Remove(name)
	}
}

// Names lists the names stored (temporary files of writes in flight too).
func (d *Dir) Names() []string {
	root, _ := d.open(false)
	if root == nil {
		return nil
	}
	entries, _ := fs.ReadDir(root.FS(), ".")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
