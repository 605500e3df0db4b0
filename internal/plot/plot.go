// Package plot draws the reports' charts as inline SVG (no script, nothing
// fetched, so a page opens anywhere, offline) from plain figures: latency
// distributions over 1-2-5 buckets with their percentiles, and counts per
// time bucket, one line per series, with moments marked. The stress tool's
// report (internal/stress/report) and the cluster audit's (internal/audit)
// draw the same charts with it.
package plot

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// Latency summarises one kind of call: counts, outcomes, percentiles and
// a histogram.
type Latency struct {
	Name      string         `json:"name"`
	Count     int            `json:"count"`
	OK        int            `json:"ok"`
	Retries   int            `json:"retries"`
	ByCode    map[string]int `json:"byCode"`
	P50       float64        `json:"p50Seconds"`
	P95       float64        `json:"p95Seconds"`
	P99       float64        `json:"p99Seconds"`
	Max       float64        `json:"maxSeconds"`
	Mean      float64        `json:"meanSeconds"`
	Histogram []Bucket       `json:"histogram"`
}

// Bucket counts latencies up to Le seconds (and above the previous bucket).
type Bucket struct {
	Le    float64 `json:"le"` // +Inf is written as 0 and labelled "more"
	Count int     `json:"count"`
}

// Event is a moment on the timeline.
type Event struct {
	Seconds float64 `json:"seconds"`
	Kind    string  `json:"kind"`
	Note    string  `json:"note,omitempty"`
}

// EventPhase is the kind of Event drawn as a labelled full-height line; any
// other kind is a tick under the top edge.
const EventPhase = "phase"

// Timeline counts answers per time bucket, by series.
type Timeline struct {
	BucketSeconds float64  `json:"bucketSeconds"`
	Series        []Series `json:"series"`
}

// Series is one line of the timeline chart.
type Series struct {
	Name   string `json:"name"`
	Counts []int  `json:"counts"`
}

// histogramEdges are latency bucket bounds in seconds, 1-2-5 steps.
var histogramEdges = []float64{
	0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
	0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 60,
}

// NewLatency summarises durations ds; outcomes holds one outcome per call
// (a gRPC code's name, an EFS outcome), ok is the outcome that counts as OK,
// and retries is the caller's count.
func NewLatency(name string, ds []time.Duration, outcomes []string, ok string, retries int) Latency {
	l := Latency{Name: name, Count: len(ds), Retries: retries, ByCode: map[string]int{}}
	for _, c := range outcomes {
		l.ByCode[c]++
		if c == ok {
			l.OK++
		}
	}
	if len(ds) == 0 {
		return l
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	l.P50, l.P95, l.P99 = percentile(s, 50), percentile(s, 95), percentile(s, 99)
	l.Max = s[len(s)-1].Seconds()
	l.Mean = (sum / time.Duration(len(s))).Seconds()
	l.Histogram = make([]Bucket, len(histogramEdges)+1)
	for i, e := range histogramEdges {
		l.Histogram[i].Le = e
	}
	for _, d := range s {
		i, _ := slices.BinarySearch(histogramEdges, d.Seconds())
		l.Histogram[i].Count++
	}
	return l
}

// percentile is the nearest-rank percentile of sorted durations, in seconds.
func percentile(sorted []time.Duration, p float64) float64 {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1].Seconds()
}

// NewTimeline is an empty timeline of the named series over total, in at
// most 120 buckets of a round width.
func NewTimeline(total time.Duration, names ...string) Timeline {
	width := 0.1
	for _, w := range []float64{0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60} {
		width = w
		if total.Seconds()/w <= 120 {
			break
		}
	}
	n := int(total.Seconds()/width) + 1
	t := Timeline{BucketSeconds: width, Series: make([]Series, len(names))}
	for i := range t.Series {
		t.Series[i] = Series{Name: names[i], Counts: make([]int, n)}
	}
	return t
}

// Add counts one answer of series i at time at (since the start); one past
// the end counts in the last bucket.
func (t *Timeline) Add(i int, at time.Duration) {
	c := t.Series[i].Counts
	c[min(max(int(at.Seconds()/t.BucketSeconds), 0), len(c)-1)]++
}

// Palette colours the series and histograms; readable on white and in grey.
var Palette = []string{"#2b6cb0", "#2f855a", "#d69e2e", "#c53030", "#6b46c1"}

// Colour is the i-th colour of the palette, round.
func Colour(i int) string { return Palette[i%len(Palette)] }

