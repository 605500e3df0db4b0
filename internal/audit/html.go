package audit

import (
	"encoding/json"
	"html/template"
	"strings"

	"github.com/efs-csi/efs-csi-driver/internal/plot"
)

// maxRows bounds the rows of each kind the HTML page lists per file
// system; the JSON has them all.
const maxRows = 500

// WriteHTML writes a self-contained page: the tables, every finding (up to
// maxRows of a kind per file system), the plan, and the stress tool's
// charts of the EFS requests (over time, and each operation's latency),
// inline SVG, no script and nothing fetched.
func (r *Report) WriteHTML(path string) error {
	return plot.WritePage(path, page, r.view())
}

type htmlView struct {
	*Report
	Owners     []Owner
	Text       string
	Timeline   template.HTML
	Histograms []template.HTML
	Options    string
	MaxRows    int
}

func (r *Report) view() htmlView {
	var sb strings.Builder
	r.WriteTable(&sb)
	opts, _ := json.MarshalIndent(r.Options, "", "  ")
	v := htmlView{Report: r, Owners: Owners, Text: sb.String(), Options: string(opts), MaxRows: maxRows,
		Timeline: template.HTML(plot.TimelineSVG(r.Requests.Timeline, r.Requests.Events, plot.TimelineText{YAxis: "EFS requests per second"}))}
	for i, l := range r.Requests.Latency {
		v.Histograms = append(v.Histograms, template.HTML(plot.HistogramSVG(l.Name+" requests", l, plot.Colour(i))))
	}
	return v
}

