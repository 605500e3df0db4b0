package journaltest

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// Hints are entries as a process last saw them answered, however stale
// since: what pkg/kube's Lease store keeps of its shards, for a test's
// store to hint (journal.Hinter). Safe for concurrent use.
type Hints struct {
	mu   sync.Mutex
	seen map[journal.Key]journal.Entry
}

// Saw remembers e as k's latest known state (gone: nil e).
func (h *Hints) Saw(k journal.Key, e *journal.Entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e == nil {
		delete(h.seen, k)
		return
	}
	if h.seen == nil {
		h.seen = map[journal.Key]journal.Entry{}
	}
	c := *e
	c.Value = bytes.Clone(e.Value)
	h.seen[k] = c
}

// Hint is k as last seen.
func (h *Hints) Hint(k journal.Key) (journal.Entry, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.seen[k]
	e.Value = bytes.Clone(e.Value)
	return e, ok
}

// Hinting is a Store that hints every entry as this Hinting last saw it
// answered: give each process of a test its own over one shared store,
// and the tests meet the schedules where a hint is out of date.
type Hinting struct {
	journal.Store
	Hints
}

// NewHinting hints what it sees of s.
func NewHinting(s journal.Store) *Hinting { return &Hinting{Store: s} }

func (h *Hinting) Get(ctx context.Context, k journal.Key) (journal.Entry, error) {
	e, err := h.Store.Get(ctx, k)
	switch {
	case err == nil:
		h.Saw(k, &e)
	case errors.Is(err, journal.ErrNotFound):
		h.Saw(k, nil)
	}
	return e, err
}

func (h *Hinting) Create(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	got, err := h.Store.Create(ctx, e)
	if err == nil || errors.Is(err, journal.ErrExists) {
		h.Saw(e.Key, &got)
	}
	return got, err
}

func (h *Hinting) Update(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	got, err := h.Store.Update(ctx, e)
	switch {
	case err == nil:
		h.Saw(e.Key, &got)
	case errors.Is(err, journal.ErrNotFound):
		h.Saw(e.Key, nil)
	}
	return got, err
}

func (h *Hinting) Delete(ctx context.Context, e journal.Entry) error {
	err := h.Store.Delete(ctx, e)
	if err == nil {
		h.Saw(e.Key, nil)
	}
	return err
}
