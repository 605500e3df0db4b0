package journal

import (
	"context"
	"fmt"
	"strconv"
	"sync"
)

// Memory is a Store in this process's memory: for tests, and the state a
// File store replays its log into. Safe for concurrent use.
type Memory struct {
	mu  sync.Mutex
	m   map[Key]Entry
	seq uint64
	// hook, when set, runs before every operation with its name, so that
	// tests interleave two controllers' steps deterministically or make
	// the store fail (a non-nil error is returned instead).
	hook func(op string, key Key) error
}

// NewMemory returns an empty store.
func NewMemory() *Memory { return &Memory{m: map[Key]Entry{}} }

// SetHook installs f (nil: none); see Memory.hook.
func (s *Memory) SetHook(f func(op string, key Key) error) {
	s.mu.Lock()
	s.hook = f
	s.mu.Unlock()
}

func (s *Memory) before(op string, k Key) error {
	s.mu.Lock()
	h := s.hook
	s.mu.Unlock()
	if h == nil {
		return nil
	}
	return h(op, k)
}

func (s *Memory) Get(_ context.Context, k Key) (Entry, error) {
	if err := s.before("get", k); err != nil {
		return Entry{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[k]
	if !ok {
		return Entry{}, fmt.Errorf("%w: %s", ErrNotFound, k)
	}
	return e, nil
}

func (s *Memory) Create(_ context.Context, e Entry) (Entry, error) {
	if err := s.before("create", e.Key); err != nil {
		return Entry{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.create(e)
}

func (s *Memory) create(e Entry) (Entry, error) {
	if old, ok := s.m[e.Key]; ok {
		return old, fmt.Errorf("%w: %s", ErrExists, e.Key)
	}
	return s.put(e), nil
}

func (s *Memory) put(e Entry) Entry {
	s.seq++
	e.Version = strconv.FormatUint(s.seq, 10)
	e.Value = append([]byte(nil), e.Value...)
	s.m[e.Key] = e
	return e
}

func (s *Memory) Update(_ context.Context, e Entry) (Entry, error) {
	if err := s.before("update", e.Key); err != nil {
		return Entry{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.update(e)
}

func (s *Memory) update(e Entry) (Entry, error) {
	old, ok := s.m[e.Key]
	switch {
	case !ok:
		return Entry{}, fmt.Errorf("%w: %s", ErrNotFound, e.Key)
	case old.Version != e.Version:
		return old, fmt.Errorf("%w: %s", ErrConflict, e.Key)
	}
	return s.put(e), nil
}

func (s *Memory) Delete(_ context.Context, e Entry) error {
	if err := s.before("delete", e.Key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delete(e)
}

func (s *Memory) delete(e Entry) error {
	old, ok := s.m[e.Key]
	switch {
	case !ok:
		return nil
	case old.Version != e.Version:
		return fmt.Errorf("%w: %s", ErrConflict, e.Key)
	}
	delete(s.m, e.Key)
	return nil
}

func (s *Memory) List(_ context.Context, kind Kind, fs, index string, fn func([]Entry) error) error {
	if err := s.before("list", Key{Kind: kind, FileSystem: fs}); err != nil {
		return err
	}
	s.mu.Lock()
	var page []Entry
	for k, e := range s.m {
		if k.Kind == kind && (fs == "" || k.FileSystem == fs) && (index == "" || e.Index == index) {
			page = append(page, e)
		}
	}
	s.mu.Unlock()
	if len(page) == 0 {
		return nil
	}
	return fn(page)
}

// Len is the number of entries stored.
func (s *Memory) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func (k Key) String() string {
	return string(k.Kind) + " " + k.FileSystem + "/" + strconv.Quote(k.Name)
}
