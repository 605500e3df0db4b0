package efs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
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

// RateLimit is a client-side token bucket for one operation. PerSecond <= 0
// means unlimited.
type RateLimit struct {
	PerSecond float64
	Burst     int
}

// DefaultRateLimits returns the limits used for operations that
// Config.RateLimits does not name.
//
// EFS publishes no per-operation request rates (its API reference only warns
// that CreateAccessPoint is throttled near the access point quota), and the
// account-wide budget is shared with every other EFS client of the account.
// So the defaults are conservative: mutations 10/s (burst 20), reads 20/s
// (burst 40). At 10/s, 1,000 simultaneous DeleteVolume calls drain in about
// 100 s instead of hammering the API into throttling; server-side throttles
// that still happen are retried within the caller's deadline.
func DefaultRateLimits() map[string]RateLimit {
	return map[string]RateLimit{
		OpCreateAccessPoint:    {PerSecond: 10, Burst: 20},
		OpDeleteAccessPoint:    {PerSecond: 10, Burst: 20},
		OpDescribeAccessPoints: {PerSecond: 20, Burst: 40},
		OpDescribeFileSystems:  {PerSecond: 20, Burst: 40},
		OpDescribeMountTargets: {PerSecond: 20, Burst: 40},
	}
}

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
	limiters       map[string]*limiter // nil entry: unlimited
	baseBackoff    time.Duration
	maxBackoff     time.Duration
	attemptTimeout time.Duration
	defaultTimeout time.Duration
	observer       Observer
	log            *slog.Logger
}

// limiter is one operation's token bucket. mu serializes "reserve, judge the
// delay, maybe cancel", so that no other reservation slips in between a
// reservation and its cancellation: a canceled token then goes back in full
// instead of leaving an unused slot in the schedule. The section is a few
// arithmetic operations; nobody holds mu while waiting.
type limiter struct {
	mu sync.Mutex
	*rate.Limiter
}

// newLimiters builds one token bucket per known operation. Lookup order for
// each operation: its own key in limits, then "*", then DefaultRateLimits.
func newLimiters(limits map[string]RateLimit) map[string]*limiter {
	out := map[string]*limiter{}
	for op, def := range DefaultRateLimits() {
		rl, ok := limits[op]
		if !ok {
			if rl, ok = limits["*"]; !ok {
				rl = def
			}
		}
		if rl.PerSecond <= 0 {
			continue
		}
		out[op] = &limiter{Limiter: rate.NewLimiter(rate.Limit(rl.PerSecond), max(rl.Burst, 1))}
	}
	return out
}

// minAttemptTime is the least time a call must have left after waiting for a
// rate-limit token: enough for one EFS request and its answer (they take
// tens to hundreds of milliseconds). Capped by the attempt timeout.
const minAttemptTime = time.Second

// worthWaiting is the pacing rule for calls with a deadline: waiting delay
// for a token, with remaining time until the deadline, is worth it only if
// the time left afterwards is at least half of remaining and at least floor.
// A token that is there now (delay 0) is always taken, however short the
// deadline. Half, because the wait must not eat more time than the attempt
// (and its retries) keep: a call that waits until just before its deadline
// sends a request whose answer comes too late, the caller retries and the
// work is done twice. Failing at once instead lets the caller back off and
// come back when the bucket has drained.
func worthWaiting(delay, remaining, floor time.Duration) bool {
	if delay <= 0 {
		return true
	}
	left := remaining - delay
	return left >= remaining/2 && left >= floor
}

