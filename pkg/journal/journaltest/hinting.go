package journaltest

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// Hinting is a Store that hints (journal.Hinter) every entry as this
// Hinting last saw it answered, however stale since, as pkg/kube's Lease
// store keeps its shards: give each process of a test its own over one
// shared store, and the tests meet the schedules where a hint is out of
// date.
type Hinting struct {
	journal.Store

	mu   sync.Mutex
	seen map[journal.Key]journal.Entry
}

// NewHinting hints what it sees of s.
func NewHinting(s journal.Store) *Hinting {
	return &Hinting{Store: s, seen: map[journal.Key]journal.Entry{}}
}

// saw remembers e as k's latest known state (gone: nil e).
func (h *Hinting) saw(k journal.Key, e *journal.Entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e == nil {
		delete(h.seen, k)
		return
	}
	c := *e
	c.Value = bytes.Clone(e.Value)
	h.seen[k] = c
}

// Hint is k as last seen.
func (h *Hinting) Hint(k journal.Key) (journal.Entry, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.seen[k]
	e.Value = bytes.Clone(e.Value)
	return e, ok
}

func (h *Hinting) Get(ctx context.Context, k journal.Key) (journal.Entry, error) {
	e, err := h.Store.Get(ctx, k)
	switch {
	case err == nil:
		h.saw(k, &e)
	case errors.Is(err, journal.ErrNotFound):
		h.saw(k, nil)
	}
	return e, err
}

func (h *Hinting) Create(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	got, err := h.Store.Create(ctx, e)
	if err == nil || errors.Is(err, journal.ErrExists) {
		h.saw(e.Key, &got)
	}
	return got, err
}

func (h *Hinting) Update(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	got, err := h.Store.Update(ctx, e)
	switch {
	case err == nil:
		h.saw(e.Key, &got)
	case errors.Is(err, journal.ErrNotFound):
		h.saw(e.Key, nil)
	}
	return got, err
}

func (h *Hinting) Delete(ctx context.Context, e journal.Entry) error {
	err := h.Store.Delete(ctx, e)
	if err == nil {
		h.saw(e.Key, nil)
	}
	return err
}
