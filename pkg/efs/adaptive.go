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
	// ok counts successful answers in two half-second buckets (the current
	// one starts at bucket), for the rate EFS sustained.
	bucket      time.Time
	okCur, okPr int
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

// answered records the answer to an attempt sent at sent; it reports whether
// the rate changed (a throttle that cut it).
func (c *cubic) answered(sent, now time.Time, throttled bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roll(now)
	if !throttled {
		c.okCur++
		return false
	}
	if c.engaged && sent.Before(c.lastThrottle) {
		return false // sent before the last cut: that cut already answered it
	}
	sustained := float64(c.okCur+c.okPr) / (halfSecond + now.Sub(c.bucket)).Seconds()
	if c.engaged {
		sustained = min(sustained, c.rateLocked(now))
	}
	c.lastMax = max(sustained, cubicMinRate)
	c.k = math.Cbrt(c.lastMax * (1 - cubicBeta) / cubicScale)
	c.lastThrottle, c.engaged = now, true
	return true
}

// roll moves the success buckets forward to now.
func (c *cubic) roll(now time.Time) {
	switch d := now.Sub(c.bucket); {
	case d >= 2*halfSecond:
		c.bucket, c.okCur, c.okPr = now, 0, 0
	case d >= halfSecond:
		c.bucket, c.okPr, c.okCur = c.bucket.Add(halfSecond), c.okCur, 0
	}
}
