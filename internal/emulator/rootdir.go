package emulator

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Each file system is the directory DataDir/<fs-id>. An access point's root
// directory is created below it, as EFS does on first mount, when
// CreationInfo is given: missing parents 0755 owned by the emulator's user,
// the leaf owned and moded as CreationInfo says. An existing directory is
// left as it is.
//
// Every access goes through an os.Root opened on the file system directory,
// so neither the path (validatePath already forbids "." and ".." components)
// nor a symbolic link planted inside the file system can reach outside it.

const dirPerm = 0o755

func mkdirFileSystem(dataDir, id string) error {
	return os.MkdirAll(filepath.Join(dataDir, id), dirPerm)
}

// modeOf turns 3 or 4 octal digits into an os.FileMode, special bits included.
func modeOf(perm string) os.FileMode {
	v, _ := strconv.ParseUint(perm, 8, 32) // validated as ^[0-7]{3,4}$
	m := os.FileMode(v & 0o777)
	if v&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if v&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if v&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}

// makeRootDir creates ap's root directory if it is missing. Failures (a file
// in the way, a link leading out) are logged, not answered: EFS itself only
// creates the directory when a client mounts, and the mount is what fails.
func (s *state) makeRootDir(ap *accessPointRec) {
	if ap.CreationInfo == nil || ap.Path == "/" {
		return
	}
	if err := makeRootDir(filepath.Join(s.dataDir, ap.FileSystemID), ap.Path, ap.CreationInfo); err != nil {
		s.log.Warn("access point root directory not created", "accessPoint", ap.ID, "path", ap.Path, "err", err)
	}
}

func makeRootDir(fsDir, path string, ci *creationInfo) error {
	if err := os.MkdirAll(fsDir, dirPerm); err != nil {
		return err
	}
	root, err := os.OpenRoot(fsDir)
	if err != nil {
		return err
	}
	defer root.Close()
	rel := strings.TrimPrefix(path, "/")
	if parent := filepath.Dir(rel); parent != "." {
		if err := root.MkdirAll(parent, dirPerm); err != nil {
			return err
		}
	}
	switch err := root.Mkdir(rel, 0o700); {
	case errors.Is(err, fs.ErrExist):
		return nil // exists: CreationInfo applies to missing directories only
	case err != nil:
		return err
	}
	// Change owner and mode through the open directory, not by name, so a
	// rename or a link swapped in meanwhile cannot redirect them.
	d, err := root.Open(rel)
	if err != nil {
		return err
	}
	defer d.Close()
	// Chown first (it may clear set-ID bits), then the mode, which is applied
	// even when an unprivileged emulator may not give the directory away.
	chownErr := d.Chown(int(ci.OwnerUid), int(ci.OwnerGid))
	return errors.Join(chownErr, d.Chmod(modeOf(ci.Permissions)))
}