var page = template.Must(template.New("audit").Funcs(template.FuncMap{
	"css":   func() template.CSS { return template.CSS(plot.CSS) },
	"pct":   pct,
	"join":  join,
	"upper": strings.ToUpper,
	"secs":  plot.Secs,
	"rows": func(n int) []int { // 0..n-1, at most maxRows
		out := make([]int, min(n, maxRows))
		for i := range out {
			out[i] = i
		}
		return out
	},
	"barWidth": func(f float64) int { return int(min(f, 1) * 200) },
	"intended": func(gs []SharedGID) int {
		n := 0
		for _, g := range gs {
			if g.Intended {
				n++
			}
		}
		return n
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>efs-csi-driver audit {{.Started.Format "2006-01-02 15:04:05"}}</title>
<style>
{{css}}
.limit{display:inline-block;height:10px;background:#2b6cb0;vertical-align:middle}
.limitbox{display:inline-block;width:200px;border:1px solid #ccc;margin-right:6px}
td.why{text-align:left;max-width:520px}
</style></head><body>
<h1>efs-csi-driver audit</h1>
<p>{{.Started.Format "2006-01-02 15:04:05 MST"}} · driver {{.Cluster.Driver}} · {{.Cluster.API}} · {{printf "%.1f" .Seconds}} s ·
<span class="badge {{if eq .Outcome "clean"}}clean{{else}}findings{{end}}">{{upper .Outcome}}: {{.Totals.Findings}} findings</span></p>
{{range .Errors}}<p class="bad">error: {{.}}</p>{{end}}

<h2>Cluster</h2>
<table>
<tr><td>cluster ID</td><td>{{.Cluster.ID}} ({{.Cluster.IDSource}})</td></tr>
<tr><td>record</td><td>{{if .Cluster.JournalError}}<span class="bad">not read: {{.Cluster.JournalError}}</span>{{else}}{{.Cluster.Records}} volumes ({{.Cluster.Journal}}){{end}}</td></tr>
<tr><td>orphan collector</td><td>{{.Cluster.Collector.Why}}</td></tr>
<tr><td>PersistentVolumes of the driver</td><td>{{.Cluster.PersistentVolumes}}</td></tr>
<tr><td>claims</td><td>{{.Cluster.Claims}}</td></tr>
</table>
<table><tr><th>StorageClass</th><th>file system</th><th>API</th><th>credentials</th><th>base path</th><th>fixed gid</th><th>note</th></tr>
{{range .Cluster.StorageClasses}}<tr><td>{{.Name}}</td><td>{{.FileSystem}}</td><td>{{.API}}</td><td>{{.Credentials}}</td><td>{{.BasePath}}</td><td>{{with .FixedGID}}{{.}}{{end}}</td><td class="why">{{.Error}}</td></tr>{{end}}
</table>

<h2>File systems</h2>
<table><tr><th>file system</th><th>API</th><th>credentials</th><th>access points</th><th>limit used</th>{{range .Owners}}<th>{{.}}</th>{{end}}<th>no PV</th><th>phantoms</th><th>shared GIDs</th><th>stale records</th><th>orphan dirs</th><th>findings</th></tr>
{{range .FileSystems}}{{$fs := .}}<tr><td>{{.ID}}</td><td>{{.API}}</td><td>{{.Credentials}}</td>
{{if .Error}}<td colspan="14" class="bad why">{{.Error}}</td>{{else}}
<td>{{.AccessPoints}} / {{.Limit}}</td><td><span class="limitbox"><span class="limit" style="width:{{barWidth .LimitUsed}}px"></span></span>{{pct .LimitUsed}}</td>
{{range $.Owners}}<td>{{index $fs.ByOwner .}}</td>{{end}}
<td>{{len .Unreferenced}}</td><td {{if .Phantoms}}class="bad"{{end}}>{{len .Phantoms}}</td><td>{{len .SharedGIDs}} ({{intended .SharedGIDs}} intended)</td><td>{{len .StaleRecords}}</td>
<td>{{with .Directories}}{{len .Orphans}}{{else}}not scanned{{end}}</td><td {{if .Findings}}class="bad"{{end}}>{{.Findings}}</td>{{end}}</tr>{{end}}
</table>

{{range .FileSystems}}{{if not .Error}}
<h2>{{.ID}}</h2>
{{if .Unreferenced}}<h3>Access points no PersistentVolume names ({{len .Unreferenced}})</h3>
<table><tr><th>access point</th><th>path</th><th>GID</th><th>owner</th><th>volume</th><th>claim</th><th>provable leak</th><th>why</th></tr>
{{$u := .Unreferenced}}{{range rows (len .Unreferenced)}}{{with index $u .}}<tr><td>{{.AccessPoint}}</td><td>{{.Path}}</td><td>{{with .GID}}{{.}}{{end}}</td><td title="{{.OwnerWhy}}">{{.Owner}}</td><td>{{.Volume}}</td><td>{{.Claim}}</td>
<td {{if .Leak}}class="bad"{{end}}>{{if .Leak}}yes{{else}}no{{end}}</td><td class="why">{{.Why}} ({{.OwnerWhy}})</td></tr>{{end}}{{end}}
</table>{{if gt (len .Unreferenced) $.MaxRows}}<p>... and {{len .Unreferenced}} in all: see the JSON report.</p>{{end}}{{end}}
{{if .Phantoms}}<h3>PersistentVolumes whose access point is gone ({{len .Phantoms}})</h3>
<table><tr><th>PV</th><th>claim</th><th>StorageClass</th><th>access point</th><th>why</th></tr>
{{range .Phantoms}}<tr><td>{{.PV}}</td><td>{{.Claim}}</td><td>{{.Class}}</td><td>{{.AccessPoint}}</td><td class="why">{{.Why}}</td></tr>{{end}}</table>{{end}}
{{if .SharedGIDs}}<h3>GIDs carried by more than one access point ({{len .SharedGIDs}})</h3>
<table><tr><th>GID</th><th>access point</th><th>owner</th><th>PVs</th><th>namespaces</th><th>volume</th></tr>
{{range .SharedGIDs}}{{$g := .}}{{range .Holders}}<tr><td {{if not $g.Intended}}class="bad"{{end}}>{{$g.GID}}{{if $g.Intended}} (a class fixes it){{end}}</td><td>{{.AccessPoint}}</td><td>{{.Owner}}</td><td>{{join .PVs}}</td><td>{{join .Namespaces}}</td><td>{{.Volume}}</td></tr>{{end}}{{end}}</table>{{end}}
{{if .StaleRecords}}<h3>Records whose access point is gone ({{len .StaleRecords}})</h3>
<table><tr><th>volume</th><th>access point</th><th>claim</th><th>provable leak</th><th>why</th></tr>
{{range .StaleRecords}}<tr><td>{{.Volume}}</td><td>{{.AccessPoint}}</td><td>{{.Claim}}</td><td>{{if .Leak}}yes{{else}}no{{end}}</td><td class="why">{{.Why}}</td></tr>{{end}}</table>{{end}}
{{with .Directories}}<h3>Directories no access point reaches ({{len .Orphans}}{{if .More}} + {{.More}}{{end}})</h3>
<p>Read {{.Read}} directories under {{join .BasePaths}} of {{.Root}}.{{if .Error}} <span class="bad">{{.Error}}</span>{{end}}</p>
{{if .Orphans}}<table><tr><th>directory</th></tr>{{range .Orphans}}<tr><td>{{.}}</td></tr>{{end}}</table>{{end}}{{end}}
{{end}}{{end}}

{{with .Plan}}<h2>Plan (--fix)</h2>
{{if .Actions}}<p>{{len .Actions}} actions{{if .Applied}}, applied{{else}}; nothing was changed: apply with --fix --yes{{end}}.</p>
<table><tr><th>file system</th><th>action</th><th>access point</th><th>volume</th><th>claim</th><th>created</th><th>why</th>{{if .Applied}}<th>result</th>{{end}}</tr>
{{$applied := .Applied}}{{range .Actions}}<tr><td>{{.FileSystem}}</td><td>{{.Kind}}</td><td>{{.AccessPoint}}</td><td>{{.Volume}}</td><td>{{.Claim}}</td><td>{{.Created.Format "2006-01-02 15:04:05"}}</td><td class="why">{{.Why}}</td>
{{if $applied}}<td class="why">{{.Result}}{{with .Error}}: {{.}}{{end}}</td>{{end}}</tr>{{end}}</table>
{{else}}<p>Nothing to do: {{.Note}}</p>{{end}}{{end}}

<h2>EFS requests</h2>
<p>{{.Requests.Total}} requests, {{.Requests.Retries}} retries{{range $k, $v := .Requests.ByOutcome}} · {{$k}} {{$v}}{{end}}.</p>
{{.Timeline}}
<div class="charts">{{range .Histograms}}{{.}}{{end}}</div>

<h2>Text summary</h2>
<pre>{{.Text}}</pre>
<h2>Options</h2>
<pre>{{.Options}}</pre>
</body></html>
`))
