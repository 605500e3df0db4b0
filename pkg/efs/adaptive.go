package efs

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// delivery is the adaptive part of one operation's pacing: no limit while
// EFS answers, and once EFS throttles because of this driver's own rate, a
// rate of gain times what EFS has been delivering (the answers that were not
// throttled over the last second) plus a small probe. It never paces below
// what EFS delivered, so throttling that does not come from this rate (EFS's
// own noise, another client spending the account's budget at random) cannot
// drive it down, as random loss collapses a loss-based TCP sender and does
// not collapse BBR, which paces at the delivery rate it measures.
//
// Rate-caused throttling is told from the rest in two ways:
//   - it engages only when the throttled share of the last engageSample
//     requests sent is high (engageShare above the learned noise), with
//     at least engageThrottles throttles, which a burst overrunning a
//     token bucket gives at once and random 429s practically never do
//     (issue 30):
//   - the share is of requests sent, those still in flight counting as
//     not throttled: a throttle is answered at once, a success after
//     EFS's work, so the first answers to a burst are mostly its few
//     random throttles (5 of the first 6 answers to 100 requests at 5%),
//     while the requests that overran a bucket are most of those sent;
//   - the sample is not small: 5 throttles of 25 requests (a second of a
//     slow operation's answers, the old test) happen at random at 5% once
//     in 140 samples; 12 of 60 (the likeliest the new test allows) once
//     in 28,000, 20 of 100 once in 10^7. It reaches back historyLen at
//     most;
//   - engaged, each time the rate sent has fallen by a fifth (a second
//     apart at least), it checks whether slowing down helped: throttling
//     that this driver's rate causes falls to the share its own pace
//     causes (paceShare: it sends gain x what gets through), while random
//     throttling keeps its share and delivers less as less is sent. If
//     slowing down did not help, by at least engageThrottles throttles of
//     the last second, the limit is released and the share is remembered
//     as noise for noiseMemory.
//
// Engaged, the pace probes (gain x delivered + probe) only one second in
// probeEvery, the first from engaging; in the others it cruises at the
// most EFS delivered in a second of the last probeEvery, which a bucket's
// rate bounds: the probe's overshoot is throttled by a bucket, and paid
// every second it was most of the requests wasted after the burst (issue
// 47: 3 of 23 a second under a bucket of 20/s). A cruise never paces
// below the last second's deliveries, and random throttling cannot lower
// it between probes; a cruise second whose throttled share is more than
// the probe's overshoot explains (foreignMargin above it: a bucket whose
// rate fell, or throttles this rate does not cause) paces as a probe,
// which follows a falling bucket down at once and leaves the rest to the
// release test.
//
// A share close to the noise for calmFor, with no request waiting for its
// token, also releases it: demand fell under the budget.
//
// Two drivers sharing one bucket use it together, without a storm of
// throttles, but not fairly: a pace proportional to each one's deliveries
// keeps whatever split they start with, and one paced evenly above the
// bucket's rate keeps it empty at the instants the other's requests
// arrive, so a driver that came later can starve at a low rate. The
// constant probe only slowly counters that (docs/pacing.md).
//
// The AWS SDK's adaptive limiter (aws/retry/adaptive_ratelimit.go) is not
// used: it is internal to its Retryer, cannot say how far a token is (the
// gate needs that), and cuts its rate on every throttle, which is the
// collapse above.
//
// Rates are requests per second. Safe for concurrent use.
type delivery struct {
	mu    sync.Mutex
	win   window
	first time.Time // the first answer
	// engaged: the limit is on. testAt, sent0 and deliv0 are the moment,
	// and the rates sent and delivered over the second before it, that the
	// next test of whether slowing down helps compares with (sent0 0: to
	// be taken a second after testAt).
	engaged bool
	testAt  time.Time
	// engagedAt: when the limit engaged; an answer to a request sent
	// since is counted apart (rate).
	engagedAt time.Time
	sent0     float64
	deliv0    float64
	// calmSince starts the run of answers with a share close to the noise,
	// and no request waiting for its token, that releases the limit after
	// calmFor.
	calmSince time.Time
	// noise is a throttled share that slowing down did not reduce, learned
	// at noiseAt.
	noise   float64
	noiseAt time.Time
}

