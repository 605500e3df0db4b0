// Package keylock is a set of named try-locks: one operation per volume at a
// time, without ever waiting.
//
// The upstream driver waited up to 3 s on a per-access-point mutex and then
// gave up, leaving a goroutine blocked on the mutex that later took the lock
// and never released it. Here nothing waits: TryLock either takes every key at
// once or returns ErrBusy, so a caller can answer ABORTED immediately and the
// CO retries. A key's entry exists only while it is held, so the table is
// empty at rest and never grows with the keys it has seen.
package keylock

import (
	"errors"
	"fmt"
	"sync"
)

// ErrBusy is wrapped by TryLock's error when a key is held by someone else.
var ErrBusy = errors.New("operation pending")

// Set is a set of held keys. The zero value is not usable; call New.
type Set struct {
	mu   sync.Mutex
	held map[string]uint64 // key -> token of the TryLock call holding it
	next uint64            // last token handed out
}

// New returns an empty Set.
func New() *Set {
	return &Set{held: make(map[string]uint64)}
}

// TryLock takes every non-empty key or none, and never waits. If any key is
// held (by another call, or listed twice is fine: duplicates are one key) it
// returns an error wrapping ErrBusy that names the key. The returned unlock
// releases exactly the keys this call took; calling it again is a no-op, so
// a deferred unlock plus an early explicit one is safe, and a stale unlock
// can never release a lock taken later by someone else.
//
// Empty keys are ignored, so a caller can pass an optional second key (a
// name recovered from a tag) without checking it.
func (s *Set) TryLock(keys ...string) (unlock func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if k == "" {
			continue
		}
		if _, busy := s.held[k]; busy {
			return nil, fmt.Errorf("%w for %q", ErrBusy, k)
		}
	}
	s.next++
	token := s.next
	taken := make([]string, 0, len(keys))
	for _, k := range keys {
		if k == "" {
			continue
		}
		if _, dup := s.held[k]; dup { // listed twice in this call
			continue
		}
		s.held[k] = token
		taken = append(taken, k)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, k := range taken {
				// The token check is belt and braces: while this call holds
				// k nobody else can take it, so it is always ours here.
				if s.held[k] == token {
					delete(s.held, k)
				}
			}
		})
	}, nil
}

// Len reports how many keys are held now; 0 when no operation is running.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}