// CSS is the reports' style sheet (the stress tool's and the audit's):
// the page fits its window (tables shrink by wrapping their cells, charts
// scale, preformatted text wraps), text is left-aligned and numbers
// (cells of class num) right-aligned, numbers and short tokens (class
// word) unbroken, names (class name) broken between words only, any
// other cell anywhere (a path, a volume name), a finding's reason is a full-width
// row under it (class why).
const CSS = `*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;padding:16px 24px;color:#1a202c;max-width:1240px;line-height:1.4}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd} h3{font-size:14px;margin:18px 0 4px}
p,li,code{overflow-wrap:anywhere}
table{border-collapse:collapse;margin:8px 0;font-size:13px;max-width:100%}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top;overflow-wrap:anywhere}
th{background:#f0f3f7;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
td.num,td.word,th.num,th.word{white-space:nowrap;overflow-wrap:normal}
td.name{overflow-wrap:normal}
tr.why td{color:#4a5568;font-size:12px;border-top:0;padding-left:24px}
tr.more td{font-style:italic}
.badge{display:inline-block;padding:3px 10px;border-radius:4px;color:#fff;font-weight:bold}
.clean{background:#2f855a} .findings,.error,.interrupted{background:#c53030}
.bad{color:#c53030;font-weight:bold} .note{color:#4a5568;font-size:13px}
pre{background:#f7f7f7;padding:8px;font-size:12px;white-space:pre-wrap;overflow-wrap:anywhere}
svg{display:block;max-width:100%;height:auto}
.charts{display:flex;flex-wrap:wrap;gap:12px}
.charts svg{flex:0 1 470px;min-width:0}`

// WritePage executes t with data and writes the page to path: executed
// first, so that a template error leaves no half-written file.
func WritePage(path string, t *template.Template, data any) error {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// niceMax rounds up to 1, 2 or 5 times a power of ten, for axis tops.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string { return html.EscapeString(s) }

// TimelineText names what a timeline shows: the y axis ("answers per
// second") and, in the legend, what a tick (an Event that is not a phase)
// marks ("driver killed"; "" for no legend entry).
type TimelineText struct {
	YAxis, Tick string
}

// TimelineSVG draws t's counts per second over time, one line per series,
// with phases and the other events marked.
func TimelineSVG(t Timeline, events []Event, text TimelineText) string {
	const w, h, left, right, top, bottom = 960.0, 320.0, 56.0, 16.0, 28.0, 40.0
	pw, ph := w-left-right, h-top-bottom
	n := 0
	peak := 0.0
	for _, s := range t.Series {
		n = max(n, len(s.Counts))
		for _, c := range s.Counts {
			peak = max(peak, float64(c)/t.BucketSeconds)
		}
	}
	if n == 0 || t.BucketSeconds == 0 {
		return `<p>No calls were made.</p>`
	}
	total := float64(n) * t.BucketSeconds
	ymax := niceMax(peak)
	x := func(sec float64) float64 { return left + pw*sec/total }
	y := func(rate float64) float64 { return top + ph - ph*rate/ymax }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s over time">`, w, h, w, h, esc(text.YAxis))
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="#fafafa" stroke="#ccc"/>`, left, top, pw, ph)
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e2e2e2"/>`, left, left+pw, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end">%g</text>`, left-6, y(v)+4, v)
	}
	// Ticks at a round step, each labelled as a duration to the step's
	// precision (a 0.1 s audit: 0s 10ms 20ms ..., not 0s 0s 0s ... 0.1s).
	step := niceMax(total / 10)
	for i := 0; float64(i)*step <= total+1e-9; i++ {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle">%s</text>`, x(float64(i)*step), top+ph+16, tick(float64(i), step))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12" text-anchor="middle">time since start (bucket %s)</text>`, left+pw/2, h-4, Duration(seconds(t.BucketSeconds)))
	fmt.Fprintf(&b, `<text x="14" y="%.1f" font-size="12" text-anchor="middle" transform="rotate(-90 14 %.1f)">%s</text>`, top+ph/2, top+ph/2, esc(text.YAxis))
	// Phases are full-height lines with staggered labels; other events
	// are ticks under the top edge, readable even when there are hundreds.
	phases := 0
	for _, e := range events {
		title := fmt.Sprintf("<title>%s %s at %.2fs</title>", esc(e.Kind), esc(e.Note), e.Seconds)
		if e.Kind != EventPhase {
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#c53030" stroke-width="1.5">%s</line>`,
				x(e.Seconds), x(e.Seconds), top, top+10, title)
			continue
		}
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="4 3">%s</line>`,
			x(e.Seconds), x(e.Seconds), top, top+ph, title)
		lx, anchor := x(e.Seconds)+3, "start"
		if lx > left+pw-100 { // near the right edge: write leftwards
			lx, anchor = x(e.Seconds)-3, "end"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="#555" text-anchor="%s">%s</text>`,
			lx, top+24+float64(phases%2)*12, anchor, esc(e.Note))
		phases++
	}
	for i, s := range t.Series {
		var pts []string
		for j, c := range s.Counts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x((float64(j)+0.5)*t.BucketSeconds), y(float64(c)/t.BucketSeconds)))
		}
		colour := Colour(i)
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`, colour, strings.Join(pts, " "))
		lx := left + 10 + float64(i)*170
		fmt.Fprintf(&b, `<rect x="%.1f" y="8" width="12" height="12" fill="%s"/><text x="%.1f" y="18" font-size="12">%s</text>`, lx, colour, lx+16, esc(s.Name))
	}
	if text.Tick != "" {
		lx := left + 10 + float64(len(t.Series))*170
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="8" y2="18" stroke="#c53030" stroke-width="1.5"/><text x="%.1f" y="18" font-size="12">%s</text>`, lx, lx, lx+6, esc(text.Tick))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// seconds is s seconds as a Duration, rounded to the microsecond.
func seconds(s float64) time.Duration {
	return time.Duration(math.Round(s*1e6)) * time.Microsecond
}

