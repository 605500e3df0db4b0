package treecopy

import (
	"encoding/binary"
	"errors"

	"golang.org/x/sys/unix"
)

// dirent is a name read from a directory, with the offset to seek to for
// the entries after it (d_off), which lets the walk close a directory and
// read on from there once it opens it again.
type dirent struct {
	name string
	off  int64
}

// readDirents reads one getdents64 batch of fd's entries ("." and ".."
// left out); eof when there are none left.
func readDirents(fd int, buf []byte) ([]dirent, bool, error) {
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if n <= 0 {
			return nil, true, nil
		}
		ents := parseDirents(buf[:n])
		if len(ents) > 0 {
			return ents, false, nil
		}
		// Only "." and "..": read on.
	}
}

// parseDirents decodes struct linux_dirent64 records:
// ino u64, off s64, reclen u16, type u8, name NUL-terminated.
func parseDirents(b []byte) []dirent {
	const nameOff = 19
	var ents []dirent
	for len(b) >= nameOff {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < nameOff || reclen > len(b) {
			break // cannot happen with a sane kernel: stop, do not panic
		}
		off := int64(binary.NativeEndian.Uint64(b[8:16]))
		name := b[nameOff:reclen]
		for i, ch := range name {
			if ch == 0 {
				name = name[:i]
				break
			}
		}
		if s := string(name); s != "." && s != ".." {
			ents = append(ents, dirent{name: s, off: off})
		}
		b = b[reclen:]
	}
	return ents
}