const (
	// deliveryGain and deliveryProbe: the pace is gain x delivered + probe.
	deliveryGain  = 1.1
	deliveryProbe = 1.0
	// engageShare, engageSample and engageThrottles: the throttled share
	// (above the learned noise) of the last engageSample requests sent,
	// and the throttles among them, that engage the limit.
	engageShare     = 0.2
	engageSample    = 100
	engageThrottles = 12
	// releaseShare and calmFor: a share less than this above the noise for
	// this long, with no request waiting for its token, releases the limit.
	releaseShare = 0.08
	calmFor      = 3 * time.Second
	// slowedTo, keptDelivery and foreignMargin: the test of whether slowing
	// down helped runs when the rate sent has fallen to slowedTo of the
	// reference; it did not if less than keptDelivery of the reference's
	// deliveries got through and the share stayed more than foreignMargin
	// above paceShare.
	slowedTo      = 0.8
	keptDelivery  = 0.9
	foreignMargin = 0.1
	// noiseMemory is how long a learned noise share is kept.
	noiseMemory = 2 * time.Minute
	// probeEvery: engaged, the pace is gain x delivered + probe in one
	// second of probeEvery (the first, from engaging), and the most
	// delivered in a second of the last probeEvery in the others.
	probeEvery = 4
	// cruiseGain: the cruise's pace over the most delivered, which a
	// random 5% of throttles (EFS's noise, no token taken) would erode.
	cruiseGain = 1.05
	// minRate is the floor, so that a request every two seconds still
	// probes an API that throttles everything.
	minRate = 0.5
)

// rate is the limit at now: +Inf when not engaged. In the process's first
// second the deliveries are counted over the whole second: a burst's first
// answers then read as a low rate, the cautious side.
//
// The answers to requests sent before the limit engaged (the burst that
// engaged it) and those sent since are not added up: the larger of the two
// counts. A token bucket's burst passes more than its rate, and its 50 at
// once then 50/s, added, read as 100/s for the limit's first second,
// twice the bucket's rate: a storm of throttles (issue 30).
func (d *delivery) rate(now time.Time) float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.engaged {
		return math.Inf(1)
	}
	d.win.roll(now)
	all, thr := d.win.sums()
	ok := max(all-d.win.postSum, d.win.postSum)
	span := windowLen
	if now.Sub(d.first) >= windowLen {
		span = d.win.span(now)
	}
	deliv := float64(ok) / span.Seconds()
	var r float64
	probe := deliveryGain*deliv + deliveryProbe
	// The throttled share of the last second, against what a pace of
	// probe's overshoot explains (as the release test in answered).
	share, paceShare := 0.0, 1-deliv/probe
	if all+thr > 0 {
		share = float64(thr) / float64(all+thr)
	}
	if probing := int(now.Sub(d.engagedAt)/windowLen)%probeEvery == 0; probing || share > d.noise+paceShare+foreignMargin {
		// Probing, or a share more than the probe's overshoot explains:
		// a bucket whose rate fell (followed down at once), or throttles
		// that this rate does not cause (left to the release test).
		r = probe
	} else {
		// Cruising: at the most EFS delivered in a second of the last
		// probeEvery (the probe's gain found it), no more: a pace above
		// a bucket's rate is throttled, and those are requests wasted
		// (issue 47: 3 of 23 a second under a bucket of 20/s).
		// Only seconds since engaging: one before held the burst, and
		// a bucket's burst passes more than its rate.
		r = cruiseGain * max(deliv, d.win.maxDelivered(min(probeEvery, int(now.Sub(d.engagedAt)/windowLen)-1)))
	}
	r = max(r, minRate)
	// A second in which the driver sent under the pace it had (a process
	// starved of CPU, demand that paused) says nothing about what EFS lets
	// through: the pace does not fall on it (BBR's app-limited samples).
	// A bucket whose rate falls is seen while the pace is used up.
	if mean, top := d.win.paces(); float64(all+thr)/span.Seconds() < slowedTo*mean {
		r = max(r, top)
	}
	d.win.setPace(r)
	return r
}

