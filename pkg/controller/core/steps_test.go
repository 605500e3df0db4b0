package core

import (
	"errors"
	"testing"
)

// step is an effect a scripted test expects a machine to ask for, by its
// description, and the outcome the test gives it.
type step struct {
	want string
	give Result
}

// drive runs m through steps, checking each effect it asks for (named by
// describe), then that it asks for nothing past its end.
func drive(t *testing.T, m interface {
	Next() Effect
	Step(Result)
}, describe func(Effect) string, steps []step) {
	t.Helper()
	for i, s := range steps {
		if got := describe(m.Next()); got != s.want {
			t.Fatalf("step %d: effect %q, want %q", i, got, s.want)
		}
		m.Step(s.give)
	}
	if got, ok := m.Next().(Answer); !ok || !errors.Is(got.Err, ErrStuck) {
		t.Fatalf("after its end the machine asks for %s", describe(m.Next()))
	}
}
