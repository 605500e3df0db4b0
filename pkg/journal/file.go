package journal

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/statedir"
)

// File is a Store in a local file, shared by the processes of one host
// (make run, the stress tool's controllers, tests with two controller
// processes): the same semantics as the Kubernetes store, outside
// Kubernetes. It is an append-only log of writes replayed into memory;
// every operation takes an exclusive flock on a lock file beside it, reads
// what other processes appended since, checks its versions and appends.
// Versions are the log's sequence numbers, so they are unique across
// processes. The log is rewritten (compacted) when it is mostly dead
// entries; another process notices by the inode and reloads.
//
// Written by hand because no library does this as simply: bbolt and
// SQLite hold the file for one process at a time, or need cgo.
//
// The directory is made 0700 and must be a directory owned by this user
// (not a symlink): nothing read from a directory another user can write
// is trusted. Writes reach the kernel before an operation returns (a
// killed process loses nothing); they are not fsynced, so a machine crash
// can lose the last writes: use the Kubernetes store in production.
type File struct {
	mu    sync.Mutex
	dir   string
	path  string
	lock  *os.File
	f     *os.File
	ino   uint64
	off   int64 // bytes of the log applied
	lines int   // records in the log
	mem   map[Key]Entry
	seq   uint64
}

// logRecord is one line of the log.
type logRecord struct {
	Op    string `json:"op"` // "put" or "del"
	Kind  Kind   `json:"k"`
	FS    string `json:"f"`
	Name  string `json:"n"`
	Value []byte `json:"v,omitempty"`
	Index string `json:"i,omitempty"`
	Seq   uint64 `json:"s"`
}

// OpenFile opens (making it if needed) the store in dir.
func OpenFile(dir string) (*File, error) {
	if err := ownedDir(dir); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "journal.lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	s := &File{dir: dir, path: filepath.Join(dir, "journal.log"), lock: lock, mem: map[Key]Entry{}}
	if err := s.locked(func() error { return nil }); err != nil {
		lock.Close()
		return nil, err
	}
	return s, nil
}

// ownedDir makes dir 0700 if missing and checks that it is a directory
// (not a symlink) owned by this user that no one else may write.
func ownedDir(dir string) error {
	if err := statedir.Owned(dir); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// Close releases the files.
func (s *File) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		s.f.Close()
	}
	return s.lock.Close()
}

// locked runs fn holding the process mutex and the host-wide flock, with
// the in-memory state caught up with the log.
func (s *File) locked(fn func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := unix.Flock(int(s.lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("%w: flock: %v", ErrUnavailable, err)
	}
	defer unix.Flock(int(s.lock.Fd()), unix.LOCK_UN) //nolint:errcheck // closing the lock's holder releases it too
	if err := s.catchUp(); err != nil {
		return err
	}
	return fn()
}

// catchUp applies what was appended since the last call, reloading from
// the start if the log was replaced.
func (s *File) catchUp() error {
	var st unix.Stat_t
	err := unix.Stat(s.path, &st)
	switch {
	case errors.Is(err, unix.ENOENT):
		st.Ino = 0
	case err != nil:
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if s.f == nil || st.Ino != s.ino {
		if s.f != nil {
			s.f.Close()
		}
		f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			f.Close()
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		s.f, s.ino, s.off, s.lines, s.mem = f, st.Ino, 0, 0, map[Key]Entry{}
	}
	if _, err := s.f.Seek(s.off, io.SeekStart); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	r := bufio.NewReader(s.f)
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				// A writer died mid-line (writes happen under the lock we
				// hold): drop the torn tail so the next append starts clean.
				if terr := s.f.Truncate(s.off); terr != nil {
					return fmt.Errorf("%w: %v", ErrUnavailable, terr)
				}
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		var rec logRecord
		if err := json.Unmarshal(bytes.TrimSpace(line), &rec); err != nil {
			return fmt.Errorf("journal: %s at byte %d: %w", s.path, s.off, err)
		}
		s.apply(rec)
		s.off += int64(len(line))
		s.lines++
	}
}

func (s *File) apply(rec logRecord) {
	k := Key{Kind: rec.Kind, FileSystem: rec.FS, Name: rec.Name}
	if rec.Seq > s.seq {
		s.seq = rec.Seq
	}
	if rec.Op == "del" {
		delete(s.mem, k)
		return
	}
	s.mem[k] = Entry{Key: k, Value: rec.Value, Index: rec.Index, Version: strconv.FormatUint(rec.Seq, 10)}
}

// write appends rec (its Seq assigned) and applies it.
func (s *File) write(rec logRecord) (Entry, error) {
	rec.Seq = s.seq + 1
	b, err := json.Marshal(rec)
	if err != nil {
		return Entry{}, err
	}
	b = append(b, '\n')
	if _, err := s.f.Write(b); err != nil {
		// The line may be torn: the next catchUp drops it. Unknown outcome.
		return Entry{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	s.off += int64(len(b))
	s.lines++
	s.apply(rec)
	if err := s.maybeCompact(); err != nil {
		return Entry{}, err
	}
	return s.mem[Key{Kind: rec.Kind, FileSystem: rec.FS, Name: rec.Name}], nil
}

// maybeCompact rewrites the log when it holds mostly dead records.
func (s *File) maybeCompact() error {
	if s.lines < 1024 || s.lines < 4*len(s.mem) {
		return nil
	}
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil // compaction is an optimisation: the log stays valid
	}
	w := bufio.NewWriter(f)
	var n int64
	for k, e := range s.mem {
		seq, _ := strconv.ParseUint(e.Version, 10, 64)
		b, _ := json.Marshal(logRecord{Op: "put", Kind: k.Kind, FS: k.FileSystem, Name: k.Name, Value: e.Value, Index: e.Index, Seq: seq})
		w.Write(append(b, '\n')) //nolint:errcheck // Flush reports it
		n += int64(len(b) + 1)
	}
	// The highest sequence is kept (a deleted key's later Create must get a
	// newer version than any a reader holds).
	b, _ := json.Marshal(logRecord{Op: "del", Kind: "", FS: "", Name: "", Seq: s.seq})
	w.Write(append(b, '\n')) //nolint:errcheck
	n += int64(len(b) + 1)
	if err := w.Flush(); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil
	}
	if err := os.Rename(tmp, s.path); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil
	}
	f.Close()
	s.f.Close()
	// Reopen with O_APPEND.
	nf, err := os.OpenFile(s.path, os.O_RDWR|os.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		s.f = nil
		return nil
	}
	s.f, s.ino, s.off, s.lines = nf, st.Ino, n, len(s.mem)+1
	return nil
}