// answered records one answer at now; throttled: EFS answered that it
// throttled the request; waited: the request waited for its rate token;
// pending: the operation's other requests sent and not answered yet;
// sentAt: when the request answered was sent. It says whether the answer
// engaged or released the limit, and why, for the log ("": neither).
func (d *delivery) answered(now, sentAt time.Time, throttled, waited bool, pending int) (change string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.first.IsZero() {
		d.first = now
	}
	d.win.roll(now)
	d.win.add(throttled, d.engaged && !sentAt.Before(d.engagedAt))
	ok, thr := d.win.sums()
	share := float64(thr) / float64(ok+thr)
	if !d.noiseAt.IsZero() && now.Sub(d.noiseAt) > noiseMemory {
		d.noise, d.noiseAt = 0, time.Time{}
	}
	// The rates of the test are over the history there is.
	span := min(max(now.Sub(d.first), bucketLen), d.win.span(now)).Seconds()
	sent, deliv := float64(ok+thr)/span, float64(ok)/span
	if !d.engaged {
		// Of the last requests sent, not of those answered (see delivery).
		pending = max(pending, 0)
		lok, lthr := d.win.recent(engageSample - pending)
		n := lok + lthr + pending
		if throttled && lthr >= engageThrottles && float64(lthr)/float64(n) >= d.noise+engageShare {
			// The test's reference is taken a second later: what was
			// sent and delivered before held a burst, and a token
			// bucket's burst delivers more than its rate.
			d.engaged, d.testAt, d.sent0, d.deliv0 = true, now, 0, 0
			d.engagedAt = now
			d.win.clearPaces()
			d.win.clearPost()
			d.calmSince = time.Time{}
			return fmt.Sprintf("engaged: %d of the last %d requests throttled (%d of them still in flight)", lthr, n, pending)
		}
		return ""
	}
	switch {
	case share >= d.noise+releaseShare || waited:
		d.calmSince = time.Time{}
	case d.calmSince.IsZero():
		d.calmSince = now
	case now.Sub(d.calmSince) >= calmFor:
		d.engaged = false
		return fmt.Sprintf("released: throttled share %.2f, within %.2f of the noise for %v", share, releaseShare, calmFor)
	}
	if now.Sub(d.testAt) < windowLen {
		return ""
	}
	if d.sent0 == 0 {
		d.testAt, d.sent0, d.deliv0 = now, sent, deliv
		return ""
	}
	if sent > slowedTo*d.sent0 {
		return ""
	}
	// Noise needs as much evidence as engaging did: a few answers (a
	// starved process's) say nothing.
	paceShare := 1 - deliv/(deliveryGain*deliv+deliveryProbe)
	if thr >= engageThrottles && share > paceShare+foreignMargin && deliv < keptDelivery*d.deliv0 {
		d.noise, d.noiseAt = share, now
		d.engaged = false
		return fmt.Sprintf("released: sending %.0f/s instead of %.0f/s left the throttled share at %.2f, now taken as noise", sent, d.sent0, share)
	}
	d.testAt, d.sent0, d.deliv0 = now, sent, deliv
	return ""
}

// window counts answers in buckets of bucketLen over the last historyLen,
// and sums them over the last windowLen.
type window struct {
	start    time.Time // start of the current bucket
	cur      int
	ok, thr  [historyBuckets]int
	okSum    int // over the last windowBuckets buckets
	thrSum   int
	hasStart bool
	// post counts the answers in ok to requests sent after the limit
	// engaged; postSum over the last windowBuckets buckets.
	post    [historyBuckets]int
	postSum int
	// pace is the last pace given in each bucket (0: none).
	pace [historyBuckets]float64
}

