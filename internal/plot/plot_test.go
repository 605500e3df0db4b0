package plot

import (
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