// put appends e's value and index under its key.
func (s *File) put(e Entry) (Entry, error) {
	return s.write(logRecord{Op: "put", Kind: e.Key.Kind, FS: e.Key.FileSystem, Name: e.Key.Name, Value: e.Value, Index: e.Index})
}

func (s *File) Get(_ context.Context, k Key) (Entry, error) {
	var e Entry
	err := s.locked(func() error {
		var ok bool
		if e, ok = s.mem[k]; !ok {
			return fmt.Errorf("%w: %s", ErrNotFound, k)
		}
		return nil
	})
	return e, err
}

func (s *File) Create(_ context.Context, e Entry) (Entry, error) {
	var out Entry
	err := s.locked(func() error {
		if old, ok := s.mem[e.Key]; ok {
			out = old
			return fmt.Errorf("%w: %s", ErrExists, e.Key)
		}
		var err error
		out, err = s.put(e)
		return err
	})
	return out, err
}

// CreateBoth creates a and b under one lock (Pairer): no other process
// reads the file between the two appends.
func (s *File) CreateBoth(_ context.Context, a, b Entry) (Entry, Entry, error) {
	var ga, gb Entry
	err := s.locked(func() error {
		for _, e := range []Entry{a, b} {
			if _, ok := s.mem[e.Key]; ok {
				return fmt.Errorf("%w: %s", ErrExists, e.Key)
			}
		}
		var err error
		if ga, err = s.put(a); err != nil {
			return err
		}
		gb, err = s.put(b)
		return err
	})
	return ga, gb, err
}

// Near is Pairer's: every two keys are in the one file.
func (s *File) Near(Key) func(Key) bool { return nil }

func (s *File) Update(_ context.Context, e Entry) (Entry, error) {
	var out Entry
	err := s.locked(func() error {
		old, ok := s.mem[e.Key]
		switch {
		case !ok:
			return fmt.Errorf("%w: %s", ErrNotFound, e.Key)
		case old.Version != e.Version:
			out = old
			return fmt.Errorf("%w: %s", ErrConflict, e.Key)
		}
		var err error
		out, err = s.put(e)
		return err
	})
	return out, err
}

func (s *File) Delete(_ context.Context, e Entry) error {
	return s.locked(func() error {
		old, ok := s.mem[e.Key]
		switch {
		case !ok:
			return nil
		case old.Version != e.Version:
			return fmt.Errorf("%w: %s", ErrConflict, e.Key)
		}
		_, err := s.write(logRecord{Op: "del", Kind: e.Key.Kind, FS: e.Key.FileSystem, Name: e.Key.Name})
		return err
	})
}

func (s *File) List(_ context.Context, kind Kind, fs, index string, fn func([]Entry) error) error {
	var page []Entry
	err := s.locked(func() error {
		for k, e := range s.mem {
			if k.Kind == kind && (fs == "" || k.FileSystem == fs) && (index == "" || e.Index == index) {
				page = append(page, e)
			}
		}
		return nil
	})
	if err != nil || len(page) == 0 {
		return err
	}
	return fn(page)
}
