package efs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Operation names: the keys of Config.RateLimits and the op passed to the Observer.
const (
	OpCreateAccessPoint    = "CreateAccessPoint"
	OpDeleteAccessPoint    = "DeleteAccessPoint"
	OpDescribeAccessPoints = "DescribeAccessPoints"
	OpDescribeFileSystems  = "DescribeFileSystems"
	OpDescribeMountTargets = "DescribeMountTargets"
)

// RateLimit is a ceiling an operator sets on one operation's request rate
// (a token bucket), for an account that other EFS clients share.
// PerSecond <= 0 means no ceiling.
type RateLimit struct {
	PerSecond float64
	Burst     int
}

// Ops are the operations the client calls, each with its own pacer.
var Ops = []string{OpCreateAccessPoint, OpDeleteAccessPoint, OpDescribeAccessPoints, OpDescribeFileSystems, OpDescribeMountTargets, OpTagResource}

// Observer receives one APICall per attempt (outcome is one of the Outcome*
// constants) and one Retry per retry scheduled. Implementations must be cheap
// and safe for concurrent use.
type Observer interface {
	APICall(op string, outcome string, d time.Duration)
	Retry(op string)
}

// ErrorObserver is what an Observer may also implement to receive, for each
// failed attempt, the error's code: the AWS error code EFS answered with
// (ThrottlingException, AccessPointNotFound, ...), else the HTTP status, else
// the outcome (a lost connection or a timeout has no code).
type ErrorObserver interface {
	APIError(op, code string)
}

type nopObserver struct{}

func (nopObserver) APICall(string, string, time.Duration) {}
func (nopObserver) Retry(string)                          {}

// retryPolicy holds what the retry loop needs; immutable after New.
type retryPolicy struct {
	pacers         map[string]*pacer
	baseBackoff    time.Duration
	maxBackoff     time.Duration
	attemptTimeout time.Duration
	defaultTimeout time.Duration
	observer       Observer
	log            *slog.Logger
	// classify tells what an attempt's error of op means (the API's codes);
	// existingID names the access point an ErrAlreadyExists error is about.
	classify   func(op string, err error) class
	existingID func(error) string
}

// pacer is one operation's client-side pacing (docs/design.md, "Pacing"):
// a bound on requests in flight, and a token bucket whose rate is the
// lower of the operator's ceiling and the adaptive rate (none until EFS
// throttles). With neither, a call only takes an in-flight slot.
type pacer struct {
	slots    chan struct{} // nil: unbounded
	ceiling  RateLimit     // PerSecond <= 0: none
	adaptive *cubic        // nil: adaptation off
	// rtt is a moving average of successful attempts' durations, in
	// nanoseconds: what one more attempt is expected to take.
	rtt atomic.Int64

	mu  sync.Mutex // serializes "set the rate, reserve, judge, maybe cancel"
	lim *rate.Limiter
}

func newPacer(ceiling RateLimit, adaptive bool, inFlight int) *pacer {
	limit := rate.Inf
	if ceiling.PerSecond > 0 {
		limit = rate.Limit(ceiling.PerSecond)
	}
	p := &pacer{ceiling: ceiling, lim: rate.NewLimiter(limit, max(ceiling.Burst, 1))}
	if inFlight > 0 {
		p.slots = make(chan struct{}, inFlight)
	}
	if adaptive {
		p.adaptive = &cubic{}
	}
	return p
}

// newPacers builds one pacer per operation of ops. An operation's ceiling
// is its own key in limits, else "*", else none.
func newPacers(ops []string, limits map[string]RateLimit, adaptive bool, inFlight int) map[string]*pacer {
	out := map[string]*pacer{}
	for _, op := range ops {
		rl, ok := limits[op]
		if !ok {
			rl = limits["*"]
		}
		out[op] = newPacer(rl, adaptive, inFlight)
	}
	return out
}

// minNeed is the least time a call must have left after waiting for a token
// when nothing has been measured yet: the floor of what one attempt needs.
const minNeed = 10 * time.Millisecond

// need is the time one more attempt is expected to take: three times the
// moving average of successful attempts (an answer slower than usual still
// arrives), at least minNeed, at most the attempt timeout.
func (p *pacer) need(attemptTimeout time.Duration) time.Duration {
	return min(max(3*time.Duration(p.rtt.Load()), minNeed), attemptTimeout)
}

// took feeds the moving average with a successful attempt's duration.
func (p *pacer) took(d time.Duration) {
	for {
		old := p.rtt.Load()
		next := int64(d)
		if old != 0 {
			next = old - old/5 + int64(d)/5
		}
		if p.rtt.CompareAndSwap(old, next) {
			return
		}
	}
}

// answered tells the adaptive rate how an attempt whose token was granted
// at granted ended.
func (p *pacer) answered(granted time.Time, throttled bool) {
	if p.adaptive != nil {
		p.adaptive.answered(granted, time.Now(), throttled)
	}
}

