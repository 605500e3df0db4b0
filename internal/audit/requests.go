package audit

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/plot"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// maxSamples bounds the request samples kept for the latency figures and
// the timeline; beyond it requests are only counted.
const maxSamples = 100_000

// sample is one EFS API attempt.
type sample struct {
	op, outcome string
	end, took   time.Duration // since the audit began
}

// recorder is the EFS clients' Observer: every attempt, its operation,
// outcome and duration, and when each listing began.
type recorder struct {
	start time.Time

	mu       sync.Mutex
	samples  []sample
	total    int
	dropped  int
	retries  int
	outcomes map[string]int
	events   []plot.Event
	// For the progress line: the step, the file systems listed and to
	// list, the pages and access points listed.
	step            string
	fsDone, fsTotal int
	pages, listed   int
	expected        int // expected "not found" answers
}

// status is what the progress line shows.
type status struct {
	step                                            string
	done, total, requests, throttled, pages, listed int
}

var (
	_ efs.Observer      = (*recorder)(nil)
	_ efs.ErrorObserver = (*recorder)(nil)
)

// outcomeExpectedNotFound is the outcome of an answer the audit expects:
// "this access point does not exist", asked of a PV's access point the
// listing does not show, is the proof of a phantom, not an error.
const outcomeExpectedNotFound = "not_found_expected"

// expectedNotFound are the (operation, error code) pairs of those answers.
var expectedNotFound = map[[2]string]bool{
	{efs.OpDescribeAccessPoints, "AccessPointNotFound"}:   true,
	{efs.OpS3GetAccessPoint, "ResourceNotFoundException"}: true,
}

func newRecorder(start time.Time) *recorder {
	return &recorder{start: start, outcomes: map[string]int{}}
}

func (r *recorder) APICall(op, outcome string, d time.Duration) {
	end := time.Since(r.start)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	r.outcomes[outcome]++
	if len(r.samples) < maxSamples {
		r.samples = append(r.samples, sample{op, outcome, end, d})
	} else {
		r.dropped++
	}
}

// APIError follows the APICall of a failed attempt: an expected "not
// found" is counted apart from the errors.
func (r *recorder) APIError(op, code string) {
	if !expectedNotFound[[2]string{op, code}] {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outcomes[efs.OutcomeClientError] == 0 {
		return
	}
	r.outcomes[efs.OutcomeClientError]--
	if r.outcomes[efs.OutcomeClientError] == 0 {
		delete(r.outcomes, efs.OutcomeClientError)
	}
	r.outcomes[outcomeExpectedNotFound]++
	r.expected++
	for i := len(r.samples) - 1; i >= 0; i-- {
		if s := &r.samples[i]; s.op == op && s.outcome == efs.OutcomeClientError {
			s.outcome = outcomeExpectedNotFound
			break
		}
	}
}

func (r *recorder) Retry(string) {
	r.mu.Lock()
	r.retries++
	r.mu.Unlock()
}

// phase marks the moment a step of the audit began.
func (r *recorder) phase(note string) {
	r.mu.Lock()
	r.events = append(r.events, plot.Event{Seconds: time.Since(r.start).Seconds(), Kind: plot.EventPhase, Note: note})
	r.mu.Unlock()
}

// page counts a listed page of n access points.
func (r *recorder) page(n int) {
	r.mu.Lock()
	r.pages++
	r.listed += n
	r.mu.Unlock()
}

// now is what the progress line shows.
func (r *recorder) now() status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return status{r.step, r.fsDone, r.fsTotal, r.total, r.outcomes[efs.OutcomeThrottled], r.pages, r.listed}
}

// timelineSeries are the timeline's lines, by outcome.
var timelineSeries = []string{"ok", "not found, as expected", "throttled", "errors"}

// figures are the requests' figures, over total.
func (r *recorder) figures(total time.Duration) Requests {
	r.mu.Lock()
	defer r.mu.Unlock()
	rq := Requests{Total: r.total, ByOutcome: maps.Clone(r.outcomes), Retries: r.retries, NotSampled: r.dropped,
		Events: slices.Clone(r.events), Timeline: plot.NewTimeline(total, timelineSeries...)}
	byOp := map[string][]sample{}
	for _, s := range r.samples {
		byOp[s.op] = append(byOp[s.op], s)
		switch s.outcome {
		case efs.OutcomeOK:
			rq.Timeline.Add(0, s.end)
		case outcomeExpectedNotFound:
			rq.Timeline.Add(1, s.end)
		case efs.OutcomeThrottled:
			rq.Timeline.Add(2, s.end)
		default:
			rq.Timeline.Add(3, s.end)
		}
	}
	for _, op := range slices.Sorted(maps.Keys(byOp)) {
		ss := byOp[op]
		ds, outs := make([]time.Duration, len(ss)), make([]string, len(ss))
		for i, s := range ss {
			ds[i], outs[i] = s.took, s.outcome
		}
		rq.Latency = append(rq.Latency, plot.NewLatency(op, ds, outs, efs.OutcomeOK, 0))
	}
	return rq
}