// tick labels the i-th tick of a step (seconds): i*step as a duration,
// computed from integers so that steps do not accumulate rounding.
func tick(i, step float64) string {
	return Duration(time.Duration(i) * seconds(step))
}

// bucketLabel names a histogram bucket by its upper bound.
func bucketLabel(le float64) string {
	switch {
	case le == 0:
		return "more"
	case le < 0.001:
		return fmt.Sprintf("%gµs", math.Round(le*1e6))
	case le < 1:
		return fmt.Sprintf("%gms", math.Round(le*1e3*10)/10)
	}
	return fmt.Sprintf("%gs", le)
}

// HistogramSVG draws the latency distribution of l as bars over 1-2-5
// buckets, with the percentiles named.
func HistogramSVG(title string, l Latency, colour string) string {
	const w, h, left, right, top, bottom = 470.0, 240.0, 44.0, 8.0, 30.0, 56.0
	pw, ph := w-left-right, h-top-bottom
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s latency">`, w, h, w, h, esc(title))
	fmt.Fprintf(&b, `<text x="%.1f" y="14" font-size="13" font-weight="bold">%s</text>`, left, esc(title))
	fmt.Fprintf(&b, `<text x="%.1f" y="26" font-size="11" fill="#555">n=%d  p50 %s  p95 %s  p99 %s  max %s</text>`,
		left, l.Count, Secs(l.P50), Secs(l.P95), Secs(l.P99), Secs(l.Max))
	peak := 0
	for _, bk := range l.Histogram {
		peak = max(peak, bk.Count)
	}
	if peak == 0 {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12">no calls</text></svg>`, left, top+ph/2)
		return b.String()
	}
	ymax := niceMax(float64(peak))
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="#fafafa" stroke="#ccc"/>`, left, top, pw, ph)
	for i := 0; i <= 2; i++ {
		v := ymax * float64(i) / 2
		yy := top + ph - ph*v/ymax
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="end">%g</text>`, left-4, yy+3, v)
	}
	bw := pw / float64(len(l.Histogram))
	for i, bk := range l.Histogram {
		bh := ph * float64(bk.Count) / ymax
		xx := left + float64(i)*bw
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>≤ %s: %d</title></rect>`,
			xx+1, top+ph-bh, bw-2, bh, colour, bucketLabel(bk.Le), bk.Count)
		lx, ly := xx+bw/2, top+ph+8
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="9" text-anchor="end" transform="rotate(-55 %.1f %.1f)">%s</text>`,
			lx, ly, lx, ly, bucketLabel(bk.Le))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// Secs formats seconds with a unit that keeps three significant digits;
// zero is "-".
func Secs(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", s*1e6)
	case d < time.Second:
		return fmt.Sprintf("%.1fms", s*1e3)
	}
	return fmt.Sprintf("%.2fs", s)
}
