package audit

import (
	"html/template"
	"strings"

	"github.com/efs-csi/efs-csi-driver/internal/plot"
)

// WriteHTML writes a self-contained page: the figures and the lists the
// table shows (built once, in listing.go: at most listCap lines of a kind
// per file system), the plan, and the stress tool's charts of the EFS
// requests (over time, and each operation's latency), inline SVG, no
// script and nothing fetched, on the reports' shared style sheet.
func (r *Report) WriteHTML(path string) error {
	return plot.WritePage(path, page, r.view())
}

type htmlView struct {
	*Report
	Summary    summary
	Sections   map[string][]section
	Omits      string
	Requests   string
	Text       string
	Timeline   template.HTML
	Histograms []template.HTML
	Options    string
}

func (r *Report) view() htmlView {
	var sb strings.Builder
	r.WriteTable(&sb)
	v := htmlView{Report: r, Summary: r.summary(), Sections: map[string][]section{}, Omits: omits, Requests: r.Requests.line(),
		Text: sb.String(), Options: plot.ConfigJSON(r.Options),
		Timeline: template.HTML(plot.TimelineSVG(r.Requests.Timeline, r.Requests.Events, plot.TimelineText{YAxis: "EFS requests per second"}))}
	for _, fs := range r.FileSystems {
		v.Sections[fs.ID] = fs.sections()
	}
	for i, l := range r.Requests.Latency {
		v.Histograms = append(v.Histograms, template.HTML(plot.HistogramSVG(l.Name+" requests", l, plot.Colour(i))))
	}
	return v
}

var page = template.Must(template.New("audit").Funcs(template.FuncMap{
	"css":      func() template.CSS { return template.CSS(plot.CSS) },
	"pct":      pct,
	"join":     join,
	"upper":    strings.ToUpper,
	"barWidth": func(f float64) int { return int(min(f, 1) * 100) },
	"sub":      func(a, b int) int { return a - b },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>efs-csi-driver audit {{.Started.Format "2006-01-02 15:04:05"}}</title>
<style>
{{css}}
.limit{display:block;height:8px;background:#2b6cb0}
.limitbox{display:block;width:100%;max-width:160px;border:1px solid #ccc;margin-top:2px}
</style></head><body>
<h1>efs-csi-driver audit</h1>
<p>{{.Started.Format "2006-01-02 15:04:05 MST"}} · driver {{.Cluster.Driver}} · {{.Cluster.API}} · {{printf "%.1f" .Seconds}} s ·
<span class="badge {{if eq .Outcome "clean"}}clean{{else}}findings{{end}}">{{upper .Outcome}}: {{.Totals.Findings}} findings</span></p>
{{range .Errors}}<p class="bad">error: {{.}}</p>{{end}}
<p class="note">This page {{.Omits}}.</p>

<h2>Cluster</h2>
<table>
<tr><th>cluster ID</th><td>{{.Cluster.ID}} ({{.Cluster.IDSource}})</td></tr>
<tr><th>record</th><td>{{if .Cluster.JournalError}}<span class="bad">not read: {{.Cluster.JournalError}}</span>{{else}}{{.Cluster.Records}} volumes ({{.Cluster.Journal}}){{end}}</td></tr>
<tr><th>orphan collector</th><td>{{.Cluster.Collector.Why}}</td></tr>
<tr><th>Kubernetes</th><td>{{.Cluster.PersistentVolumes}} PersistentVolumes of the driver, {{.Cluster.Claims}} claims, {{len .Cluster.StorageClasses}} StorageClasses</td></tr>
</table>
{{if .Cluster.StorageClasses}}<table><tr><th>StorageClass</th><th>file system</th><th>API</th><th>credentials</th><th>base path</th><th class="num">fixed gid</th><th>note</th></tr>
{{range .Cluster.StorageClasses}}<tr><td>{{.Name}}</td><td>{{.FileSystem}}</td><td>{{.API}}</td><td>{{.Credentials}}</td><td>{{.BasePath}}</td><td class="num">{{with .FixedGID}}{{.}}{{end}}</td><td>{{.Error}}</td></tr>{{end}}
</table>{{end}}

<h2>File systems</h2>
<table>{{range .FileSystems}}<tr><th>{{.ID}}</th><td>{{.API}} API, {{.Credentials}} credentials{{with .Classes}}, StorageClasses {{join .}}{{end}}{{with .Error}}: <span class="bad">ERROR: {{.}}</span>{{end}}
{{if not .Error}}<span class="limitbox" title="{{pct .LimitUsed}} of the access point limit"><span class="limit" style="width:{{barWidth .LimitUsed}}%"></span></span>{{end}}</td></tr>{{end}}
</table>
<table id="summary"><tr>{{range $i, $h := .Summary.Head}}<th{{if $i}} class="num"{{end}}>{{$h}}</th>{{end}}</tr>
{{range .Summary.Rows}}<tr>{{range $i, $c := .}}{{if $i}}<td class="num">{{$c}}</td>{{else}}<th>{{$c}}</th>{{end}}{{end}}</tr>
{{end}}</table>

{{range .FileSystems}}{{if not .Error}}{{$secs := index $.Sections .ID}}
<h2>{{.ID}}</h2>
{{if ge .LimitUsed 0.8}}<p class="bad">limit: {{.AccessPoints}} of {{.Limit}} access points ({{pct .LimitUsed}}): {{sub .Limit .AccessPoints}} left</p>{{end}}
{{if not $secs}}<p>Nothing to list.</p>{{end}}
{{range $secs}}<h3>{{.Title}}</h3>
{{if .Head}}{{$class := .Class}}<table class="list"><tr>{{range $i, $h := .Head}}<th{{with index $class $i}} class="{{.}}"{{end}}>{{$h}}</th>{{end}}</tr>
{{range .Rows}}{{$bad := .Bad}}<tr>{{range $i, $c := .Cells}}<td class="{{index $class $i}}{{if and $bad (eq $i 0)}} bad{{end}}">{{$c}}</td>{{end}}</tr>
{{if .Why}}<tr class="why"><td colspan="{{len .Cells}}">{{.Why}}</td></tr>{{end}}
{{end}}{{with .More}}<tr class="more"><td colspan="{{len $class}}">{{.}}</td></tr>{{end}}</table>{{end}}
{{end}}{{end}}{{end}}

{{with .Plan}}<h2>Plan (--fix)</h2>
{{if .Actions}}<p>{{len .Actions}} actions{{if .Applied}}, applied{{else}}; nothing was changed: apply with --fix --yes{{end}}. Every action is listed.</p>
<table class="list"><tr><th>file system</th><th>action</th><th>volume</th><th>claim</th><th>created</th>{{if .Applied}}<th>result</th>{{end}}</tr>
{{$applied := .Applied}}{{range .Rows}}<tr><td>{{index . 0}}</td><td>{{index . 1}}</td><td>{{index . 2}}</td><td>{{index . 3}}</td><td>{{index . 4}}</td>{{if $applied}}<td>{{index . 6}}</td>{{end}}</tr>
<tr class="why"><td colspan="{{if $applied}}6{{else}}5{{end}}">{{index . 5}}</td></tr>{{end}}</table>
{{else}}<p>Nothing to do: {{.Note}}</p>{{end}}{{end}}

<h2>EFS requests</h2>
<p>{{.Requests}}.</p>
{{.Timeline}}
<div class="charts">{{range .Histograms}}{{.}}{{end}}</div>

<h2>Text summary</h2>
<p class="note">What --output table writes.</p>
<pre>{{.Text}}</pre>
<h2>Options</h2>
<pre>{{.Options}}</pre>
</body></html>
`))
