package controller

import (
	"context"
	"log/slog"
	"sync"
	"testing"
)

// lockProbe is a slog.Handler that notes every line written while its
// file system's lock is held, and the messages it was given.
type lockProbe struct {
	mu       sync.Mutex
	st       func() *fsState
	locked   []string
	messages []string
}

func (p *lockProbe) Enabled(context.Context, slog.Level) bool { return true }
func (p *lockProbe) WithAttrs([]slog.Attr) slog.Handler       { return p }
func (p *lockProbe) WithGroup(string) slog.Handler            { return p }

func (p *lockProbe) Handle(_ context.Context, r slog.Record) error {
	free := true
	if st := p.st(); st != nil {
		if free = st.mu.TryLock(); free {
			st.mu.Unlock()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.messages = append(p.messages, r.Message)
	if !free {
		p.locked = append(p.locked, r.Message)
	}
	return nil
}

// TestMachinesLogOutsideTheFileSystemsLock: the lines a create's or a
// delete's machine logs are written once its step has let the file
// system's lock go, so that a slow log sink never holds up the other
// calls on that file system (the lock guards memory, never I/O).
func TestMachinesLogOutsideTheFileSystemsLock(t *testing.T) {
	var svc *Service
	probe := &lockProbe{st: func() *fsState {
		if svc == nil {
			return nil
		}
		return svc.fs(testFS)
	}}
	b := newBed(t, func(c *Config) { c.Logger = slog.New(probe) })
	svc = b.svc
	id := b.mustCreate("pvc-log")
	if err := b.delete(id); err != nil {
		t.Fatal(err)
	}
	probe.mu.Lock()
	defer probe.mu.Unlock()
	deleted := 0
	for _, m := range probe.messages {
		if m == "access point deleted" {
			deleted++
		}
	}
	if deleted != 1 {
		t.Fatalf("%d lines say the access point was deleted, want 1: %q", deleted, probe.messages)
	}
	if len(probe.locked) > 0 {
		t.Fatalf("written under the file system's lock: %q", probe.locked)
	}
}

// A delete whose access point was deleted behind the controller's back
// (by hand, another replica) deletes nothing, and its log line says so:
// "access point already gone", not "access point deleted".
func TestDeleteOfAnAccessPointGoneLogsItGone(t *testing.T) {
	probe := &lockProbe{st: func() *fsState { return nil }}
	b := newBed(t, func(c *Config) { c.Logger = slog.New(probe) })
	id := b.mustCreate("pvc-gone")
	if err := b.client.DeleteAccessPoint(b.ctx(), apOf(t, id)); err != nil {
		t.Fatal(err)
	}
	if err := b.delete(id); err != nil {
		t.Fatal(err)
	}
	probe.mu.Lock()
	defer probe.mu.Unlock()
	gone, deleted := 0, 0
	for _, m := range probe.messages {
		switch m {
		case "access point already gone":
			gone++
		case "access point deleted":
			deleted++
		}
	}
	if gone != 1 || deleted != 0 {
		t.Fatalf("%d lines say the access point was already gone, %d that it was deleted; want 1 and 0: %q", gone, deleted, probe.messages)
	}
}
