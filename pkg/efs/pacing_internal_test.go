package efs

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The reservation rule: a token that is there is always taken; one that is
// not is waited for only if the time left afterwards covers an attempt
// (need); a refused reservation gives its token back in full; calls without
// a deadline of their own wait up to the default timeout.
func TestPacerReserve(t *testing.T) {
	p := newPacer(RateLimit{PerSecond: 1, Burst: 1}, false, 0)
	now := t0
	step := func(name string, deadline time.Duration, bounded bool, wantOK bool, wantDelay time.Duration) {
		t.Helper()
		r, delay, ok := p.reserve(now, now.Add(deadline), bounded, 100*time.Millisecond)
		if ok != wantOK || delay != wantDelay || (r != nil) != (ok && delay > 0) {
			t.Fatalf("%s: got ok=%v delay=%v reservation=%v, want ok=%v delay=%v", name, ok, delay, r != nil, wantOK, wantDelay)
		}
	}
	step("first token, short deadline", 50*time.Millisecond, true, true, 0)
	for range 10 {
		step("short deadline, token 1s away", 300*time.Millisecond, true, false, time.Second)
	}
	step("token 1s away, 1.05s left: no time for the attempt", 1050*time.Millisecond, true, false, time.Second)
	// Had the refused reservations not been given back, the token would
	// now be 12 s away.
	step("token 1s away, 1.2s left", 1200*time.Millisecond, true, true, time.Second)
	step("token 2s away, 5s left", 5*time.Second, true, true, 2*time.Second)
	step("no deadline, token 3s away", 2*time.Minute, false, true, 3*time.Second)
	step("no deadline, token beyond the default timeout", 3*time.Second, false, false, 4*time.Second)
}

// Without a ceiling and before any throttle, nothing is paced: an idle,
// fast API is never made to look throttled, however short the deadline.
func TestPacerWithoutThrottleNeverWaits(t *testing.T) {
	p := newPacer(RateLimit{}, true, 0)
	for i := range 10000 {
		if r, delay, ok := p.reserve(t0, t0.Add(time.Millisecond), true, time.Second); !ok || r != nil || delay != 0 {
			t.Fatalf("call %d: ok=%v delay=%v: paced without any throttle", i, ok, delay)
		}
	}
}

// The adaptive rate: unlimited until a throttle; then beta times the rate
// EFS sustained, climbing back to it after k seconds and beyond it later;
// answers to requests sent before the cut do not cut again; a minute
// without a throttle disengages it.
func TestCubicCutsOnceAndGrowsBack(t *testing.T) {
	var c cubic
	if r := c.rate(t0); !math.IsInf(r, 1) {
		t.Fatalf("rate before any throttle = %v, want +Inf", r)
	}
	// 20 successes/s for two seconds: the sustained rate.
	now := t0
	for i := range 40 {
		now = t0.Add(time.Duration(i) * 50 * time.Millisecond)
		c.answered(now, now, false)
	}
	sent := now
	now = now.Add(10 * time.Millisecond)
	if !c.answered(sent, now, true) {
		t.Fatal("the first throttle did not cut")
	}
	got := c.rate(now)
	if got < 0.7*18 || got > 0.7*22 {
		t.Fatalf("rate after the cut = %.1f, want about 0.7 x 20", got)
	}
	for range 50 { // the burst in flight comes back throttled too
		if c.answered(sent, now.Add(time.Millisecond), true) {
			t.Fatal("an answer to a request sent before the cut cut again")
		}
	}
	k := time.Duration(c.k * float64(time.Second))
	if r := c.rate(now.Add(k)); math.Abs(r-c.lastMax) > 0.01 {
		t.Errorf("rate after k = %.2f, want lastMax %.2f", r, c.lastMax)
	}
	if r := c.rate(now.Add(k / 2)); r <= got || r >= c.lastMax {
		t.Errorf("rate half way = %.2f, want between %.2f and %.2f", r, got, c.lastMax)
	}
	if r := c.rate(now.Add(k + 5*time.Second)); r <= c.lastMax {
		t.Errorf("rate 5 s after k = %.2f, want above lastMax %.2f (probing)", r, c.lastMax)
	}
	if !c.answered(now.Add(time.Second), now.Add(time.Second+time.Millisecond), true) {
		t.Error("a throttle of a request sent after the cut did not cut")
	}
	later := now.Add(2*time.Second + cubicQuiet)
	if r := c.rate(later); !math.IsInf(r, 1) {
		t.Errorf("rate a minute after the last throttle = %v, want +Inf", r)
	}
}

// A throttle among the first answers (a burst's 429s come back before its
// successes) engages a finite, positive rate, and the successes of requests
// granted before the cut that arrive after it revise the estimate upwards.
func TestCubicFirstCutIsRevisedByTheBurstsSuccesses(t *testing.T) {
	var c cubic
	c.answered(t0, t0, true)
	first := c.rate(t0)
	if math.IsInf(first, 1) || first <= 0 {
		t.Fatalf("rate after the first throttle = %v, want finite and positive", first)
	}
	for i := range 20 {
		c.answered(t0, t0.Add(time.Duration(i)*time.Millisecond), false)
	}
	if got := c.rate(t0.Add(20 * time.Millisecond)); got <= first {
		t.Errorf("rate after the burst's 20 successes = %.1f, want above the first estimate %.1f", got, first)
	}
}

// The ceiling an operator sets binds even when the adaptive rate is higher,
// and the adaptive rate binds when it is lower.
func TestPacerTakesTheLowerOfCeilingAndAdaptiveRate(t *testing.T) {
	p := newPacer(RateLimit{PerSecond: 100, Burst: 1}, true, 0)
	if _, d, _ := p.reserve(t0, t0.Add(time.Minute), true, 0); d != 0 {
		t.Fatalf("first token delay %v", d)
	}
	if _, d, _ := p.reserve(t0, t0.Add(time.Minute), true, 0); d != 10*time.Millisecond {
		t.Fatalf("ceiling 100/s: second token in %v, want 10ms", d)
	}
	p.adaptive.answered(t0, t0, true) // one answer: about 20/s sustained
	_, d, _ := p.reserve(t0, t0.Add(time.Minute), true, 0)
	if d <= 10*time.Millisecond {
		t.Fatalf("after a throttle: next token in %v, want the adaptive rate (below the ceiling of 100/s)", d)
	}
}
