package audit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The table (--output table) and the HTML page (--html) show the same
// figures and the same lists, built here once, so that they cannot
// disagree: a figure is a row of the summary, a section a list of one
// kind. Both list at most listCap lines of a kind per file system and
// name at most holderCap access points of a shared GID, then say how
// many more there are; --output json lists every one.
const (
	listCap   = 20
	holderCap = 5
)

// Omits says what the table and the HTML page leave out.
var omits = fmt.Sprintf("lists at most %d of each kind per file system (access points without a PV, phantoms, shared GIDs and their first %d holders, stale records, orphan directories), then how many more; --output json lists every one",
	listCap, holderCap)

// jsonOmits says what --output json leaves out.
var jsonOmits = fmt.Sprintf("nothing found: every access point without a PV, phantom, shared GID and its holders, stale record; orphan directories beyond %d per file system are counted (directories.more), and EFS requests beyond %d only counted (requests.notSampled)",
	maxOrphanDirs, maxSamples)

// countsOf adds up one file system's findings.
func countsOf(fs *FileSystem) Totals {
	c := Totals{AccessPoints: fs.AccessPoints, ByOwner: map[Owner]int{}, Referenced: fs.Referenced,
		Unreferenced: len(fs.Unreferenced), Phantoms: len(fs.Phantoms), StaleRecords: len(fs.StaleRecords), Findings: fs.Findings}
	for o, n := range fs.ByOwner {
		c.ByOwner[o] = n
	}
	for _, u := range fs.Unreferenced {
		if u.Leak {
			c.Leaks++
		}
		if u.Finding {
			c.UnreferencedFindings++
		}
	}
	for _, g := range fs.SharedGIDs {
		if g.Intended {
			c.IntendedSharedGIDs++
		} else {
			c.SharedGIDs++
		}
	}
	for _, s := range fs.StaleRecords {
		if s.Leak {
			c.StaleLeaks++
		}
	}
	if d := fs.Directories; d != nil {
		c.OrphanDirs = len(d.Orphans) + d.More
	}
	return c
}

// add adds o to t.
func (t *Totals) add(o Totals) {
	t.AccessPoints += o.AccessPoints
	for k, n := range o.ByOwner {
		t.ByOwner[k] += n
	}
	t.Referenced += o.Referenced
	t.Unreferenced += o.Unreferenced
	t.UnreferencedFindings += o.UnreferencedFindings
	t.Leaks += o.Leaks
	t.Phantoms += o.Phantoms
	t.SharedGIDs += o.SharedGIDs
	t.IntendedSharedGIDs += o.IntendedSharedGIDs
	t.StaleRecords += o.StaleRecords
	t.StaleLeaks += o.StaleLeaks
	t.OrphanDirs += o.OrphanDirs
	t.Findings += o.Findings
}

// figure is a row of the summary: a label and its value per file system
// (fs nil: the totals).
type figure struct {
	Label string
	value func(fs *FileSystem, c *Totals) string
}

func itoa(n int) string { return strconv.Itoa(n) }

var figures = func() []figure {
	fs := []figure{
		{"access points", func(_ *FileSystem, c *Totals) string { return itoa(c.AccessPoints) }},
		{"of the limit", func(fs *FileSystem, _ *Totals) string {
			if fs == nil {
				return ""
			}
			return fmt.Sprintf("%s of %d", pct(fs.LimitUsed), fs.Limit)
		}},
	}
	for _, o := range Owners {
		fs = append(fs, figure{"owner " + string(o), func(_ *FileSystem, c *Totals) string { return itoa(c.ByOwner[o]) }})
	}
	return append(fs,
		figure{"named by a PV", func(_ *FileSystem, c *Totals) string { return itoa(c.Referenced) }},
		figure{"no PV", func(_ *FileSystem, c *Totals) string { return itoa(c.Unreferenced) }},
		figure{"no PV: findings", func(_ *FileSystem, c *Totals) string { return itoa(c.UnreferencedFindings) }},
		figure{"no PV: provable leaks", func(_ *FileSystem, c *Totals) string { return itoa(c.Leaks) }},
		figure{"phantom PVs", func(_ *FileSystem, c *Totals) string { return itoa(c.Phantoms) }},
		figure{"shared GIDs", func(_ *FileSystem, c *Totals) string { return itoa(c.SharedGIDs) }},
		figure{"shared GIDs a class fixes (not findings)", func(_ *FileSystem, c *Totals) string { return itoa(c.IntendedSharedGIDs) }},
		figure{"stale records", func(_ *FileSystem, c *Totals) string { return itoa(c.StaleRecords) }},
		figure{"stale records: provable leaks", func(_ *FileSystem, c *Totals) string { return itoa(c.StaleLeaks) }},
		figure{"orphan directories", func(fs *FileSystem, c *Totals) string {
			if fs != nil && fs.Directories == nil {
				return "not scanned"
			}
			return itoa(c.OrphanDirs)
		}},
		figure{"findings", func(_ *FileSystem, c *Totals) string { return itoa(c.Findings) }},
	)
}()

