package efs

import (
	"testing"
	"time"

	"golang.org/x/time/rate"
)

func TestWorthWaiting(t *testing.T) {
	const s = time.Second
	tests := []struct {
		delay, remaining time.Duration
		want             bool
	}{
		{0, 100 * time.Millisecond, true},                 // a token now is always taken
		{0, 0, true},                                      // (call checks the context first)
		{time.Millisecond, 800 * time.Millisecond, false}, // below the floor after any wait
		{s, 2 * s, true},                                  // exactly half and the floor left
		{s + time.Millisecond, 2 * s, false},              // less than the floor left
		{4 * s, 10 * s, true},
		{5 * s, 10 * s, true},
		{5*s + time.Millisecond, 10 * s, false}, // less than half left
		{9 * s, 10 * s, false},                  // the stress case: token near the deadline
		{20 * s, 10 * s, false},                 // token after the deadline
		{60 * s, 120 * s, true},
	}
	for _, tt := range tests {
		if got := worthWaiting(tt.delay, tt.remaining, s); got != tt.want {
			t.Errorf("worthWaiting(%v, %v, 1s) = %v, want %v", tt.delay, tt.remaining, got, tt.want)
		}
	}
}

// reserve at fixed instants, so nothing depends on the clock: a refused
// reservation gives its token back in full, an accepted one keeps its slot,
// and unbounded calls wait up to their (default) deadline.
func TestLimiterReserve(t *testing.T) {
	l := &limiter{Limiter: rate.NewLimiter(1, 1)}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	step := func(name string, deadline time.Duration, bounded bool, wantOK bool, wantDelay time.Duration) {
		t.Helper()
		r, delay, ok := l.reserve(now, now.Add(deadline), bounded, time.Second)
		if ok != wantOK || delay != wantDelay || (r != nil) != (ok && delay > 0) {
			t.Fatalf("%s: got ok=%v delay=%v reservation=%v, want ok=%v delay=%v", name, ok, delay, r != nil, wantOK, wantDelay)
		}
	}
	step("first token, short deadline", 300*time.Millisecond, true, true, 0)
	for range 10 {
		step("short deadline, token 1s away", 300*time.Millisecond, true, false, time.Second)
	}
	step("token 1s away, 1.5s left", 1500*time.Millisecond, true, false, time.Second)
	// Had the refused reservations not been given back, the token would
	// now be 12 s away.
	step("token 1s away, 5s left", 5*time.Second, true, true, time.Second)
	step("token 2s away, 5s left", 5*time.Second, true, true, 2*time.Second)
	step("token 3s away, 5s left", 5*time.Second, true, false, 3*time.Second)
	step("no deadline, token 3s away", 2*time.Minute, false, true, 3*time.Second)
	step("no deadline, token beyond the default timeout", 3*time.Second, false, false, 4*time.Second)
	step("no deadline, token 4s away", 2*time.Minute, false, true, 4*time.Second)
}
