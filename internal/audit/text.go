package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// maxLines bounds the lines of each kind of finding the table lists per
// file system; the JSON and HTML have them all.
const maxLines = 20

// WriteJSON writes the report, indented.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", f*100) }

// WriteTable writes the report for a terminal: what was read, a row per
// file system, then each finding, the plan, and the result.
func (r *Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	p := func(format string, a ...any) { fmt.Fprintf(tw, format, a...) }
	c := r.Cluster
	p("efs-csi-driver audit: driver %s, %s, %.1fs\n", c.Driver, c.API, r.Seconds)
	p("cluster ID: %s (%s)\n", orDash(c.ID), c.IDSource)
	if c.JournalError != "" {
		p("record: %s: NOT READ: %s\n", orDash(c.Journal), c.JournalError)
	} else {
		p("record: %d volumes (%s)\n", c.Records, c.Journal)
	}
	p("orphan collector: %s\n", c.Collector.Why)
	p("Kubernetes: %d PVs of the driver, %d claims, %d StorageClasses\n", c.PersistentVolumes, c.Claims, len(c.StorageClasses))
	for _, cl := range c.StorageClasses {
		if cl.Error != "" {
			p("  StorageClass %s: %s\n", cl.Name, cl.Error)
		}
	}
	p("\n")
	p("file system\tAPI\tcredentials\taccess points\tof the limit\tthis cluster\tunrecorded\tother clusters\tupstream\tother\n")
	for _, fs := range r.FileSystems {
		if fs.Error != "" {
			p("%s\t%s\t%s\tERROR: %s\t\t\t\t\t\t\n", fs.ID, fs.API, fs.Credentials, fs.Error)
			continue
		}
		p("%s\t%s\t%s\t%d / %d\t%s\t%d\t%d\t%d\t%d\t%d\n", fs.ID, fs.API, fs.Credentials, fs.AccessPoints, fs.Limit,
			pct(fs.LimitUsed), fs.ByOwner[OwnerThisCluster], fs.ByOwner[OwnerUnrecorded], fs.ByOwner[OwnerOtherCluster],
			fs.ByOwner[OwnerUpstream], fs.ByOwner[OwnerOther])
	}
	p("\n")
	p("file system\tno PV\tprovable leaks\tphantom PVs\tshared GIDs\tstale records\torphan dirs\tfindings\n")
	for _, fs := range r.FileSystems {
		if fs.Error != "" {
			continue
		}
		dirs := "not scanned"
		if d := fs.Directories; d != nil {
			dirs = fmt.Sprint(len(d.Orphans) + d.More)
		}
		leaks, gids := 0, 0
		for _, u := range fs.Unreferenced {
			if u.Leak {
				leaks++
			}
		}
		for _, g := range fs.SharedGIDs {
			if !g.Intended {
				gids++
			}
		}
		p("%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d\n", fs.ID, len(fs.Unreferenced), leaks, len(fs.Phantoms), gids, len(fs.StaleRecords), dirs, fs.Findings)
	}
	tw.Flush()
	for _, fs := range r.FileSystems {
		r.writeFindings(w, fs)
	}
	if pl := r.Plan; pl != nil {
		r.writePlan(w, pl)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
	fmt.Fprintf(w, "\nEFS requests: %d (%s), %d retries\n", r.Requests.Total, outcomes(r.Requests.ByOutcome), r.Requests.Retries)
	fixed := ""
	if r.Plan != nil && r.Plan.Applied {
		fixed = fmt.Sprintf(", %d of them fixed by the plan", r.Totals.Fixed)
	}
	fmt.Fprintf(w, "result: %s, %d findings%s\n", strings.ToUpper(r.Outcome), r.Totals.Findings, fixed)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func outcomes(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if parts == nil {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// writeFindings lists one file system's findings, at most maxLines of each
// kind.
func (r *Report) writeFindings(w io.Writer, fs *FileSystem) {
	if fs.Findings == 0 && fs.LimitUsed < 0.8 {
		return
	}
	fmt.Fprintf(w, "\n%s:\n", fs.ID)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	defer tw.Flush()
	p := func(format string, a ...any) { fmt.Fprintf(tw, format, a...) }
	if fs.LimitUsed >= 0.8 {
		p("  limit\t%d of %d access points (%s): %d left\n", fs.AccessPoints, fs.Limit, pct(fs.LimitUsed), fs.Limit-fs.AccessPoints)
	}
	n := 0
	for _, u := range fs.Unreferenced {
		if !u.Finding {
			continue
		}
		if n++; n > maxLines {
			continue
		}
		kind := "no PV"
		if u.Leak {
			kind = "LEAK"
		}
		p("  %s\t%s\t%s\t%s\t%s\n", kind, u.AccessPoint, u.Path, u.Owner, u.Why)
	}
	more(p, n, "access points without a PV")
	tw.Flush()
	for i, ph := range fs.Phantoms {
		if i < maxLines {
			p("  phantom\tPV %s\t%s\t%s\t%s\n", ph.PV, orDash(ph.Claim), ph.AccessPoint, ph.Why)
		}
	}
	more(p, len(fs.Phantoms), "phantoms")
	tw.Flush()
	n = 0
	for _, g := range fs.SharedGIDs {
		if g.Intended {
			continue
		}
		if n++; n > maxLines {
			continue
		}
		var hs []string
		for _, h := range g.Holders {
			hs = append(hs, fmt.Sprintf("%s (%s, PV %s, ns %s)", h.AccessPoint, h.Owner, join(h.PVs), join(h.Namespaces)))
		}
		p("  shared GID\t%d\t%d access points\t%s\n", g.GID, len(g.Holders), strings.Join(hs, "; "))
	}
	more(p, n, "shared GIDs")
	tw.Flush()
	for i, s := range fs.StaleRecords {
		if i < maxLines {
			kind := "stale record"
			if s.Leak {
				kind = "STALE RECORD"
			}
			p("  %s\t%s\t%s\t%s\n", kind, s.Volume, orDash(s.Claim), s.Why)
		}
	}
	more(p, len(fs.StaleRecords), "stale records")
	tw.Flush()
	if d := fs.Directories; d != nil {
		for i, o := range d.Orphans {
			if i < maxLines {
				p("  orphan dir\t%s\tno access point reaches it\n", o)
			}
		}
		more(p, len(d.Orphans)+d.More, "orphan directories")
		if d.Error != "" {
			p("  directories\t%s\n", d.Error)
		}
	}
}

func more(p func(string, ...any), n int, what string) {
	if n > maxLines {
		p("  ...\t%d more %s (see --output json or --html)\n", n-maxLines, what)
	}
}

// writePlan lists the plan and, when applied, each action's result.
func (r *Report) writePlan(w io.Writer, pl *Plan) {
	fmt.Fprintln(w)
	switch {
	case len(pl.Actions) == 0:
		fmt.Fprintf(w, "plan (--fix): nothing to do: %s\n", pl.Note)
		return
	case pl.Applied:
		fmt.Fprintf(w, "plan (--fix --yes): %d actions, applied:\n", len(pl.Actions))
	default:
		fmt.Fprintf(w, "plan (--fix): %d actions; nothing was changed: apply with --fix --yes\n", len(pl.Actions))
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	defer tw.Flush()
	for _, a := range pl.Actions {
		result := ""
		if pl.Applied {
			result = "\t" + a.Result
			if a.Error != "" {
				result += ": " + a.Error
			}
		}
		what := "delete access point " + a.AccessPoint + " (" + a.Path + ")"
		if a.Kind == ActionReleaseRecord {
			what = "release the record of " + a.Volume
		}
		fmt.Fprintf(tw, "  %s\t%s\tvolume %s\tclaim %s\tcreated %s\t%s%s\n", a.FileSystem, what, a.Volume, a.Claim,
			a.Created.Format(time.RFC3339), a.Why, result)
	}
}