// acquire takes an in-flight slot, waiting as long as ctx allows (a slot
// frees when an attempt ends, which the attempt timeout bounds).
func (p *pacer) acquire(ctx context.Context) bool {
	if p.slots == nil {
		return true
	}
	select {
	case p.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (p *pacer) release() {
	if p.slots != nil {
		<-p.slots
	}
}

// reserve takes a token, or refuses. It returns the reservation to wait for
// (nil: go ahead now) and, when it refused, the delay the token would have
// needed. A token that is there now is always taken. Otherwise, with a
// deadline of the caller's (bounded), the token is waited for only if the
// time left after it still covers an attempt (need); without one (the
// default timeout), as long as the deadline allows, like rate.Limiter.Wait.
// Refusing early instead of waiting until just before the deadline matters:
// a request sent too late is answered after the caller gave up, the caller
// retries and the work is done twice.
func (p *pacer) reserve(now, deadline time.Time, bounded bool, need time.Duration) (r *rate.Reservation, delay time.Duration, ok bool) {
	limit := math.Inf(1)
	if p.ceiling.PerSecond > 0 {
		limit = p.ceiling.PerSecond
	}
	adaptiveBinds := false
	if p.adaptive != nil {
		if a := p.adaptive.rate(now); a < limit {
			limit, adaptiveBinds = a, true
		}
	}
	remaining := deadline.Sub(now)
	p.mu.Lock()
	defer p.mu.Unlock()
	if math.IsInf(limit, 1) {
		if p.lim.Limit() != rate.Inf {
			p.lim.SetLimitAt(now, rate.Inf)
		}
		return nil, 0, true
	}
	if rate.Limit(limit) != p.lim.Limit() {
		p.lim.SetLimitAt(now, rate.Limit(limit))
		// The adaptive rate spaces requests evenly (a burst would find
		// the server's bucket empty); the operator's ceiling keeps its burst.
		burst := max(p.ceiling.Burst, 1)
		if adaptiveBinds {
			burst = 1
		}
		p.lim.SetBurstAt(now, burst)
	}
	r = p.lim.ReserveN(now, 1)
	if !r.OK() { // cannot happen with burst >= 1; refuse rather than wait forever
		return nil, rate.InfDuration, false
	}
	delay = r.DelayFrom(now)
	if delay == 0 {
		return nil, 0, true
	}
	if bounded && remaining-delay >= need || !bounded && delay <= remaining {
		return r, delay, true
	}
	r.CancelAt(now)
	return nil, delay, false
}

// backoff is "full jitter": uniform in [0, min(maxBackoff, base*2^retry)].
func (p *retryPolicy) backoff(retry int) time.Duration {
	ceiling := p.baseBackoff
	for i := 0; i < retry && ceiling < p.maxBackoff; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, p.maxBackoff)
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

// call runs one EFS operation: take an in-flight slot and a token from the
// operation's pacer, make an attempt bounded by attemptTimeout, and on a
// retryable failure (throttle, 5xx, lost connection, attempt timeout) sleep
// with backoff and try again for as long as the caller's deadline allows.
// There is no attempt cap and no retry quota: a burst of failures costs
// time, never a hard error, and when time runs out the last classified error
// is returned wrapped together with the context error. subject names the
// resource in error messages.
//
// Pacing: a token that is not there now is waited for only if the time left
// afterwards still covers an attempt (pacer.reserve). Otherwise the call
// fails at once, before the deadline, with ErrPaced and without the
// context's error (the deadline has not passed), so the caller retries later
// with its own backoff instead of burning its deadline in the queue.
func call[T any](ctx context.Context, p *retryPolicy, op, subject string, attempt func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("%s %s: %w: not sent: %w", op, subject, ErrUnavailable, err)
	}
	_, bounded := ctx.Deadline()
	if !bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.defaultTimeout)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	start := time.Now()
	pc := p.pacers[op]
	var last error
	inDoubt := false // some attempt's outcome is unknown
	for n := 0; ; n++ {
		if !pc.acquire(ctx) {
			p.observer.APICall(op, OutcomePaced, 0)
			return zero, p.giveUp(ctx, op, subject, last, n, start, "no request slot free")
		}
		now := time.Now()
		r, delay, ok := pc.reserve(now, deadline, bounded, pc.need(p.attemptTimeout))
		if !ok {
			pc.release()
			p.observer.APICall(op, OutcomePaced, 0)
			if !bounded {
				return zero, p.giveUp(ctx, op, subject, last, n, start, "no rate token before the deadline")
			}
			return zero, p.shed(op, subject, last, n, start, delay, deadline.Sub(now), inDoubt)
		}
		if r != nil && !sleepCtx(ctx, delay) {
			r.CancelAt(time.Now()) // give the token to the calls queued behind
			pc.release()
			p.observer.APICall(op, OutcomePaced, 0)
			return zero, p.giveUp(ctx, op, subject, last, n, start, "no rate token before the deadline")
		}
		actx, cancel := context.WithTimeout(ctx, p.attemptTimeout)
		if n, ok := ctx.Value(requestCounterKey{}).(*atomic.Int64); ok {
			n.Add(1)
		}
		t0 := time.Now()
		out, err := attempt(actx)
		cancel()
		took := time.Since(t0)
		pc.release()
		if err == nil {
			pc.took(took)
			pc.answered(now, false)
			p.observer.APICall(op, OutcomeOK, took)
			return out, nil
		}
		cl := p.classify(op, err)
		if cl.sentinel == ErrThrottled {
			pc.answered(now, true)
		} else if cl.outcome == OutcomeClientError {
			pc.took(took) // answered, if not with success
		}
		p.observer.APICall(op, cl.outcome, took)
		if eo, ok := p.observer.(ErrorObserver); ok {
			eo.APIError(op, errorCode(err, cl))
		}
		last = p.wrapError(op, subject, cl, err)
		inDoubt = inDoubt || cl.sentinel == ErrUnavailable
		if !cl.retry && (ctx.Err() == nil || cl.outcome == OutcomeClientError) {
			return zero, last // a definitive answer, or an error no retry can heal
		}
		if ctx.Err() != nil {
			return zero, p.giveUp(ctx, op, subject, last, n+1, start, "")
		}
		sleep := p.backoff(n)
		if time.Until(deadline) <= sleep {
			return zero, p.giveUp(ctx, op, subject, last, n+1, start, "")
		}
		p.observer.Retry(op)
		p.log.Debug("retrying EFS call", "op", op, "subject", subject, "attempt", n+1, "backoff", sleep, "error", last)
		if !sleepCtx(ctx, sleep) {
			return zero, p.giveUp(ctx, op, subject, last, n+1, start, "")
		}
	}
}

