package efs

import (
	"context"
	"math"
	"sync"
	"time"
)

// Priority orders the requests waiting for one operation's pacing.
type Priority int

const (
	// PriorityNew is new work: a call that has changed nothing yet.
	PriorityNew Priority = iota
	// PriorityFollowUp is a request that follows an irreversible step: the
	// read after a create that succeeded or is in doubt, a delete's
	// confirmation, the retry of a mutation whose outcome is unknown. It
	// goes before every waiting PriorityNew request and is never shed: it
	// waits for as long as its deadline allows.
	PriorityFollowUp
	numPriorities
)

type priorityKey struct{}

// WithPriority returns a context whose EFS calls wait at priority p.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

func priorityOf(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}

// gate hands out one operation's permits to send: a request slot (at most
// maxInFlight at once; 0: unbounded) and a rate token (a token bucket at the
// pacer's rate; +Inf: none). Waiters are served by priority, and in arrival
// order within one, so a follow-up read never queues behind new work.
//
// Written by hand rather than with golang.org/x/time/rate: its reservations
// are served in reservation order and cannot be reordered by priority, and
// the in-flight bound must be part of the same queue (a request that holds a
// slot while it waits for a token would block the follow-ups behind it).
type gate struct {
	rate        func(now time.Time) (limit float64, burst int, fixed bool)
	maxInFlight int

	mu       sync.Mutex
	inFlight int
	// opening is the in-flight bound while a burst opens (slow start, as
	// TCP's): startOpening after idle, one more for each request answered
	// without a throttle (so it doubles each round trip), up to
	// maxInFlight. A burst into a token bucket is then sent in steps, and
	// the bucket's first throttles are answered before most of the burst
	// is sent: the requests sent into it at once were most of what a storm
	// wasted under a bucket (86 of 102 in a run of hack/pacing-bench.sh).
	// An API that answers fast and throttles nothing costs a few round
	// trips. 0: no bound of its own (maxInFlight unbounded).
	opening  int
	lastDone time.Time // when the last permit was released
	limit    float64   // the limit tokens accrue at; +Inf: no tokens needed
	burst    float64
	fixed    bool // the limit is the operator's ceiling, not the adaptive rate
	tokens   float64
	last     time.Time
	queue    [numPriorities][]*waiter
	timer    *time.Timer
	timerAt  time.Time
}

type waiter struct {
	ch      chan struct{}
	granted bool
}

// newGate makes a gate whose limit and burst rate tells at each moment.
func newGate(rate func(time.Time) (float64, int, bool), maxInFlight int) *gate {
	g := &gate{rate: rate, maxInFlight: maxInFlight, limit: math.Inf(1)}
	if maxInFlight > startOpening {
		g.opening = startOpening
	}
	now := time.Now()
	g.setLimit(now)
	g.tokens = g.burst // a fresh bucket is full, as rate.Limiter's
	g.last = now
	return g
}

// setLimit takes the pacer's limit at now, accruing tokens at the old one up
// to now first. Under mu.
func (g *gate) setLimit(now time.Time) {
	g.accrue(now)
	limit, burst, fixed := g.rate(now)
	g.fixed = fixed
	if limit == g.limit && float64(burst) == g.burst {
		return
	}
	if math.IsInf(g.limit, 1) {
		g.tokens = 1 // from no limit: one token, then evenly spaced
	}
	g.limit, g.burst = limit, float64(max(burst, 1))
	g.tokens = min(g.tokens, g.burst)
}

func (g *gate) accrue(now time.Time) {
	if now.After(g.last) {
		if !math.IsInf(g.limit, 1) {
			g.tokens = min(g.tokens+now.Sub(g.last).Seconds()*g.limit, g.burst)
		}
		g.last = now
	}
}

// Slow start (gate.opening): the in-flight bound a burst opens with, and
// the idle time after which the next burst opens with it again (a token
// bucket refills meanwhile).
const (
	startOpening = 16
	openingIdle  = time.Second
)

// free reports whether a request may go now (tokens and slot). Under mu.
func (g *gate) free() bool {
	bound := g.maxInFlight
	if g.opening > 0 {
		bound = min(bound, g.opening)
	}
	return (math.IsInf(g.limit, 1) || g.tokens >= 1) && (g.maxInFlight <= 0 || g.inFlight < bound)
}

// reopen starts a burst's slow start again after idle. Under mu.
func (g *gate) reopen(now time.Time) {
	if g.opening > 0 && g.inFlight == 0 && !g.lastDone.IsZero() && now.Sub(g.lastDone) > openingIdle {
		g.opening = startOpening
	}
}

