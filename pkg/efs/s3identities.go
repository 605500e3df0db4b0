package efs

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"regexp"
	"strings"
	"sync"

	"github.com/efs-csi/efs-csi-driver/pkg/statedir"
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
// file per access point (<fs>_<ap>, pkg/statedir), so that a restarted
// controller lists without reading every access point again. Several
// processes may share the directory: every file's content is the same
// whoever writes it, and a file left for a deleted access point is removed
// by the next complete listing of its file system. Names are checked as IDs
// before they are used as file names.
type s3Identities struct {
	mu   sync.Mutex
	mem  map[string]s3Identity
	dir  *statedir.Dir
	warn sync.Once // the first failed write, at Warn; later ones at Debug
	log  *slog.Logger
}

var (
	s3APIDRe = regexp.MustCompile(`^fsap-[0-9a-f]{8,40}$`)
	s3FSIDRe = regexp.MustCompile(`^fs-[0-9a-f]{8,40}$`)
)

// newS3Identities keeps identities in dir ("" = memory only), which is
// made when the first one is stored.
func newS3Identities(dir string, log *slog.Logger) *s3Identities {
	return &s3Identities{mem: map[string]s3Identity{}, dir: statedir.New(dir), log: log}
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
	data, err := json.Marshal(id)
	if err == nil {
		err = s.dir.Write(name, data)
	}
	if err != nil {
		level := slog.LevelDebug
		s.warn.Do(func() { level = slog.LevelWarn })
		s.log.Log(context.Background(), level, "S3 Files identity kept in memory only", slog.String("accessPoint", apID), slog.String("error", err.Error()))
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
	if !valid {
		return s3Identity{}, false
	}
	data, ok := s.dir.Read(name)
	if !ok || json.Unmarshal(data, &id) != nil || id.FS != fsID {
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
	if ok {
		if name, valid := identityFile(id.FS, apID); valid {
			s.dir.Remove(name)
		}
		return
	}
	// Not in memory: whichever file system's file names it.
	if !s3APIDRe.MatchString(apID) {
		return
	}
	for _, name := range s.dir.Names() {
		if strings.HasSuffix(name, "_"+apID) {
			s.dir.Remove(name)
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
	for _, name := range s.dir.Names() {
		if ap, ok := strings.CutPrefix(name, fsID+"_"); ok && !seen[ap] {
			s.dir.Remove(name)
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