// reserve takes a token, or refuses. It returns the reservation to wait for
// (nil: go ahead now) and, when it refused, the delay the token would have
// needed. bounded says the deadline is the caller's: then worthWaiting
// decides; otherwise (the default timeout) the call waits as long as the
// deadline allows, like rate.Limiter.Wait.
func (l *limiter) reserve(now, deadline time.Time, bounded bool, floor time.Duration) (r *rate.Reservation, delay time.Duration, ok bool) {
	remaining := deadline.Sub(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	r = l.ReserveN(now, 1)
	if !r.OK() { // cannot happen with burst >= 1; refuse rather than wait forever
		return nil, rate.InfDuration, false
	}
	delay = r.DelayFrom(now)
	if bounded && worthWaiting(delay, remaining, floor) || !bounded && delay <= remaining {
		if delay == 0 {
			return nil, 0, true
		}
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

// call runs one EFS operation: take a token from the operation's rate limit,
// make an attempt bounded by attemptTimeout, and on a retryable failure
// (throttle, 5xx, lost connection, attempt timeout) sleep with backoff and try
// again for as long as the caller's deadline allows. There is no attempt cap
// and no retry quota: a burst of failures costs time, never a hard error, and
// when time runs out the last classified error is returned wrapped together
// with the context error. subject names the resource in error messages.
//
// Pacing: when the caller has a deadline, a token (for the first attempt or
// for a retry) is waited for only if worthWaiting says so. Otherwise the call
// fails at once, before the deadline, with ErrThrottled and without the
// context's error (the deadline has not passed), so the caller retries later
// with its own backoff instead of burning its deadline in the queue. Calls
// without a deadline wait for their token within the default timeout.
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
	floor := min(minAttemptTime, p.attemptTimeout)
	start := time.Now()
	lim := p.limiters[op]
	var last error
	inDoubt := false // some attempt's outcome is unknown
	for n := 0; ; n++ {
		if lim != nil {
			now := time.Now()
			r, delay, ok := lim.reserve(now, deadline, bounded, floor)
			if !ok {
				if !bounded {
					// The token would come after the default timeout.
					return zero, p.giveUp(ctx, op, subject, last, n, start)
				}
				return zero, p.shed(op, subject, last, n, start, delay, deadline.Sub(now), inDoubt)
			}
			if r != nil && !sleepCtx(ctx, delay) {
				r.CancelAt(time.Now()) // give the token to the calls queued behind
				return zero, p.giveUp(ctx, op, subject, last, n, start)
			}
		}
		actx, cancel := context.WithTimeout(ctx, p.attemptTimeout)
		t0 := time.Now()
		out, err := attempt(actx)
		cancel()
		took := time.Since(t0)
		if err == nil {
			p.observer.APICall(op, OutcomeOK, took)
			return out, nil
		}
		cl := classify(err)
		p.observer.APICall(op, cl.outcome, took)
		if eo, ok := p.observer.(ErrorObserver); ok {
			eo.APIError(op, errorCode(err, cl))
		}
		last = wrapError(op, subject, cl, err)
		inDoubt = inDoubt || cl.sentinel == ErrUnavailable
		if !cl.retry && (ctx.Err() == nil || cl.outcome == OutcomeClientError) {
			return zero, last // a definitive answer, or an error no retry can heal
		}
		if ctx.Err() != nil {
			return zero, p.giveUp(ctx, op, subject, last, n+1, start)
		}
		sleep := p.backoff(n)
		if time.Until(deadline) <= sleep {
			return zero, p.giveUp(ctx, op, subject, last, n+1, start)
		}
		p.observer.Retry(op)
		p.log.Debug("retrying EFS call", "op", op, "subject", subject, "attempt", n+1, "backoff", sleep, "error", last)
		if !sleepCtx(ctx, sleep) {
			return zero, p.giveUp(ctx, op, subject, last, n+1, start)
		}
	}
}

// shed builds the error for a call that refused to wait for its token
// (worthWaiting): ErrThrottled, and not the context's error, since the
// deadline has not passed. For a retry, the last attempt's error is kept;
// and if an earlier attempt's outcome is unknown (ErrUnavailable: it may have
// been applied) while the last one was a throttle (which was not), the error
// also wraps ErrUnavailable, so that callers still treat a mutation as in
// doubt.
func (p *retryPolicy) shed(op, subject string, last error, attempts int, start time.Time, delay, remaining time.Duration, inDoubt bool) error {
	why := fmt.Sprintf("next client-side rate limit token in %v, %v before the deadline",
		delay.Round(time.Millisecond), remaining.Round(time.Millisecond))
	if last == nil {
		return fmt.Errorf("%s %s: %w: not sent: %s", op, subject, ErrThrottled, why)
	}
	elapsed := time.Since(start).Round(time.Millisecond)
	p.log.Debug("giving up EFS call", "op", op, "subject", subject, "attempts", attempts, "elapsed", elapsed, "error", last, "reason", why)
	if inDoubt && !errors.Is(last, ErrUnavailable) {
		return fmt.Errorf("%w (gave up after %d attempts in %v: %w: %s; %w: an earlier attempt's outcome is unknown)",
			last, attempts, elapsed, ErrThrottled, why, ErrUnavailable)
	}
	return fmt.Errorf("%w (gave up after %d attempts in %v: %w: %s)", last, attempts, elapsed, ErrThrottled, why)
}

// giveUp builds the error for a call that ran out of time: the last
// classified error plus the context's error, so that errors.Is matches both
// the sentinel and context.DeadlineExceeded / context.Canceled. With no
// attempt made, the client-side rate limit used the time up: ErrThrottled.
func (p *retryPolicy) giveUp(ctx context.Context, op, subject string, last error, attempts int, start time.Time) error {
	ctxErr := ctx.Err()
	if last == nil {
		return fmt.Errorf("%s %s: %w: no client-side rate limit token before the deadline: %w",
			op, subject, ErrThrottled, cmp.Or(ctxErr, context.DeadlineExceeded))
	}
	if ctxErr == nil {
		// Stopping before the deadline because the next wait would pass it.
		ctxErr = context.DeadlineExceeded
	}
	elapsed := time.Since(start).Round(time.Millisecond)
	p.log.Debug("giving up EFS call", "op", op, "subject", subject, "attempts", attempts, "elapsed", elapsed, "error", last)
	return fmt.Errorf("%w (gave up after %d attempts in %v: %w)", last, attempts, elapsed, ctxErr)
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
