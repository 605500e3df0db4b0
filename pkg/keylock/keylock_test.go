package keylock

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func mustLock(t *testing.T, s *Set, keys ...string) func() {
	t.Helper()
	unlock, err := s.TryLock(keys...)
	if err != nil {
		t.Fatalf("TryLock(%q): %v", keys, err)
	}
	return unlock
}

func TestTryLockIsAllOrNothing(t *testing.T) {
	s := New()
	defer mustLock(t, s, "b")()

	_, err := s.TryLock("a", "b", "c")
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("TryLock with a held key: err = %v, want ErrBusy", err)
	}
	if !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("error %q does not name the held key", err)
	}
	// Nothing of the failed call may stay held: a and c are free.
	if got := s.Len(); got != 1 {
		t.Errorf("Len after failed TryLock = %d, want 1", got)
	}
	mustLock(t, s, "a", "c")()
}

func TestUnlockIsIdempotentAndNeverReleasesALaterHolder(t *testing.T) {
	s := New()
	first := mustLock(t, s, "k")
	first()
	first() // second call is a no-op

	second := mustLock(t, s, "k")
	first() // a stale unlock must not release the new holder
	if _, err := s.TryLock("k"); !errors.Is(err, ErrBusy) {
		t.Fatalf("k was released by a stale unlock: TryLock err = %v", err)
	}
	second()
	if got := s.Len(); got != 0 {
		t.Errorf("Len at rest = %d, want 0", got)
	}
}

func TestEmptyAndDuplicateKeys(t *testing.T) {
	tests := []struct {
		name    string
		keys    []string
		wantLen int
	}{
		{"empty keys are ignored", []string{"", "a", ""}, 1},
		{"duplicates are one key", []string{"a", "a", "b"}, 2},
		{"no keys at all", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New()
			unlock := mustLock(t, s, tt.keys...)
			if got := s.Len(); got != tt.wantLen {
				t.Errorf("Len = %d, want %d", got, tt.wantLen)
			}
			unlock()
			if got := s.Len(); got != 0 {
				t.Errorf("Len after unlock = %d, want 0", got)
			}
		})
	}
}

// TestConcurrentHoldersAreExclusive hammers a few keys from many goroutines.
// Each key has an "occupied" flag that a holder sets with a CAS: a failed
// CAS means two callers held the key at once.
func TestConcurrentHoldersAreExclusive(t *testing.T) {
	const (
		workers = 64
		rounds  = 500
		nKeys   = 5
	)
	s := New()
	var occupied [nKeys]atomic.Bool
	var acquired, busy atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				// Two keys per call, overlapping between workers.
				i, j := (w+r)%nKeys, (w+2*r+1)%nKeys
				unlock, err := s.TryLock(fmt.Sprint(i), fmt.Sprint(j))
				if err != nil {
					if !errors.Is(err, ErrBusy) {
						t.Errorf("unexpected error: %v", err)
					}
					busy.Add(1)
					continue
				}
				acquired.Add(1)
				idx := []int{i}
				if j != i {
					idx = append(idx, j)
				}
				for _, k := range idx {
					if !occupied[k].CompareAndSwap(false, true) {
						t.Errorf("key %d held twice at once", k)
					}
				}
				for _, k := range idx {
					occupied[k].Store(false)
				}
				unlock()
				unlock()
			}
		}()
	}
	wg.Wait()
	if got := s.Len(); got != 0 {
		t.Errorf("Len at rest = %d, want 0", got)
	}
	if acquired.Load() == 0 {
		t.Error("no TryLock ever succeeded")
	}
	t.Logf("acquired %d, busy %d", acquired.Load(), busy.Load())
}

func TestTableDoesNotGrowWithKeysSeen(t *testing.T) {
	s := New()
	for i := range 10000 {
		mustLock(t, s, fmt.Sprint("vol-", i), fmt.Sprint("name-", i))()
	}
	s.mu.Lock()
	n := len(s.held)
	s.mu.Unlock()
	if n != 0 {
		t.Errorf("internal table holds %d entries at rest, want 0", n)
	}
}

func BenchmarkTryLockUnlock(b *testing.B) {
	s := New()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if unlock, err := s.TryLock(fmt.Sprint(i)); err == nil {
				unlock()
			}
		}
	})
}