const (
	windowLen      = time.Second
	windowBuckets  = 10
	bucketLen      = windowLen / windowBuckets
	historyLen     = 5 * time.Second
	historyBuckets = int(historyLen / bucketLen)
)

// roll moves the window forward to now, emptying the buckets it passes.
func (w *window) roll(now time.Time) {
	if !w.hasStart {
		w.start, w.hasStart = now, true
		return
	}
	steps := int(now.Sub(w.start) / bucketLen)
	if steps <= 0 {
		return
	}
	if steps >= historyBuckets {
		*w = window{start: now, hasStart: true}
		return
	}
	for range steps {
		// The oldest bucket of the last second leaves the sums; the
		// oldest of the history is emptied for the new one.
		leaving := (w.cur - (windowBuckets - 1) + historyBuckets) % historyBuckets
		w.okSum -= w.ok[leaving]
		w.thrSum -= w.thr[leaving]
		w.postSum -= w.post[leaving]
		w.cur = (w.cur + 1) % historyBuckets
		w.ok[w.cur], w.thr[w.cur], w.post[w.cur], w.pace[w.cur] = 0, 0, 0, 0
	}
	w.start = w.start.Add(time.Duration(steps) * bucketLen)
}

// add counts an answer; post: to a request sent after the limit engaged.
func (w *window) add(throttled, post bool) {
	if throttled {
		w.thr[w.cur]++
		w.thrSum++
		return
	}
	w.ok[w.cur]++
	w.okSum++
	if post {
		w.post[w.cur]++
		w.postSum++
	}
}

// setPace records the pace given now (after roll).
func (w *window) setPace(r float64) { w.pace[w.cur] = r }

// clearPaces forgets the paces given.
func (w *window) clearPaces() { w.pace = [historyBuckets]float64{} }

// paces is the mean and the largest of the paces given over the last
// windowBuckets buckets, those in which one was given.
func (w *window) paces() (mean, top float64) {
	n := 0
	for i := range windowBuckets {
		if p := w.pace[(w.cur-i+historyBuckets)%historyBuckets]; p > 0 {
			mean, top, n = mean+p, max(top, p), n+1
		}
	}
	if n == 0 {
		return 0, 0
	}
	return mean / float64(n), top
}

// maxDelivered is the most answers that were not throttles in one of the
// last n full seconds before the current one (buckets of windowBuckets,
// back from the last second's; n+1 seconds at most fit the history), per
// second. As the last second's (delivery.rate), the answers to requests
// sent before the limit engaged and those sent since are not added up.
func (w *window) maxDelivered(n int) float64 {
	n = min(n, historyBuckets/windowBuckets-1) // n < 1: none, 0
	best := 0
	for k := 1; k <= n; k++ {
		ok, post := 0, 0
		for i := range windowBuckets {
			b := (w.cur - k*windowBuckets - i + 2*historyBuckets) % historyBuckets
			ok, post = ok+w.ok[b], post+w.post[b]
		}
		best = max(best, ok-post, post)
	}
	return float64(best) / windowLen.Seconds()
}

// clearPost counts every answer so far as to a request sent before the
// limit engaged.
func (w *window) clearPost() { w.post, w.postSum = [historyBuckets]int{}, 0 }

func (w *window) sums() (ok, thr int) { return w.okSum, w.thrSum }

// recent sums the answers of the most recent buckets, back from the
// current one, until they hold at least n answers or the history ends.
func (w *window) recent(n int) (ok, thr int) {
	for i := range historyBuckets {
		if ok+thr >= n {
			break
		}
		b := (w.cur - i + historyBuckets) % historyBuckets
		ok, thr = ok+w.ok[b], thr+w.thr[b]
	}
	return ok, thr
}

// span is the time the window's buckets cover at now: the full buckets and
// the current one's part (dividing by windowLen instead would read a steady
// rate as up to a tenth lower, and pacing at that would slowly collapse).
func (w *window) span(now time.Time) time.Duration {
	return (windowBuckets-1)*bucketLen + max(now.Sub(w.start), 0)
}
