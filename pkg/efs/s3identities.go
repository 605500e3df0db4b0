package efs

import (
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// s3Identity is what S3 Files' listing does not show of an access point.
// A token never changes and this driver changes no S3 Files access point's
// tags (TagResource forgets them), so an identity, once read, is true for
// the access point's whole life: it may be kept across restarts.
//
// Path and POSIX ids, which listings do show, are kept too and must match
// the listing for the identity to be believed: a file left by another
// installation whose access point had the same ID (an emulator restarted
// with the same seed, say) is then read again, not trusted.
type s3Identity struct {
	FS    string            `json:"fs"`
	Token string            `json:"token"`
	Tags  map[string]string `json:"tags,omitempty"`
	Path  string            `json:"path"`
	UID   int64             `json:"uid"`
	GID   int64             `json:"gid"`
}

// matches reports whether the identity is of the access point a listing
// shows as ap (its path and POSIX ids).
func (id s3Identity) matches(ap AccessPoint) bool {
	uid, gid := int64(-1), int64(-1)
	if ap.PosixUser != nil {
		uid, gid = ap.PosixUser.UID, ap.PosixUser.GID
	}
	return id.FS == ap.FileSystemID && id.Path == ap.Path && id.UID == uid && id.GID == gid
}

// s3Identities keeps identities in memory and, with a directory, in one
// file per access point (<fs>_<ap>), written atomically, so that a
// restarted controller lists without reading every access point again.
// Several processes may share the directory: every file's content is the
// same whoever writes it, and a file left for a deleted access point is
// removed by the next complete listing of its file system. Names are
// checked as IDs before they are used as file names.
type s3Identities struct {
	mu   sync.Mutex
	mem  map[string]s3Identity
	dir  string   // "": memory only
	root *os.Root // opened (and made) at the first identity stored
	seq  atomic.Uint64
	log  *slog.Logger
}

var (
	s3APIDRe = regexp.MustCompile(`^fsap-[0-9a-f]{8,40}$`)
	s3FSIDRe = regexp.MustCompile(`^fs-[0-9a-f]{8,40}$`)
)

// newS3Identities keeps identities in dir ("" = memory only), which is
// made when the first one is stored; a directory that cannot be used is a
// warning and memory only.
func newS3Identities(dir string, log *slog.Logger) *s3Identities {
	return &s3Identities{mem: map[string]s3Identity{}, dir: dir, log: log}
}

// open returns the directory's root (made if create), nil if none.
func (s *s3Identities) open(create bool) *os.Root {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != nil || s.dir == "" {
		return s.root
	}
	if create {
		if err := os.MkdirAll(s.dir, 0o700); err != nil {
			s.log.Warn("S3 Files identities kept in memory only", slog.String("dir", s.dir), slog.String("error", err.Error()))
			s.dir = ""
			return nil
		}
	}
	if root, err := os.OpenRoot(s.dir); err == nil {
		s.root = root
	}
	return s.root
}

func identityFile(fsID, apID string) (string, bool) {
	return fsID + "_" + apID, s3FSIDRe.MatchString(fsID) && s3APIDRe.MatchString(apID)
}

func (s *s3Identities) put(apID string, id s3Identity) {
	s.mu.Lock()
	s.mem[apID] = id
	s.mu.Unlock()
	name, ok := identityFile(id.FS, apID)
	if !ok {
		return
	}
	root := s.open(true)
	if root == nil {
		return
	}
	data, err := json.Marshal(id)
	if err == nil {
		tmp := ".tmp-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(s.seq.Add(1), 10)
		if err = root.WriteFile(tmp, data, 0o600); err == nil {
			if err = root.Rename(tmp, name); err != nil {
				_ = root.Remove(tmp)
			}
		}
	}
	if err != nil {
		s.log.Debug("S3 Files identity not stored", slog.String("accessPoint", apID), slog.String("error", err.Error()))
	}
}

// get returns apID's identity (of file system fsID) from memory or its file.
func (s *s3Identities) get(fsID, apID string) (s3Identity, bool) {
	s.mu.Lock()
	id, ok := s.mem[apID]
	s.mu.Unlock()
	if ok {
		return id, ok
	}
	name, valid := identityFile(fsID, apID)
	root := s.open(false)
	if !valid || root == nil {
		return s3Identity{}, false
	}
	data, err := root.ReadFile(name)
	if err != nil || json.Unmarshal(data, &id) != nil || id.FS != fsID {
		return s3Identity{}, false
	}
	s.mu.Lock()
	s.mem[apID] = id
	s.mu.Unlock()
	return id, true
}

// forget drops apID's identity (of fsID when known).
func (s *s3Identities) forget(apID string) {
	s.mu.Lock()
	id, ok := s.mem[apID]
	delete(s.mem, apID)
	s.mu.Unlock()
	root := s.open(false)
	if root == nil {
		return
	}
	if ok {
		if name, valid := identityFile(id.FS, apID); valid {
			_ = root.Remove(name)
		}
		return
	}
	// Not in memory: whichever file system's file names it.
	if !s3APIDRe.MatchString(apID) {
		return
	}
	entries, _ := fs.ReadDir(root.FS(), ".")
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), "_"+apID) {
			_ = root.Remove(e.Name())
		}
	}
}

// forgetUnlisted drops the identities of fsID's access points that a
// complete listing (seen) did not show, in memory and on disk.
func (s *s3Identities) forgetUnlisted(fsID string, seen map[string]bool) {
	s.mu.Lock()
	for id, ident := range s.mem {
		if ident.FS == fsID && !seen[id] {
			delete(s.mem, id)
		}
	}
	s.mu.Unlock()
	root := s.open(false)
	if root == nil {
		return
	}
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return
	}
	for _, e := range entries {
		if ap, ok := strings.CutPrefix(e.Name(), fsID+"_"); ok && !seen[ap] {
			_ = root.Remove(e.Name())
		}
	}
}

func cloneIdentity(ap *AccessPoint) s3Identity {
	id := s3Identity{FS: ap.FileSystemID, Token: ap.ClientToken, Tags: maps.Clone(ap.Tags), Path: ap.Path, UID: -1, GID: -1}
	if ap.PosixUser != nil {
		id.UID, id.GID = ap.PosixUser.UID, ap.PosixUser.GID
	}
	return id
}