// shed builds the error for a call that refused to wait for its token:
// ErrPaced, and not the context's error, since the deadline has not passed.
// For a retry, the last attempt's error is kept; and if an earlier attempt's
// outcome is unknown (ErrUnavailable: it may have been applied) while the
// last one was a throttle (which was not), the error also wraps
// ErrUnavailable, so that callers still treat a mutation as in doubt.
func (p *retryPolicy) shed(op, subject string, last error, attempts int, start time.Time, delay, remaining time.Duration, inDoubt bool) error {
	why := fmt.Sprintf("next rate token in %v, %v before the deadline",
		delay.Round(time.Millisecond), remaining.Round(time.Millisecond))
	if last == nil {
		return fmt.Errorf("%s %s: %w: %s", op, subject, ErrPaced, why)
	}
	elapsed := time.Since(start).Round(time.Millisecond)
	p.log.Debug("giving up EFS call", "op", op, "subject", subject, "attempts", attempts, "elapsed", elapsed, "error", last, "reason", why)
	if inDoubt && !errors.Is(last, ErrUnavailable) {
		return fmt.Errorf("%w (gave up after %d attempts in %v: %w: %s; %w: an earlier attempt's outcome is unknown)",
			last, attempts, elapsed, ErrPaced, why, ErrUnavailable)
	}
	return fmt.Errorf("%w (gave up after %d attempts in %v: %w: %s)", last, attempts, elapsed, ErrPaced, why)
}

// giveUp builds the error for a call that ran out of time: the last
// classified error plus the context's error, so that errors.Is matches both
// the sentinel and context.DeadlineExceeded / context.Canceled. With no
// attempt made, client-side pacing used the time up: ErrPaced, with why.
func (p *retryPolicy) giveUp(ctx context.Context, op, subject string, last error, attempts int, start time.Time, why string) error {
	ctxErr := ctx.Err()
	if last == nil {
		return fmt.Errorf("%s %s: %w: %s: %w", op, subject, ErrPaced, why, cmp.Or(ctxErr, context.DeadlineExceeded))
	}
	if ctxErr == nil {
		// Stopping before the deadline because the next wait would pass it.
		ctxErr = context.DeadlineExceeded
	}
	elapsed := time.Since(start).Round(time.Millisecond)
	p.log.Debug("giving up EFS call", "op", op, "subject", subject, "attempts", attempts, "elapsed", elapsed, "error", last)
	return fmt.Errorf("%w (gave up after %d attempts in %v: %w)", last, attempts, elapsed, ctxErr)
}

type requestCounterKey struct{}

// WithRequestCounter returns a context whose calls add each request they
// send to EFS to n: what one RPC costs the API, retries included.
func WithRequestCounter(ctx context.Context, n *atomic.Int64) context.Context {
	return context.WithValue(ctx, requestCounterKey{}, n)
}

// sleepCtx sleeps for d unless ctx ends first; it reports whether it slept.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
