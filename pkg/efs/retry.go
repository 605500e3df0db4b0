package efs

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
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

type nopObserver struct{}

func (nopObserver) APICall(string, string, time.Duration) {}
func (nopObserver) Retry(string)                          {}

// retryPolicy holds what the retry loop needs; immutable after New.
type retryPolicy struct {
	limiters       map[string]*rate.Limiter // nil entry: unlimited
	baseBackoff    time.Duration
	maxBackoff     time.Duration
	attemptTimeout time.Duration
	defaultTimeout time.Duration
	observer       Observer
	log            *slog.Logger
}

// newLimiters builds one token bucket per known operation. Lookup order for
// each operation: its own key in limits, then "*", then DefaultRateLimits.
func newLimiters(limits map[string]RateLimit) map[string]*rate.Limiter {
	out := map[string]*rate.Limiter{}
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
		out[op] = rate.NewLimiter(rate.Limit(rl.PerSecond), max(rl.Burst, 1))
	}
	return out
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

// call runs one EFS operation: wait for the operation's rate limit, make an
// attempt bounded by attemptTimeout, and on a retryable failure (throttle,
// 5xx, lost connection, attempt timeout) sleep with backoff and try again for
// as long as the caller's deadline allows. There is no attempt cap and no
// retry quota: a burst of failures costs time, never a hard error, and when
// time runs out the last classified error is returned wrapped together with
// the context error. subject names the resource in error messages.
func call[T any](ctx context.Context, p *retryPolicy, op, subject string, attempt func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("%s %s: %w: not sent: %w", op, subject, ErrUnavailable, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.defaultTimeout)
		defer cancel()
	}
	start := time.Now()
	limiter := p.limiters[op]
	var last error
	for n := 0; ; n++ {
		if limiter != nil {
			if err := limiter.Wait(ctx); err != nil {
				// Wait fails at once when the wait would pass the deadline.
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
		last = wrapError(op, subject, cl, err)
		if !cl.retry && (ctx.Err() == nil || cl.outcome == OutcomeClientError) {
			return zero, last // a definitive answer, or an error no retry can heal
		}
		if ctx.Err() != nil {
			return zero, p.giveUp(ctx, op, subject, last, n+1, start)
		}
		sleep := p.backoff(n)
		if deadline, _ := ctx.Deadline(); time.Until(deadline) <= sleep {
			return zero, p.giveUp(ctx, op, subject, last, n+1, start)
		}
		p.observer.Retry(op)
		p.log.Debug("retrying EFS call", "op", op, "subject", subject, "attempt", n+1, "backoff", sleep, "error", last)
		if !sleepCtx(ctx, sleep) {
			return zero, p.giveUp(ctx, op, subject, last, n+1, start)
		}
	}
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
