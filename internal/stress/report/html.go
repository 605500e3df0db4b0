package report

import (
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// palette colours the series and histograms; readable on white and in grey.
var palette = []string{"#2b6cb0", "#2f855a", "#d69e2e", "#c53030", "#6b46c1"}

// WriteHTML writes a self-contained page: tables and inline SVG charts, no
// script and no external resource, so it opens anywhere, offline.
func (r *Report) WriteHTML(path string) error {
	var b strings.Builder
	if err := page.Execute(&b, r.view()); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

type view struct {
	*Report
	Summary      string
	ComparedHTML string // the compared run's page, relative to this one
	Timeline     template.HTML
	Histograms   []template.HTML
	ConfigJSON   string
}

func (r *Report) view() view {
	var sb strings.Builder
	r.Summary(&sb)
	cfg, _ := json.MarshalIndent(r.Config, "", "  ")
	v := view{Report: r, Summary: sb.String(), ConfigJSON: string(cfg),
		Timeline: template.HTML(timelineSVG(r.Timeline, r.Events))}
	if c := r.Comparison; c != nil && c.Files[1].HTML != "" {
		if rel, err := filepath.Rel(filepath.Dir(r.Files.HTML), c.Files[1].HTML); err == nil {
			v.ComparedHTML = filepath.ToSlash(rel)
		}
	}
	for i, l := range r.RPCs {
		v.Histograms = append(v.Histograms, template.HTML(histogramSVG(l.Name+" calls", l, palette[i%len(palette)])))
	}
	for i, l := range r.Ops {
		v.Histograms = append(v.Histograms, template.HTML(histogramSVG(l.Name+" operations (with retries)", l, palette[(i+2)%len(palette)])))
	}
	return v
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

// timelineSVG draws answers per second over time, one line per series, with
// phases and driver kills marked.
func timelineSVG(t Timeline, events []Event) string {
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
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="answers per second over time">`, w, h, w, h)
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="#fafafa" stroke="#ccc"/>`, left, top, pw, ph)
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e2e2e2"/>`, left, left+pw, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end">%g</text>`, left-6, y(v)+4, v)
	}
	step := niceMax(total / 10)
	for s := 0.0; s <= total+1e-9; s += step {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle">%gs</text>`, x(s), top+ph+16, math.Round(s*10)/10)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12" text-anchor="middle">time since start (bucket %gs)</text>`, left+pw/2, h-4, t.BucketSeconds)
	fmt.Fprintf(&b, `<text x="14" y="%.1f" font-size="12" text-anchor="middle" transform="rotate(-90 14 %.1f)">answers per second</text>`, top+ph/2, top+ph/2)
	// Phases are full-height lines with staggered labels; kills and crashes
	// are ticks under the top edge, readable even when there are hundreds.
	phases := 0
	for _, e := range events {
		title := fmt.Sprintf("<title>%s %s at %.2fs</title>", esc(e.Kind), esc(e.Note), e.Seconds)
		if e.Kind != "phase" {
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
		colour := palette[i%len(palette)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`, colour, strings.Join(pts, " "))
		lx := left + 10 + float64(i)*170
		fmt.Fprintf(&b, `<rect x="%.1f" y="8" width="12" height="12" fill="%s"/><text x="%.1f" y="18" font-size="12">%s</text>`, lx, colour, lx+16, esc(s.Name))
	}
	lx := left + 10 + float64(len(t.Series))*170
	fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="8" y2="18" stroke="#c53030" stroke-width="1.5"/><text x="%.1f" y="18" font-size="12">driver killed</text>`, lx, lx, lx+6)
	b.WriteString(`</svg>`)
	return b.String()
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

// histogramSVG draws the latency distribution of l as bars over 1-2-5
// buckets, with the percentiles named.
func histogramSVG(title string, l Latency, colour string) string {
	const w, h, left, right, top, bottom = 470.0, 240.0, 44.0, 8.0, 30.0, 56.0
	pw, ph := w-left-right, h-top-bottom
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s latency">`, w, h, w, h, esc(title))
	fmt.Fprintf(&b, `<text x="%.1f" y="14" font-size="13" font-weight="bold">%s</text>`, left, esc(title))
	fmt.Fprintf(&b, `<text x="%.1f" y="26" font-size="11" fill="#555">n=%d  p50 %s  p95 %s  p99 %s  max %s</text>`,
		left, l.Count, secs(l.P50), secs(l.P95), secs(l.P99), secs(l.Max))
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

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"secs":     secs,
	"codeList": codeList,
	"upper":    strings.ToUpper,
	"join":     strings.Join,
	"ratio":    ratio,
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>efs-csi-stress report {{.Started.Format "2006-01-02 15:04:05"}}</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1a202c;max-width:1000px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0;font-size:13px} td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f0f3f7} td:first-child,th:first-child{text-align:left}
.badge{display:inline-block;padding:3px 10px;border-radius:4px;color:#fff;font-weight:bold}
.clean{background:#2f855a} .findings,.error,.interrupted{background:#c53030}
.bad{color:#c53030;font-weight:bold} pre{background:#f7f7f7;padding:8px;font-size:12px;overflow:auto}
.charts{display:flex;flex-wrap:wrap;gap:12px}
</style></head><body>
<h1>efs-csi-stress report</h1>
<p>{{.Started.Format "2006-01-02 15:04:05 MST"}} · {{.Mode}} run{{with .Label}} ({{.}}){{end}} · {{printf "%.1f" .Seconds}} s ·
<span class="badge {{.Outcome}}">{{upper .Outcome}}: {{.Findings}} findings</span></p>
{{if .Error}}<p class="bad">error: {{.Error}}</p>{{end}}
{{range .Incidents}}<p class="bad">incident: {{.}}</p>{{end}}

{{with .Comparison}}<h2>Comparison</h2>
<p>Default driver flags vs <code>{{join .DriverArgs " "}}</code> added: the same workload and seed, a fresh emulator and driver each.
{{if $.ComparedHTML}}The compared run's report: <a href="{{$.ComparedHTML}}">{{$.ComparedHTML}}</a>.{{end}}</p>
<table><tr><th>figure</th><th>default</th><th>compared</th><th>default/compared</th></tr>
<tr><td>outcome</td><td>{{index .Outcomes 0}}</td><td>{{index .Outcomes 1}}</td><td></td></tr>
<tr><td>audit findings</td><td {{if index .Findings 0}}class="bad"{{end}}>{{index .Findings 0}}</td><td {{if index .Findings 1}}class="bad"{{end}}>{{index .Findings 1}}</td><td></td></tr>
{{range .Figures}}<tr><td>{{.Name}}</td><td>{{.Show .Default}}</td><td>{{.Show .Compared}}</td><td>{{ratio .Ratio}}</td></tr>{{end}}
</table>{{end}}

<h2>Volumes</h2>
<table><tr><th>requested</th><th>created</th><th>failed</th><th>duplicated</th><th>deleted during provisioning</th><th>deleted</th><th>undeleted</th></tr>
<tr><td>{{.Volumes.Requested}}</td><td>{{.Volumes.Created}}</td><td>{{.Volumes.Failed}} ({{codeList .Volumes.FailedByCode}})</td><td>{{.Volumes.Duplicated}}</td>
<td>{{.Volumes.DeleteDuringCreate}}</td><td>{{.Volumes.Deleted}}</td><td {{if .Volumes.Undeleted}}class="bad"{{end}}>{{.Volumes.Undeleted}}</td></tr></table>

<h2>Phases</h2>
<table><tr><th>phase</th><th>volumes</th><th>duration</th><th>throughput</th></tr>
{{range .Phases}}<tr><td>{{.Name}}</td><td>{{.Volumes}}</td><td>{{secs .Seconds}}</td><td>{{printf "%.1f" .Throughput}} vol/s</td></tr>{{end}}</table>

<h2>Latency</h2>
<table><tr><th></th><th>count</th><th>ok</th><th>retries</th><th>p50</th><th>p95</th><th>p99</th><th>max</th><th>mean</th><th>errors by code</th></tr>
{{range .RPCs}}<tr><td>{{.Name}} call</td><td>{{.Count}}</td><td>{{.OK}}</td><td>{{.Retries}}</td><td>{{secs .P50}}</td><td>{{secs .P95}}</td><td>{{secs .P99}}</td><td>{{secs .Max}}</td><td>{{secs .Mean}}</td><td>{{codeList .ByCode}}</td></tr>{{end}}
{{range .Ops}}<tr><td>{{.Name}} operation</td><td>{{.Count}}</td><td>{{.OK}}</td><td>{{.Retries}}</td><td>{{secs .P50}}</td><td>{{secs .P95}}</td><td>{{secs .P99}}</td><td>{{secs .Max}}</td><td>{{secs .Mean}}</td><td>{{codeList .ByCode}}</td></tr>{{end}}
</table>
<div class="charts">{{range .Histograms}}{{.}}{{end}}</div>

<h2>Operations over time</h2>
{{.Timeline}}
<p>Chaos: {{if .Chaos.Enabled}}{{.Chaos.Kills}} driver kills{{else}}off{{end}}; unexpected driver exits: {{.Chaos.UnexpectedExits}}.
{{if .Driver.Scraped}}Driver EFS API calls: {{printf "%.0f" .Driver.APICalls}}, retries by operation: {{range $k, $v := .Driver.APIRetries}}{{$k}} {{printf "%.0f" $v}} {{else}}none{{end}}.{{end}}</p>
{{if .Emulator.Counts}}<p>Emulator requests: {{range $k, $v := .Emulator.Counts}}{{if $v}}{{$k}} {{$v}} · {{end}}{{end}}</p>{{end}}

<h2>Audits</h2>
{{if .Audits}}<table><tr><th>figure</th>{{range .Audits}}<th>{{.Name}}</th>{{end}}</tr>
<tr><td>access points seen</td>{{range .Audits}}<td>{{.Report.AccessPoints}}</td>{{end}}</tr>
<tr><td>live volumes</td>{{range .Audits}}<td>{{.Report.LiveVolumes}}</td>{{end}}</tr>
<tr><td>markers checked</td>{{range .Audits}}<td>{{.Report.Markers}}</td>{{end}}</tr>
{{$audits := .Audits}}{{range $i, $f := (index .Audits 0).Report.Figures}}<tr><td>{{$f.Name}}</td>{{range $audits}}{{with index .Report.Figures $i}}<td {{if .Value}}class="bad"{{end}}>{{.Value}}</td>{{end}}{{end}}</tr>{{end}}
</table>
{{range .Audits}}{{$name := .Name}}{{range .Report.All}}<p class="bad">{{$name}}: {{.}}</p>{{end}}{{end}}
{{else}}<p>No audit ran.</p>{{end}}

<h2>Text summary</h2>
<pre>{{.Summary}}</pre>
<h2>Configuration</h2>
<pre>{{.ConfigJSON}}</pre>
</body></html>
`))
