package efsutils

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// CertFileName is efs-utils' CA bundle for EFS (efs-utils.crt), one of the
// image's static files: replaced at every start, as upstream does, so that
// a stale certificate left on the host by an older image heals.
const CertFileName = "efs-utils.crt"

// Dirs are where efs-utils' files live.
type Dirs struct {
	// ConfigDir is --efs-utils-config-dir-path (default /var/amazon/efs),
	// a host directory: what efs-utils writes there at run time (client
	// certificate keys) outlives the container.
	ConfigDir string
	// LegacyDir is --efs-utils-config-legacy-dir-path (default
	// /etc/amazon/efs-legacy): the host's /etc/amazon/efs, where older
	// drivers kept the configuration. When it holds an efs-utils.conf it
	// stays in use, as upstream decides, so that the tunnels of mounts made
	// by an older driver keep their configuration. "" = none.
	LegacyDir string
	// StaticFilesDir is --efs-utils-static-files-path (default
	// /etc/amazon/efs-static-files/): the files efs-utils installed in the
	// image, copied into the chosen directory at every start: its CA
	// bundle (CertFileName) replaces the one there, as upstream's does;
	// other files are copied when missing; the package's two configuration
	// files are not copied, they are written from the flags. "" or a
	// missing directory = none.
	StaticFilesDir string
	// EtcDir is where efs-utils reads its configuration,
	// /etc/amazon/efs: made a symlink to the chosen directory. A real
	// directory there is used as is (the image's or the host's own). "" =
	// no link (tests).
	EtcDir string
}

// Setup picks the configuration directory (LegacyDir if it holds an
// efs-utils.conf, else ConfigDir, or EtcDir when that is a real
// directory), links EtcDir to it, restores the static files there and
// writes conf's efs-utils.conf and s3files-utils.conf (nil: not written).
// It returns the directory chosen. It is idempotent: a second run changes
// nothing, and a file with the same content is not rewritten. A CA bundle
// conf names for the node's region that does not exist is a warning: every
// TLS mount there would fail with "Failed to find CAfile".
//
// Every write goes through an os.Root of the chosen directory, to a
// temporary file renamed into place: a reader never sees half a file, and a
// symlink planted in the directory cannot redirect a write outside it (a
// symlink named efs-utils.conf is replaced, not followed).
func Setup(d Dirs, conf Conf, log *slog.Logger) (string, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if d.ConfigDir == "" {
		return "", errors.New("efs-utils: no configuration directory")
	}
	dir, err := chooseDir(d)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("efs-utils configuration directory: %w", err)
	}
	if d.EtcDir != "" && dir != d.EtcDir {
		if err := link(d.EtcDir, dir); err != nil {
			return "", err
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", fmt.Errorf("efs-utils configuration directory: %w", err)
	}
	defer root.Close()
	if err := restoreStatic(root, d.StaticFilesDir, log); err != nil {
		return "", err
	}
	var rewritten []string
	for _, f := range []struct {
		name string
		data []byte
	}{{ConfFileName, conf.EFSUtils}, {S3FilesConfFileName, conf.S3FilesUtils}} {
		if f.data == nil {
			continue
		}
		changed, err := writeIfChanged(root, f.name, f.data, 0o644)
		if err != nil {
			return "", fmt.Errorf("write %s: %w", filepath.Join(dir, f.name), err)
		}
		if changed {
			rewritten = append(rewritten, f.name)
		}
	}
	log.Info("efs-utils configured", slog.String("dir", dir), slog.Any("rewritten", rewritten))
	if conf.CAFile != "" {
		if _, err := os.Stat(conf.CAFile); err != nil {
			log.Warn("efs-utils: the CA bundle of this region's TLS mounts is missing: they will fail",
				slog.String("file", conf.CAFile), slog.String("error", err.Error()))
		}
	}
	return dir, nil
}

func chooseDir(d Dirs) (string, error) {
	if d.EtcDir != "" {
		fi, err := os.Lstat(d.EtcDir)
		switch {
		case err == nil && fi.IsDir():
			return d.EtcDir, nil
		case err == nil && fi.Mode()&fs.ModeSymlink == 0:
			return "", fmt.Errorf("%s exists and is neither a directory nor a symlink", d.EtcDir)
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return "", err
		}
	}
	if d.LegacyDir != "" {
		if fi, err := os.Stat(filepath.Join(d.LegacyDir, ConfFileName)); err == nil && fi.Mode().IsRegular() {
			return d.LegacyDir, nil
		}
	}
	return d.ConfigDir, nil
}

// link makes path a symlink to target, replacing a symlink that points
// elsewhere atomically (a new link renamed over it).
func link(path, target string) error {
	if cur, err := os.Readlink(path); err == nil && cur == target {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp-" + randomSuffix()
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("link %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("link %s: %w", path, err)
	}
	return nil
}

// restoreStatic copies the regular files of src into root: CertFileName
// always (replacing whatever has that name, without following it; a file
// with the same content is left as is), the configuration files never
// (Setup writes them), others when root lacks them (a symlink of that name
// counts as present: it is not followed, nor replaced).
func restoreStatic(root *os.Root, src string, log *slog.Logger) error {
	if src == "" {
		return nil
	}
	ents, err := os.ReadDir(src)
	if errors.Is(err, fs.ErrNotExist) {
		log.Info("no efs-utils static files", slog.String("dir", src))
		return nil
	}
	if err != nil {
		return fmt.Errorf("efs-utils static files: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || name == ConfFileName || name == S3FilesConfFileName {
			continue
		}
		if name != CertFileName {
			if _, err := root.Lstat(name); err == nil {
				continue
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return fmt.Errorf("efs-utils static file: %w", err)
		}
		changed, err := writeIfChanged(root, name, data, 0o644)
		if err != nil {
			return fmt.Errorf("restore %s: %w", name, err)
		}
		if changed {
			log.Info("restored efs-utils static file", slog.String("file", name))
		}
	}
	return nil
}

// writeIfChanged writes data as name in root, atomically, unless name is a
// regular file holding data already.
func writeIfChanged(root *os.Root, name string, data []byte, perm os.FileMode) (bool, error) {
	if fi, err := root.Lstat(name); err == nil && fi.Mode().IsRegular() {
		if cur, err := root.ReadFile(name); err == nil && bytes.Equal(cur, data) {
			return false, nil
		}
	}
	tmp := "." + name + ".tmp-" + randomSuffix()
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return false, err
	}
	_, err = io.Copy(f, bytes.NewReader(data))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		root.Remove(tmp)
		return false, err
	}
	return true, nil
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
