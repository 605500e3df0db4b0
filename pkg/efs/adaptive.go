package efs

import (
	"math"
	"sync"
	"time"
)

// cubic is the adaptive part of one operation's pacing: no limit while EFS
// answers, and once it throttles a rate that is cut at once and grows back
// along a CUBIC curve, as the AWS SDK's adaptive retry mode does
// (aws/retry/adaptive_ratelimit.go). The SDK's limiter is not used itself:
// it is internal to its Retryer, cannot tell a caller how long a token is
// away (deadline-aware shedding needs that), and cuts the rate again for every
// throttled answer, so a burst of 100 requests in flight that all come back
// 429 collapses it to its floor. Here a throttle cuts the rate once per
// window: answers to requests sent before the last cut do not cut again.
//
// Rates are requests per second. Safe for concurrent use.
type cubic struct {
	mu sync.Mutex
	// engaged: EFS has throttled within quiet; otherwise no limit.
	engaged      bool
	lastMax      float64   // W_max: the rate EFS sustained when it throttled
	lastThrottle time.Time // the last cut
	k            float64   // seconds for the curve to climb back to lastMax
	// ok counts successful answers, and all counts every answer, in two
	// half-second buckets (the current one starts at bucket), for the rate
	// EFS sustained; first is the first answer ever seen.
	bucket        time.Time
	first         time.Time
	okCur, okPr   int
	allCur, allPr int
}

// CUBIC constants, the SDK's: the rate after a cut is beta times the
// sustained rate, and the curve's scale is in requests/s per second cubed.
const (
	cubicBeta  = 0.7
	cubicScale = 0.4
	// cubicMinRate is the floor, so that one call every two seconds still
	// probes a throttling API.
	cubicMinRate = 0.5
	// cubicQuiet disengages the limit after this long without a throttle:
	// by then the curve is far above anything EFS accepted, so the limit only
	// costs bookkeeping, and an API that stopped throttling is not paced.
	cubicQuiet = time.Minute
	halfSecond = 500 * time.Millisecond
	minWindow  = 50 * time.Millisecond
)

// rate is the limit at now: +Inf when not engaged.
func (c *cubic) rate(now time.Time) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rateLocked(now)
}

func (c *cubic) rateLocked(now time.Time) float64 {
	if !c.engaged {
		return math.Inf(1)
	}
	since := now.Sub(c.lastThrottle)
	if since >= cubicQuiet {
		c.engaged = false
		return math.Inf(1)
	}
	t := since.Seconds() - c.k
	return max(cubicScale*t*t*t+c.lastMax, cubicMinRate)
}

// answered records the answer to an attempt whose token was granted at
// granted; it reports whether the rate was cut.
//
// A throttle cuts only if its token was granted after the last cut: tokens
// granted before it were handed out at the old rate, and their throttles
// are that cut's news, not a new one (counting them cuts the rate to its
// floor within a few round trips). Successes of such requests that arrive
// after the cut still count toward the rate EFS sustained: the first cut of
// a burst comes with the burst's first answers, before the successes, and
// is revised upwards as they arrive.
func (c *cubic) answered(granted, now time.Time, throttled bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roll(now)
	c.allCur++
	if !throttled {
		c.okCur++
		if c.engaged && granted.Before(c.lastThrottle) {
			if s := c.sustained(now); s > c.lastMax {
				c.setMax(s)
			}
		}
		return false
	}
	if c.engaged && granted.Before(c.lastThrottle) {
		return false
	}
	s := c.sustained(now)
	if c.engaged {
		s = min(s, c.rateLocked(now))
	}
	c.lastThrottle, c.engaged = now, true
	c.setMax(s)
	return true
}

// setMax sets the rate EFS sustained and the curve's time to climb back.
func (c *cubic) setMax(s float64) {
	c.lastMax = max(s, cubicMinRate)
	c.k = math.Cbrt(c.lastMax * (1 - cubicBeta) / cubicScale)
}

// sustained is the rate of successes over the window (at most the
// process's history, at least minWindow, so that the first answers of a
// burst do not read as a rate of zero). With no success in the window (a
// burst's 429s come back before its successes, which take longer) the rate
// of all answers stands in.
func (c *cubic) sustained(now time.Time) float64 {
	window := min(halfSecond+now.Sub(c.bucket), max(now.Sub(c.first), minWindow)).Seconds()
	if c.okCur+c.okPr == 0 {
		return float64(c.allCur+c.allPr) / window
	}
	return float64(c.okCur+c.okPr) / window
}

// roll moves the success buckets forward to now.
func (c *cubic) roll(now time.Time) {
	if c.first.IsZero() {
		c.first = now
	}
	switch d := now.Sub(c.bucket); {
	case d >= 2*halfSecond:
		c.bucket, c.okCur, c.okPr, c.allCur, c.allPr = now, 0, 0, 0, 0
	case d >= halfSecond:
		c.bucket, c.okPr, c.okCur, c.allPr, c.allCur = c.bucket.Add(halfSecond), c.okCur, 0, c.allCur, 0
	}
}
