package efs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"
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

// pacer is one operation's client-side pacing (docs/pacing.md):
// a gate of request slots and rate tokens, whose rate is the lower of the
// operator's ceiling and the adaptive rate (none until EFS throttles
// because of this driver's rate). With neither, a call only takes a slot.
type pacer struct {
	ceiling  RateLimit // PerSecond <= 0: none
	adaptive *delivery // nil: adaptation off
	gate     *gate
	// rtt is a moving average of successful attempts' durations, in
	// nanoseconds: what one more attempt is expected to take.
	rtt atomic.Int64
}

func newPacer(ceiling RateLimit, adaptive bool, inFlight int) *pacer {
	p := &pacer{ceiling: ceiling}
	if adaptive {
		p.adaptive = &delivery{}
	}
	p.gate = newGate(p.limit, max(inFlight, 0))
	return p
}

// limit is the rate in force at now and its burst: the operator's ceiling
// with its burst (fixed), or the adaptive rate when lower, with a burst of 1
// (the adaptive rate spaces requests evenly: a burst would find the
// server's bucket empty).
func (p *pacer) limit(now time.Time) (limit float64, burst int, fixed bool) {
	limit, burst = math.Inf(1), 1
	if p.ceiling.PerSecond > 0 {
		limit, burst, fixed = p.ceiling.PerSecond, max(p.ceiling.Burst, 1), true
	}
	if p.adaptive != nil {
		if a := p.adaptive.rate(now); a < limit {
			limit, burst, fixed = a, 1, false
		}
	}
	return limit, burst, fixed
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

// done ends an attempt that had a permit: the adaptive rate learns how it
// was answered (answered: EFS answered it, throttled: with a throttle,
// waited: it waited for its token; sentAt: when it was sent), then its
// slot goes to the next waiter.
// It says whether the adaptive limit engaged or released, and why ("":
// neither).
func (p *pacer) done(sentAt time.Time, answered, throttled, waited bool) (change string) {
	if p.adaptive != nil && answered {
		change = p.adaptive.answered(time.Now(), sentAt, throttled, waited, p.gate.busy()-1)
	}
	p.gate.release(answered && !throttled)
	return change
}

// logChange logs an adaptive limit's engaging or release: rare, and what
// explains a run's pace.
func (p *retryPolicy) logChange(op, change string) {
	if change != "" {
		p.log.Info("adaptive pacing "+change, "op", op)
	}
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
		prio := priorityOf(ctx)
		if inDoubt {
			prio = PriorityFollowUp // completing a mutation that may have been applied
		}
		now := time.Now()
		ok, wait := pc.gate.acquire(ctx, prio, bounded, pc.need(p.attemptTimeout))
		if !ok {
			p.observer.APICall(op, OutcomePaced, 0)
			if ctx.Err() != nil || !bounded {
				return zero, p.giveUp(ctx, op, subject, last, n, start, "no request slot or rate token before the deadline", inDoubt)
			}
			return zero, p.shed(op, subject, last, n, start, wait, deadline.Sub(now), inDoubt)
		}
		actx, cancel := context.WithTimeout(ctx, p.attemptTimeout)
		if n, ok := ctx.Value(requestCounterKey{}).(*atomic.Int64); ok {
			n.Add(1)
		}
		t0 := time.Now()
		out, err := attempt(actx)
		cancel()
		took := time.Since(t0)
		if err == nil {
			pc.took(took)
			p.logChange(op, pc.done(t0, true, false, wait > 0))
			p.observer.APICall(op, OutcomeOK, took)
			return out, nil
		}
		cl := p.classify(op, err)
		if cl.outcome == OutcomeClientError {
			pc.took(took) // answered, if not with success
		}
		// Every answer of EFS's, errors included, is delivery: only lost
		// connections and timeouts say nothing about the rate.
		p.logChange(op, pc.done(t0, cl.outcome == OutcomeThrottled || cl.outcome == OutcomeServerError || cl.outcome == OutcomeClientError, cl.sentinel == ErrThrottled, wait > 0))
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
			return zero, p.giveUp(ctx, op, subject, last, n+1, start, "", inDoubt)
		}
		sleep := p.backoff(n)
		if time.Until(deadline) <= sleep {
			return zero, p.giveUp(ctx, op, subject, last, n+1, start, "", inDoubt)
		}
		p.observer.Retry(op)
		p.log.Debug("retrying EFS call", "op", op, "subject", subject, "attempt", n+1, "backoff", sleep, "error", last)
		if !sleepCtx(ctx, sleep) {
			return zero, p.giveUp(ctx, op, subject, last, n+1, start, "", inDoubt)
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
// the sentinel and context.DeadlineExceeded / context.Canceled; and, if an
// earlier attempt's outcome is unknown, ErrUnavailable (a mutation stays in
// doubt for the caller). With no attempt made, client-side pacing used the
// time up: ErrPaced, with why.
func (p *retryPolicy) giveUp(ctx context.Context, op, subject string, last error, attempts int, start time.Time, why string, inDoubt bool) error {
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
	if inDoubt && !errors.Is(last, ErrUnavailable) {
		return fmt.Errorf("%w (gave up after %d attempts in %v: %w; %w: an earlier attempt's outcome is unknown)", last, attempts, elapsed, ctxErr, ErrUnavailable)
	}
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