// summary is the figures by file system, and their totals when there is
// more than one: a header and rows of cells.
type summary struct {
	Head []string
	Rows [][]string
}

func (r *Report) summary() summary {
	s := summary{Head: []string{"figure"}}
	var ok []*FileSystem
	for _, fs := range r.FileSystems {
		s.Head = append(s.Head, fs.ID)
		ok = append(ok, fs)
	}
	if len(ok) > 1 {
		s.Head = append(s.Head, "total")
	}
	for _, f := range figures {
		row := []string{f.Label}
		for _, fs := range ok {
			if fs.Error != "" {
				row = append(row, "error")
				continue
			}
			row = append(row, f.value(fs, &fs.Counts))
		}
		if len(ok) > 1 {
			row = append(row, f.value(nil, &r.Totals))
		}
		s.Rows = append(s.Rows, row)
	}
	return s
}

// section is a list of one kind of a file system: its title, a header, at
// most listCap rows (each with a longer "why"), and how many more.
type section struct {
	Title string
	Head  []string
	// Class is each column's: "num" (a number: right-aligned, unbroken),
	// "word" (a short token: unbroken) or "" (text, broken anywhere to
	// fit).
	Class []string
	Rows  []row
	More  string
}

type row struct {
	Cells []string
	Bad   bool   // a provable leak, or a finding that needs a person
	Why   string // why it is (or is not) a finding
}

// moreLine says how many lines of a kind are not listed.
func moreLine(n int, what string) string {
	if n <= listCap {
		return ""
	}
	return fmt.Sprintf("... and %d more %s: the full list is in --output json", n-listCap, what)
}

// sections are a file system's lists, as the table and the page show them.
func (fs *FileSystem) sections() []section {
	var out []section
	if n := len(fs.Unreferenced); n > 0 {
		s := section{Title: fmt.Sprintf("access points no PersistentVolume names: %d, %d of them findings (%d provable leaks)", n, fs.Counts.UnreferencedFindings, fs.Counts.Leaks),
			Head:  []string{"finding", "access point", "path", "GID", "owner", "volume", "claim"},
			Class: []string{"word", "word", "", "num", "word", "", ""}, More: moreLine(n, "access points without a PV")}
		for _, u := range fs.Unreferenced[:min(n, listCap)] {
			kind := "no"
			switch {
			case u.Leak:
				kind = "LEAK"
			case u.Finding:
				kind = "yes"
			}
			gid := ""
			if u.GID != nil {
				gid = strconv.FormatInt(*u.GID, 10)
			}
			s.Rows = append(s.Rows, row{Cells: []string{kind, u.AccessPoint, u.Path, gid, string(u.Owner), orDash(u.Volume), orDash(u.Claim)},
				Bad: u.Leak, Why: u.Why + "; owner: " + u.OwnerWhy})
		}
		out = append(out, s)
	}
	if n := len(fs.Phantoms); n > 0 {
		s := section{Title: fmt.Sprintf("PersistentVolumes whose access point is gone (phantoms): %d", n),
			Head: []string{"PV", "claim", "StorageClass", "access point"}, Class: []string{"", "", "", "word"}, More: moreLine(n, "phantoms")}
		for _, p := range fs.Phantoms[:min(n, listCap)] {
			s.Rows = append(s.Rows, row{Cells: []string{p.PV, orDash(p.Claim), orDash(p.Class), p.AccessPoint}, Bad: true, Why: p.Why})
		}
		out = append(out, s)
	}
	if n := len(fs.SharedGIDs); n > 0 {
		s := section{Title: fmt.Sprintf("GIDs carried by more than one access point: %d, %d of them a class's fixed gid (not findings)", n, fs.Counts.IntendedSharedGIDs),
			Head: []string{"GID", "access points", "finding"}, Class: []string{"num", "num", ""}, More: moreLine(n, "shared GIDs")}
		for _, g := range fs.SharedGIDs[:min(n, listCap)] {
			finding := "yes"
			if g.Intended {
				finding = "no: a class fixes this gid"
			}
			s.Rows = append(s.Rows, row{Cells: []string{strconv.FormatInt(g.GID, 10), itoa(len(g.Holders)), finding}, Bad: !g.Intended, Why: holders(g.Holders)})
		}
		out = append(out, s)
	}
	if n := len(fs.StaleRecords); n > 0 {
		s := section{Title: fmt.Sprintf("records whose access point is gone: %d, %d of them provable leaks", n, fs.Counts.StaleLeaks),
			Head: []string{"provable leak", "volume", "access point", "claim"}, Class: []string{"word", "", "word", ""}, More: moreLine(n, "stale records")}
		for _, st := range fs.StaleRecords[:min(n, listCap)] {
			s.Rows = append(s.Rows, row{Cells: []string{yesNo(st.Leak), st.Volume, orDash(st.AccessPoint), orDash(st.Claim)}, Bad: st.Leak, Why: st.Why})
		}
		out = append(out, s)
	}
	if d := fs.Directories; d != nil && d.Error != "" {
		out = append(out, section{Title: fmt.Sprintf("directories under %s of %s: %d read, then ERROR: %s", join(d.BasePaths), d.Root, d.Read, d.Error)})
	}
	if d := fs.Directories; d != nil && len(d.Orphans)+d.More > 0 {
		n := len(d.Orphans) + d.More
		s := section{Title: fmt.Sprintf("directories under %s that no access point reaches: %d (of %d read)", join(d.BasePaths), n, d.Read),
			Head: []string{"directory"}, Class: []string{""}, More: moreLine(n, "orphan directories")}
		for _, o := range d.Orphans[:min(len(d.Orphans), listCap)] {
			s.Rows = append(s.Rows, row{Cells: []string{o}})
		}
		out = append(out, s)
	}
	if d := fs.Directories; d != nil && len(d.SnapshotsLeft) > 0 {
		n := len(d.SnapshotsLeft)
		s := section{Title: fmt.Sprintf("directories in the snapshot area that no snapshot or unfinished restore of the record accounts for: %d (%d snapshots recorded)", n, d.Snapshots),
			Head: []string{"directory"}, Class: []string{""}, More: moreLine(n, "snapshot area directories")}
		for _, o := range d.SnapshotsLeft[:min(n, listCap)] {
			s.Rows = append(s.Rows, row{Cells: []string{o}})
		}
		out = append(out, s)
	}
	if d := fs.Directories; d != nil && len(d.Trash) > 0 {
		n := len(d.Trash)
		s := section{Title: fmt.Sprintf("directories of deleted volumes waiting in root removal's trash: %d (not findings: each is purged, or moved back if an access point reaches its path, once its window has passed)", n),
			Head: []string{"path", "moved", "state", "in the trash as"}, Class: []string{"", "word", "word", ""}, More: moreLine(n, "directories in the trash")}
		for _, t := range d.Trash[:min(n, listCap)] {
			state := "waiting"
			if t.Purging {
				state = "purging"
			}
			s.Rows = append(s.Rows, row{Cells: []string{t.Path, t.MovedAt.Format(time.RFC3339), state, t.Entry}})
		}
		out = append(out, s)
	}
	return out
}

