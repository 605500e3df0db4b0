package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
)

// step is an effect a scripted test expects a machine to ask for, by its
// description, or a read or write of its file system's memory (named as
// script's methods say), or a line it logs ("log " and its message), and
// the outcome the test gives it.
type step struct {
	want string
	give Result
}

// script is a scripted test's steps, in order, and the memory the machine
// under test reads and changes: each call of a Memory method is the next
// step, as an effect is, and so is each line logged to its logger and each
// question to its Named (a sweep's).
type script struct {
	t     *testing.T
	steps []step
	i     int
	fs    *FS // whose allocator makes the reservations the script gives
}

// take checks that the next step is want and returns its outcome.
func (s *script) take(want string) Result {
	s.t.Helper()
	if s.i >= len(s.steps) {
		s.t.Fatalf("step %d: %q past the script's end", s.i, want)
	}
	st := s.steps[s.i]
	if st.want != want {
		s.t.Fatalf("step %d: %q, want %q", s.i, want, st.want)
	}
	s.i++
	return st.give
}

func (s *script) Answered(string) (*efs.AccessPoint, time.Time) { return s.take("answered").AP, t0 }
func (s *script) RememberAnswer(string, *efs.AccessPoint, bool, time.Time) {
	s.take("remember answer")
}
func (s *script) DropAnswer(string)                        { s.take("forget") }
func (s *script) DeleteFinished(string, time.Time) bool    { return s.take("recall").Yes }
func (s *script) FinishDelete(string, []string, time.Time) { s.take("remember") }
func (s *script) ForgetFinished([]string)                  { s.take("core.ForgetFinished") }
func (s *script) Burned(string, time.Time) bool            { return s.take("burned").Yes }
func (s *script) Candidate(_, _ string, _, _ int64, from int, _ func(int64) bool) (int64, int, error) {
	r := s.take(fmt.Sprintf("candidate from %d", from))
	return r.ID, r.N, r.Err
}

// SawToken and AddOutside change what later Candidates skip, which a
// script gives: no step.
func (s *script) SawToken(*efs.AccessPoint, string) {}
func (s *script) AddOutside(...int64)               {}
func (s *script) Upstream(string) *efs.AccessPoint  { return s.take("upstream token").AP }
func (s *script) RootNotOwned()                     { s.take("root not owned") }

// logger is the machine's logger: each line is the step "log <message>".
func (s *script) logger() *slog.Logger {
	return slog.New(lineHandler(func(r slog.Record) { s.take("log " + r.Message) }))
}

// named is a sweep's Named: each question is the step "named", answered
// Result.Yes.
func (s *script) named(string) bool { return s.take("named").Yes }

// lineHandler is a slog.Handler that passes each line to the function:
// what a test asserts of what a machine logs. The machines log with no
// With or WithGroup, which it does not keep.
type lineHandler func(slog.Record)

func (lineHandler) Enabled(context.Context, slog.Level) bool        { return true }
func (h lineHandler) Handle(_ context.Context, r slog.Record) error { h(r); return nil }
func (h lineHandler) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h lineHandler) WithGroup(string) slog.Handler                 { return h }

// Reserve gives the id the step gives (Result.ID), or its error.
func (s *script) Reserve(_, _ int64, key string, since uint64, now time.Time, _ func(int64) bool) (*gid.Reservation, error) {
	r := s.take("reserve " + key)
	if r.Err != nil {
		return nil, r.Err
	}
	return s.fs.Reserve(r.ID, r.ID, key, since, now, nil)
}
func (s *script) Listings() uint64 { return s.fs.Listings() }
func (s *script) Release(r *gid.Reservation) {
	s.take("release")
	s.fs.Release(r)
}
func (s *script) Seen(ap efs.AccessPoint, _ time.Time) {
	if ap.ID == DirStandInID(ap.ClientToken) {
		s.take("dir seen")
		return
	}
	s.take("seen " + ap.ID)
}

// Creating, CreateEnded and Gone tell this process's root removal (and
// Gone its allocator) of a create and a delete: a step each, Creating's
// and CreateEnded's named as their effects were.
func (s *script) Creating(_, _, root string) { s.take("creating " + root) }
func (s *script) CreateEnded(_ string, ap *efs.AccessPoint, _ time.Time) {
	if ap == nil {
		s.take("create ended")
		return
	}
	s.take("create ended " + ap.ID)
}
func (s *script) Gone(apID string, _ time.Time) { s.take("gone " + apID) }

// drive runs the machine start makes through steps, checking each effect
// it asks for (named by describe), each memory call and each line it logs
// (start gives it the script's memory and logger), then that it asks for
// nothing past its end.
func drive(t *testing.T, start func(*script) stepper, describe func(Effect) string, steps []step) {
	t.Helper()
	s := &script{t: t, steps: steps, fs: listedFS()}
	m := start(s)
	for s.i < len(steps) {
		e := m.Next()
		m.Step(s.take(describe(e)))
	}
	if got, ok := m.Next().(Answer); !ok || !errors.Is(got.Err, ErrStuck) {
		t.Fatalf("after its end the machine asks for %s", describe(m.Next()))
	}
}
