package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report, indented.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", f*100) }

// WriteTable writes the report for a terminal: what was read, the
// figures by file system, each file system's lists (at most listCap lines
// of a kind, as the HTML page), the plan, and the result.
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
	for _, fs := range r.FileSystems {
		p("file system %s: %s API, %s credentials", fs.ID, fs.API, fs.Credentials)
		if len(fs.Classes) > 0 {
			p(", StorageClasses %s", join(fs.Classes))
		}
		if fs.Error != "" {
			p(": ERROR: %s", fs.Error)
		}
		p("\n")
	}
	p("\n")
	sum := r.summary()
	p("%s\n", strings.Join(sum.Head, "\t"))
	for _, row := range sum.Rows {
		p("%s\n", strings.Join(row, "\t"))
	}
	tw.Flush()
	for _, fs := range r.FileSystems {
		writeSections(w, fs)
	}
	if pl := r.Plan; pl != nil {
		r.writePlan(w, pl)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
	fmt.Fprintf(w, "\nEFS requests: %s\n", r.Requests.line())
	fmt.Fprintf(w, "This table %s.\n", omits)
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

// writeSections writes one file system's lists, each line's reason at its
// end.
func writeSections(w io.Writer, fs *FileSystem) {
	secs := fs.sections()
	if len(secs) == 0 && fs.LimitUsed < 0.8 {
		return
	}
	fmt.Fprintf(w, "\n%s:\n", fs.ID)
	if fs.LimitUsed >= 0.8 {
		fmt.Fprintf(w, "  limit: %d of %d access points (%s): %d left\n", fs.AccessPoints, fs.Limit, pct(fs.LimitUsed), fs.Limit-fs.AccessPoints)
	}
	for _, s := range secs {
		fmt.Fprintf(w, "  %s\n", s.Title)
		if len(s.Head) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		why := slices.ContainsFunc(s.Rows, func(r row) bool { return r.Why != "" })
		head := s.Head
		if why {
			head = append(slices.Clone(head), "why")
		}
		fmt.Fprintf(tw, "    %s\n", strings.Join(head, "\t"))
		for _, r := range s.Rows {
			cells := r.Cells
			if why {
				cells = append(slices.Clone(cells), r.Why)
			}
			fmt.Fprintf(tw, "    %s\n", strings.Join(cells, "\t"))
		}
		tw.Flush()
		if s.More != "" {
			fmt.Fprintf(w, "    %s\n", s.More)
		}
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
	for _, c := range pl.Rows() {
		fmt.Fprintf(tw, "  %s\t%s\tvolume %s\tclaim %s\tcreated %s\t%s", c[0], c[1], c[2], c[3], c[4], c[5])
		if pl.Applied {
			fmt.Fprintf(tw, "\t%s", c[6])
		}
		fmt.Fprintln(tw)
	}
}
