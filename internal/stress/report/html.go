package report

import (
	"html/template"
	"path/filepath"
	"strings"

	"github.com/efs-csi/efs-csi-driver/internal/plot"
)

// WriteHTML writes a self-contained page: tables and inline SVG charts, no
// script and no external resource, so it opens anywhere, offline.
func (r *Report) WriteHTML(path string) error {
	return plot.WritePage(path, page, r.view())
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
	cfg := plot.ConfigJSON(r.Config)
	v := view{Report: r, Summary: sb.String(), ConfigJSON: cfg,
		Timeline: template.HTML(plot.TimelineSVG(r.Timeline, r.Events, plot.TimelineText{YAxis: "answers per second", Tick: "driver killed"}))}
	if c := r.Comparison; c != nil && c.Files[1].HTML != "" {
		if rel, err := filepath.Rel(filepath.Dir(r.Files.HTML), c.Files[1].HTML); err == nil {
			v.ComparedHTML = filepath.ToSlash(rel)
		}
	}
	for i, l := range r.RPCs {
		v.Histograms = append(v.Histograms, template.HTML(plot.HistogramSVG(l.Name+" calls", l, plot.Colour(i))))
	}
	for i, l := range r.Ops {
		v.Histograms = append(v.Histograms, template.HTML(plot.HistogramSVG(l.Name+" operations (with retries)", l, plot.Colour(i+2))))
	}
	return v
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"secs":     plot.Secs,
	"codeList": codeList,
	"upper":    strings.ToUpper,
	"join":     strings.Join,
	"ratio":    ratio,
	"css":      func() template.CSS { return template.CSS(plot.CSS) },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>efs-csi-stress report {{.Started.Format "2006-01-02 15:04:05"}}</title>
<style>
{{css}}
</style></head><body>
<h1>efs-csi-stress report</h1>
<p>{{.Started.Format "2006-01-02 15:04:05 MST"}} · {{.Mode}} run{{with .Label}} ({{.}}){{end}} · {{printf "%.1f" .Seconds}} s ·
<span class="badge {{.Outcome}}">{{upper .Outcome}}: {{.Findings}} findings</span></p>
{{if .Error}}<p class="bad">error: {{.Error}}</p>{{end}}
{{range .Incidents}}<p class="bad">incident: {{.}}</p>{{end}}

{{with .Comparison}}<h2>Comparison</h2>
<p>Default driver flags vs <code>{{join .DriverArgs " "}}</code> added: the same workload and seed, a fresh emulator and driver each.
{{if $.ComparedHTML}}The compared run's report: <a href="{{$.ComparedHTML}}">{{$.ComparedHTML}}</a>.{{end}}</p>
<table><tr><th>figure</th><th class="num">default</th><th class="num">compared</th><th class="num">default/compared</th></tr>
<tr><td>outcome</td><td>{{index .Outcomes 0}}</td><td>{{index .Outcomes 1}}</td><td></td></tr>
<tr><td>audit findings</td><td class="num{{if index .Findings 0}} bad{{end}}">{{index .Findings 0}}</td><td class="num{{if index .Findings 1}} bad{{end}}">{{index .Findings 1}}</td><td></td></tr>
{{range .Figures}}<tr><td>{{.Name}}</td><td class="num">{{.Show .Default}}</td><td class="num">{{.Show .Compared}}</td><td class="num">{{ratio .Ratio}}</td></tr>{{end}}
</table>{{end}}

<h2>Volumes</h2>
<table><tr><th class="num">requested</th><th class="num">created</th><th class="num">failed</th><th class="num">duplicated</th><th class="num">deleted during provisioning</th><th class="num">deleted</th><th class="num">undeleted</th></tr>
<tr><td class="num">{{.Volumes.Requested}}</td><td class="num">{{.Volumes.Created}}</td><td class="num">{{.Volumes.Failed}}{{with .Volumes.FailedByCode}} ({{codeList .}}){{end}}</td><td class="num">{{.Volumes.Duplicated}}</td>
<td class="num">{{.Volumes.DeleteDuringCreate}}</td><td class="num">{{.Volumes.Deleted}}</td><td class="num{{if .Volumes.Undeleted}} bad{{end}}">{{.Volumes.Undeleted}}</td></tr></table>

<h2>Phases</h2>
<table><tr><th>phase</th><th class="num">volumes</th><th class="num">duration</th><th class="num">throughput</th></tr>
{{range .Phases}}<tr><td>{{.Name}}</td><td class="num">{{.Volumes}}</td><td class="num">{{secs .Seconds}}</td><td class="num">{{printf "%.1f" .Throughput}} vol/s</td></tr>{{end}}</table>

<h2>Latency</h2>
<table><tr><th></th><th class="num">count</th><th class="num">ok</th><th class="num">retries</th><th class="num">p50</th><th class="num">p95</th><th class="num">p99</th><th class="num">max</th><th class="num">mean</th><th>errors by code</th></tr>
{{range .RPCs}}<tr><td class="name">{{.Name}} call</td><td class="num">{{.Count}}</td><td class="num">{{.OK}}</td><td class="num">{{.Retries}}</td><td class="num">{{secs .P50}}</td><td class="num">{{secs .P95}}</td><td class="num">{{secs .P99}}</td><td class="num">{{secs .Max}}</td><td class="num">{{secs .Mean}}</td><td>{{codeList .ByCode}}</td></tr>{{end}}
{{range .Ops}}<tr><td class="name">{{.Name}} operation</td><td class="num">{{.Count}}</td><td class="num">{{.OK}}</td><td class="num">{{.Retries}}</td><td class="num">{{secs .P50}}</td><td class="num">{{secs .P95}}</td><td class="num">{{secs .P99}}</td><td class="num">{{secs .Max}}</td><td class="num">{{secs .Mean}}</td><td>{{codeList .ByCode}}</td></tr>{{end}}
</table>
<div class="charts">{{range .Histograms}}{{.}}{{end}}</div>

<h2>Operations over time</h2>
{{.Timeline}}
<p>Chaos: {{if .Chaos.Enabled}}{{.Chaos.Kills}} driver kills{{else}}off{{end}}; unexpected driver exits: {{.Chaos.UnexpectedExits}}.
{{if .Driver.Scraped}}Driver EFS API calls: {{printf "%.0f" .Driver.APICalls}}, retries by operation: {{range $k, $v := .Driver.APIRetries}}{{$k}} {{printf "%.0f" $v}} {{else}}none{{end}}.{{end}}</p>
{{if .Emulator.Counts}}<p>Emulator requests: {{range $k, $v := .Emulator.Counts}}{{if $v}}{{$k}} {{$v}} · {{end}}{{end}}</p>{{end}}

<h2>Audits</h2>
{{if .Audits}}<table><tr><th>figure</th>{{range .Audits}}<th class="num">{{.Name}}</th>{{end}}</tr>
<tr><td>access points seen</td>{{range .Audits}}<td class="num">{{.Report.AccessPoints}}</td>{{end}}</tr>
<tr><td>live volumes</td>{{range .Audits}}<td class="num">{{.Report.LiveVolumes}}</td>{{end}}</tr>
<tr><td>markers checked</td>{{range .Audits}}<td class="num">{{.Report.Markers}}</td>{{end}}</tr>
{{$audits := .Audits}}{{range $i, $f := (index .Audits 0).Report.Figures}}<tr><td>{{$f.Name}}</td>{{range $audits}}{{with index .Report.Figures $i}}<td class="num{{if .Value}} bad{{end}}">{{.Value}}</td>{{end}}{{end}}</tr>{{end}}
</table>
{{range .Audits}}{{$name := .Name}}{{range .Report.All}}<p class="bad">{{$name}}: {{.}}</p>{{end}}{{end}}
{{else}}<p>No audit ran.</p>{{end}}

<h2>Text summary</h2>
<pre>{{.Summary}}</pre>
<h2>Configuration</h2>
<pre>{{.ConfigJSON}}</pre>
</body></html>
`))
