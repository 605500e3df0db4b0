package plot

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestTimelineBucketsAndClamps(t *testing.T) {
	tl := NewTimeline(10*time.Second, "a", "b")
	if tl.BucketSeconds != 0.1 || len(tl.Series) != 2 || len(tl.Series[0].Counts) != 101 {
		t.Fatalf("%+v", tl)
	}
	tl.Add(0, 0)
	tl.Add(0, time.Hour) // past the end: the last bucket
	tl.Add(1, -time.Second)
	if c := tl.Series[0].Counts; c[0] != 1 || c[100] != 1 || tl.Series[1].Counts[0] != 1 {
		t.Errorf("%v %v", c, tl.Series[1].Counts)
	}
	if w := NewTimeline(time.Hour).BucketSeconds; w != 30 {
		t.Errorf("an hour in buckets of %v s, want 30", w)
	}
	svg := TimelineSVG(tl, []Event{{Seconds: 1, Kind: EventPhase, Note: "fs-1"}, {Seconds: 2, Kind: "kill"}}, TimelineText{YAxis: "requests per second"})
	if !strings.Contains(svg, "requests per second") || !strings.Contains(svg, "fs-1") || strings.Contains(svg, "driver killed") {
		t.Errorf("timeline %s", svg)
	}
}

func TestLatencyCountsOutcomes(t *testing.T) {
	l := NewLatency("op", []time.Duration{time.Millisecond, 3 * time.Millisecond, time.Second}, []string{"ok", "ok", "throttled"}, "ok", 1)
	if l.Count != 3 || l.OK != 2 || l.ByCode["throttled"] != 1 || l.P50 != 0.003 || l.Max != 1 || l.Retries != 1 {
		t.Errorf("%+v", l)
	}
	if s := HistogramSVG("op", l, Colour(7)); !strings.Contains(s, "n=3") || !strings.Contains(s, Palette[2]) {
		t.Errorf("histogram %s", s)
	}
}

// The time axis names each tick once, as a duration, whatever the run's
// length (a 0.1 s audit read "0s 0s 0s ... 0.1s").
func TestTimelineAxisLabelsAreDistinctDurations(t *testing.T) {
	label := regexp.MustCompile(`text-anchor="middle">([^<]*)</text>`)
	for _, tc := range []struct {
		total       time.Duration
		first, last string
	}{
		{100 * time.Millisecond, "0s", "100ms"},
		{350 * time.Millisecond, "0s", "300ms"},
		{10 * time.Second, "0s", "10s"},
		{30 * time.Minute, "0s", "30m"},
	} {
		tl := NewTimeline(tc.total, "ok")
		tl.Add(0, tc.total/2)
		svg := TimelineSVG(tl, nil, TimelineText{YAxis: "requests per second"})
		var ticks []string
		seen := map[string]bool{}
		for _, m := range label.FindAllStringSubmatch(svg, -1) {
			if strings.HasPrefix(m[1], "time since start") {
				continue
			}
			if seen[m[1]] {
				t.Errorf("%v: tick %q twice in %v", tc.total, m[1], ticks)
			}
			seen[m[1]] = true
			ticks = append(ticks, m[1])
		}
		if len(ticks) < 3 || ticks[0] != tc.first || !seen[tc.last] {
			t.Errorf("%v: ticks %v, want %s first and %s among them", tc.total, ticks, tc.first, tc.last)
		}
		if regexp.MustCompile(`>[^<]*\de-\d[^<]*<`).MatchString(svg) || strings.Contains(svg, "1800000000000") {
			t.Errorf("%v: a number where a duration belongs", tc.total)
		}
	}
}

func TestDurationReadsAsPeopleWriteIt(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0s", 30 * time.Minute: "30m", time.Hour: "1h", 90 * time.Minute: "1h30m",
		1500 * time.Millisecond: "1.5s", 250 * time.Millisecond: "250ms", 90 * time.Second: "1m30s", 10 * time.Minute: "10m"} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
}
