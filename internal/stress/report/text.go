package report

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/efs-csi/efs-csi-driver/internal/plot"
)

// maxFindingLines bounds the findings listed per audit; the JSON has all.
const maxFindingLines = 20

// Summary writes the human summary: what ran, how fast, what failed, what
// the audits found.
func (r *Report) Summary(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	defer tw.Flush()
	p := func(format string, a ...any) { fmt.Fprintf(tw, format, a...) }

	label := ""
	if r.Label != "" {
		label = " (" + r.Label + ")"
	}
	p("efs-csi-stress: %s run%s, %.1fs, outcome %s\n", r.Mode, label, r.Seconds, strings.ToUpper(r.Outcome))
	if r.Error != "" {
		p("error: %s\n", r.Error)
	}
	v := r.Volumes
	p("volumes: %d requested, %d created, %d failed (%s), %d duplicated, %d deleted during provisioning, %d deleted, %d undeleted\n\n",
		v.Requested, v.Created, v.Failed, codeList(v.FailedByCode), v.Duplicated, v.DeleteDuringCreate, v.Deleted, v.Undeleted)

	p("phase\tvolumes\tduration\tthroughput\n")
	for _, ph := range r.Phases {
		p("%s\t%d\t%s\t%.1f vol/s\n", ph.Name, ph.Volumes, plot.Secs(ph.Seconds), ph.Throughput)
	}
	p("\n")
	p("RPC calls\tcalls\tok\tretries\tp50\tp95\tp99\tmax\terrors by code\n")
	for _, l := range r.RPCs {
		p("%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", l.Name, l.Count, l.OK, l.Retries,
			plot.Secs(l.P50), plot.Secs(l.P95), plot.Secs(l.P99), plot.Secs(l.Max), codeList(l.ByCode))
	}
	p("operations (first call to final answer)\t\t\t\t\t\t\t\t\n")
	for _, l := range r.Ops {
		p("%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", l.Name, l.Count, l.OK, l.Retries,
			plot.Secs(l.P50), plot.Secs(l.P95), plot.Secs(l.P99), plot.Secs(l.Max), codeList(l.ByCode))
	}
	p("\n")
	chaos := "off"
	if r.Chaos.Enabled {
		chaos = fmt.Sprintf("%d driver kills", r.Chaos.Kills)
	}
	p("retries: %d client calls repeated; chaos: %s; unexpected driver exits: %d\n", r.Retries(), chaos, r.Chaos.UnexpectedExits)
	if r.Driver.Scraped {
		p("driver: %.0f EFS API calls, EFS API retries %s\n", r.Driver.APICalls, floatList(r.Driver.APIRetries))
		if n := r.Volumes.Created; n > 0 && r.Driver.RequestsByRPC != nil {
			p("EFS requests per volume: CreateVolume %.2f, DeleteVolume %.2f (%s)\n",
				r.RequestsPerVolume("CreateVolume"), r.RequestsPerVolume("DeleteVolume"), floatList(r.Driver.RequestsByRPC))
		}
	}
	if len(r.Emulator.Counts) > 0 {
		p("emulator requests: %s\n", intList(r.Emulator.Counts))
	}
	for _, inc := range r.Incidents {
		p("incident: %s\n", inc)
	}
	if len(r.Audits) > 0 {
		p("\naudit")
		for _, a := range r.Audits {
			p("\t%s", a.Name)
		}
		p("\n")
		p("access points seen")
		for _, a := range r.Audits {
			p("\t%d", a.Report.AccessPoints)
		}
		p("\n")
		p("live volumes")
		for _, a := range r.Audits {
			p("\t%d", a.Report.LiveVolumes)
		}
		p("\n")
		for i, f := range r.Audits[0].Report.Figures() {
			p("%s", f.Name)
			for _, a := range r.Audits {
				p("\t%d", a.Report.Figures()[i].Value)
			}
			p("\n")
		}
		tw.Flush()
		for _, a := range r.Audits {
			all := a.Report.All()
			for i, f := range all {
				if i == maxFindingLines {
					p("finding (%s): ... and %d more (see the JSON report)\n", a.Name, len(all)-i)
					break
				}
				p("finding (%s): %s\n", a.Name, f)
			}
		}
	}
	p("\nresult: %s, %d findings\n", strings.ToUpper(r.Outcome), r.Findings())
	for _, f := range []struct{ what, path string }{{"JSON report", r.Files.JSON}, {"HTML report", r.Files.HTML}, {"driver log", r.Files.DriverLog}} {
		if f.path != "" {
			p("%s: %s\n", f.what, f.path)
		}
	}
	if r.Comparison != nil {
		tw.Flush()
		fmt.Fprintln(w)
		r.Comparison.Summary(w)
	}
}

// Summary writes the comparison as a table, both runs side by side, and
// both results.
func (c *Comparison) Summary(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	defer tw.Flush()
	p := func(format string, a ...any) { fmt.Fprintf(tw, format, a...) }
	p("comparison: default driver flags vs %s added (same workload and seed, a fresh emulator and driver each)\n", strings.Join(c.DriverArgs, " "))
	p("figure\tdefault\tcompared\tdefault/compared\n")
	p("outcome\t%s\t%s\t\n", c.Outcomes[0], c.Outcomes[1])
	p("audit findings\t%d\t%d\t\n", c.Findings[0], c.Findings[1])
	for _, f := range c.Figures {
		p("%s\t%s\t%s\t%s\n", f.Name, f.Show(f.Default), f.Show(f.Compared), ratio(f.Ratio))
	}
	p("\nresult: default %s, %d findings; compared %s, %d findings\n",
		strings.ToUpper(c.Outcomes[0]), c.Findings[0], strings.ToUpper(c.Outcomes[1]), c.Findings[1])
	for i, run := range []string{"default", "compared"} {
		if c.Files[i].JSON != "" {
			p("%s run's JSON report: %s\n", run, c.Files[i].JSON)
		}
	}
}

func intList[V int | int64](m map[string]V) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if parts == nil {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func floatList(m map[string]float64) string {
	ints := map[string]int64{}
	for k, v := range m {
		ints[k] = int64(v)
	}
	return intList(ints)
}