// holders names the first holderCap holders of a shared GID.
func holders(hs []GIDHolder) string {
	var parts []string
	for _, h := range hs[:min(len(hs), holderCap)] {
		parts = append(parts, fmt.Sprintf("%s (%s, PV %s, namespace %s)", h.AccessPoint, h.Owner, join(h.PVs), join(h.Namespaces)))
	}
	s := strings.Join(parts, "; ")
	if len(hs) > holderCap {
		s += fmt.Sprintf("; and %d more: the full list is in --output json", len(hs)-holderCap)
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// line says what the EFS requests were, the expected answers (the "not
// found" that proves a phantom) apart from the errors.
func (rq Requests) line() string {
	var parts []string
	for _, k := range sortedKeys(rq.ByOutcome) {
		if k != outcomeExpectedNotFound {
			parts = append(parts, fmt.Sprintf("%s %d", k, rq.ByOutcome[k]))
		}
	}
	if n := rq.ByOutcome[outcomeExpectedNotFound]; n > 0 {
		parts = append(parts, fmt.Sprintf("not found as expected %d (phantoms' access points, confirmed gone: not errors)", n))
	}
	if parts == nil {
		parts = []string{"none"}
	}
	return fmt.Sprintf("%d, %d retries: %s", rq.Total, rq.Retries, strings.Join(parts, ", "))
}

// Rows are the plan's actions as the table and the page show them
// (every one: it is what --fix --yes does).
func (p *Plan) Rows() [][]string {
	var out [][]string
	for _, a := range p.Actions {
		what := "delete access point " + a.AccessPoint + " (" + a.Path + ")"
		if a.Kind == ActionReleaseRecord {
			what = "release the record of " + a.Volume
		}
		result := ""
		if p.Applied {
			result = a.Result
			if a.Error != "" {
				result += ": " + a.Error
			}
		}
		out = append(out, []string{a.FileSystem, what, a.Volume, orDash(a.Claim), a.Created.Format(time.RFC3339), a.Why, result})
	}
	return out
}