// take hands a permit out. Under mu, after free.
func (g *gate) take() {
	if !math.IsInf(g.limit, 1) {
		g.tokens--
	}
	g.inFlight++
}

// ahead counts the waiters that go before a new one of priority p.
func (g *gate) ahead(p Priority) int {
	n := 0
	for q := p; q < numPriorities; q++ {
		n += len(g.queue[q])
	}
	return n
}

// eta is how long a new waiter of priority p waits for its token at the
// current limit (slots not counted: one frees whenever an attempt ends).
func (g *gate) eta(p Priority) time.Duration {
	if math.IsInf(g.limit, 1) {
		return 0
	}
	need := float64(g.ahead(p)+1) - g.tokens
	if need <= 0 {
		return 0
	}
	return time.Duration(need / g.limit * float64(time.Second))
}

// acquire waits for a permit. A PriorityNew waiter with a deadline of its
// own (bounded) gives up when its time left falls below need: a request sent
// then is answered after its caller gave up, and the caller's retry does the
// work twice. Under the operator's fixed ceiling, whose wait is known, it is
// refused at once, with the wait it would have needed, when the time left
// after that wait could not cover an attempt; under the adaptive rate, which
// rises as answers arrive, it waits. Otherwise a waiter waits as long as ctx
// allows. It reports whether it got
// the permit; one that did must call release.
func (g *gate) acquire(ctx context.Context, p Priority, bounded bool, need time.Duration) (ok bool, wait time.Duration) {
	deadline, _ := ctx.Deadline()
	g.mu.Lock()
	now := time.Now()
	g.setLimit(now)
	g.reopen(now)
	if g.ahead(p) == 0 && g.free() {
		g.take()
		g.mu.Unlock()
		return true, 0
	}
	sheddable := p == PriorityNew && bounded
	wait = g.eta(p)
	if sheddable && g.fixed && deadline.Sub(now)-wait < need {
		g.mu.Unlock()
		return false, wait
	}
	w := &waiter{ch: make(chan struct{})}
	g.queue[p] = append(g.queue[p], w)
	g.schedule(now)
	g.mu.Unlock()

	var giveUp <-chan time.Time
	if sheddable {
		t := time.NewTimer(time.Until(deadline.Add(-need)))
		defer t.Stop()
		giveUp = t.C
	}
	select {
	case <-w.ch:
		return true, wait
	case <-ctx.Done():
	case <-giveUp:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.granted { // granted while giving up: hand it on
		g.inFlight--
		if !math.IsInf(g.limit, 1) {
			g.tokens = min(g.tokens+1, g.burst)
		}
		g.dispatch(time.Now())
		return false, wait
	}
	for i, x := range g.queue[p] {
		if x == w {
			g.queue[p] = append(g.queue[p][:i], g.queue[p][i+1:]...)
			break
		}
	}
	return false, wait
}

// busy is the number of permits out: requests sent and not yet done.
func (g *gate) busy() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight
}

// release gives a permit's slot back; delivered: its request was
// answered without a throttle (the opening grows).
func (g *gate) release(delivered bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inFlight--
	now := time.Now()
	if delivered && g.opening > 0 && g.opening < g.maxInFlight {
		g.opening++
	}
	g.lastDone = now
	g.dispatch(now)
}

// dispatch grants permits to the waiters, highest priority first, while
// there are permits, and arms the timer for the next token. Under mu.
func (g *gate) dispatch(now time.Time) {
	g.setLimit(now)
	for p := numPriorities - 1; p >= 0; p-- {
		for len(g.queue[p]) > 0 {
			if !g.free() {
				g.schedule(now)
				return
			}
			w := g.queue[p][0]
			g.queue[p] = g.queue[p][1:]
			g.take()
			w.granted = true
			close(w.ch)
		}
	}
}

// schedule arms the timer for when the next token accrues, if a waiter
// waits for one. Under mu.
func (g *gate) schedule(now time.Time) {
	if g.ahead(0) == 0 || math.IsInf(g.limit, 1) || g.tokens >= 1 {
		return
	}
	at := now.Add(time.Duration((1 - g.tokens) / g.limit * float64(time.Second)))
	if g.timer != nil && !g.timerAt.IsZero() && !g.timerAt.After(at) {
		return // an earlier firing will look again
	}
	g.timerAt = at
	d := at.Sub(now)
	if g.timer == nil {
		g.timer = time.AfterFunc(d, g.fire)
		return
	}
	g.timer.Reset(d)
}

func (g *gate) fire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.timerAt = time.Time{}
	g.dispatch(time.Now())
}
