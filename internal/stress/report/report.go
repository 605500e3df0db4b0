// Package report turns a stress run's records into figures and writes them
// as a text summary, a JSON file and a self-contained HTML page (inline SVG
// charts, no script, nothing fetched).
package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/efs-csi/efs-csi-driver/internal/plot"
	"github.com/efs-csi/efs-csi-driver/internal/stress/audit"
	"github.com/efs-csi/efs-csi-driver/internal/stress/workload"
)

// Report is everything a run measured and found. It is the JSON file's schema.
type Report struct {
	Started   time.Time `json:"started"`
	Seconds   float64   `json:"seconds"`
	Mode      string    `json:"mode"`            // embedded or remote
	Label     string    `json:"label,omitempty"` // which run of a comparison: "default" or the driver flags added
	Config    any       `json:"config"`
	Outcome   string    `json:"outcome"` // clean, findings, error, interrupted
	Error     string    `json:"error,omitempty"`
	Volumes   Volumes   `json:"volumes"`
	Phases    []Phase   `json:"phases"`
	RPCs      []Latency `json:"rpcs"`       // every call
	Ops       []Latency `json:"operations"` // first call to final answer, retries included
	Chaos     Chaos     `json:"chaos"`
	Driver    Driver    `json:"driver"`
	Emulator  Emulator  `json:"emulator,omitzero"`
	Audits    []Audit   `json:"audits"`
	Timeline  Timeline  `json:"timeline"`
	Events    []Event   `json:"events"`
	Files     Files     `json:"files"`
	Incidents []string  `json:"incidents,omitempty"` // things that went wrong outside the audit (driver crashes)
	// Comparison sets this run beside the same workload run again with
	// more driver flags (--compare-driver-arg).
	Comparison *Comparison `json:"comparison,omitempty"`
}

// Volumes counts the claims by outcome.
type Volumes struct {
	Requested          int            `json:"requested"`
	Created            int            `json:"created"` // got a volume (live or deleted later)
	Failed             int            `json:"failed"`  // final create error
	FailedByCode       map[string]int `json:"failedByCode,omitempty"`
	Unprovisioned      int            `json:"unprovisioned"` // failed, and not deleted while provisioning: a claim left without a volume
	Duplicated         int            `json:"duplicated"`
	DeleteDuringCreate int            `json:"deletedDuringCreate"`
	Deleted            int            `json:"deleted"`
	Undeleted          int            `json:"undeleted"`
}

// Phase is one stage of the run.
type Phase struct {
	Name       string  `json:"name"`
	Seconds    float64 `json:"seconds"`
	Volumes    int     `json:"volumes"`
	Throughput float64 `json:"volumesPerSecond"`
}

// Latency summarises one RPC (or operation): counts, codes, percentiles.
type Latency = plot.Latency

// Bucket counts latencies up to Le seconds (and above the previous bucket).
type Bucket = plot.Bucket

// Chaos counts what the driver went through.
type Chaos struct {
	Enabled         bool `json:"enabled"`
	Kills           int  `json:"kills"`
	UnexpectedExits int  `json:"unexpectedExits"`
}

// Driver holds what the driver's metrics said, summed over its restarts.
type Driver struct {
	Scraped    bool               `json:"scraped"`
	APIRetries map[string]float64 `json:"apiRetries,omitempty"` // by EFS operation
	APICalls   float64            `json:"apiCalls,omitempty"`
	// RequestsByRPC: EFS requests sent on behalf of each CSI method
	// (efs_csi_rpc_api_requests_total), retries and shared listings included.
	RequestsByRPC map[string]float64 `json:"requestsByRPC,omitempty"`
}

// Emulator holds the emulator's request counts (embedded runs, or remote runs
// given its endpoint).
type Emulator struct {
	Counts map[string]int64 `json:"counts,omitempty"`
}

// Audit is one named audit and what it found.
type Audit struct {
	Name   string        `json:"name"`
	Report *audit.Report `json:"report"`
}

// Event is a moment on the timeline.
type Event = plot.Event

// Timeline counts answers per time bucket, by series.
type Timeline = plot.Timeline

// Series is one line of the operations-over-time chart.
type Series = plot.Series

// Files lists what the run wrote.
type Files struct {
	JSON      string `json:"json,omitempty"`
	HTML      string `json:"html,omitempty"`
	DriverLog string `json:"driverLog,omitempty"`
}

// Findings is the total over every audit.
func (r *Report) Findings() int {
	n := 0
	for _, a := range r.Audits {
		n += a.Report.Total()
	}
	return n
}

// Retries is the number of calls that repeated an earlier one.
func (r *Report) Retries() int {
	n := 0
	for _, l := range r.RPCs {
		n += l.Retries
	}
	return n
}

// latency summarises durations; retries and codes are the caller's.
func latency(name string, ds []time.Duration, codesSeen []codes.Code, retries int) Latency {
	outcomes := make([]string, len(codesSeen))
	for i, c := range codesSeen {
		outcomes[i] = c.String()
	}
	return plot.NewLatency(name, ds, outcomes, codes.OK.String(), retries)
}

// FromCalls fills the RPC and operation figures and the timeline.
func (r *Report) FromCalls(calls []workload.Call, ops []workload.Op, events []workload.Event, total time.Duration) {
	r.RPCs, r.Ops = nil, nil
	for _, rpc := range []string{workload.RPCCreate, workload.RPCDelete} {
		var ds []time.Duration
		var cs []codes.Code
		retries := 0
		for _, c := range calls {
			if c.RPC == rpc {
				ds, cs = append(ds, c.Latency), append(cs, c.Code)
				if c.Attempt > 1 {
					retries++
				}
			}
		}
		r.RPCs = append(r.RPCs, latency(rpc, ds, cs, retries))
		ds, cs, retries = nil, nil, 0
		for _, o := range ops {
			if o.RPC == rpc {
				ds, cs = append(ds, o.Latency), append(cs, o.Code)
				retries += o.Attempts - 1
			}
		}
		r.Ops = append(r.Ops, latency(rpc, ds, cs, retries))
	}
	r.Events = nil
	for _, e := range events {
		r.Events = append(r.Events, Event{Seconds: e.At.Seconds(), Kind: e.Kind, Note: e.Note})
	}
	r.Timeline = timeline(calls, total)
}

// timeline buckets answers by the time they arrived, in at most 120 buckets
// of a round width.
func timeline(calls []workload.Call, total time.Duration) Timeline {
	t := plot.NewTimeline(total, "CreateVolume OK", "DeleteVolume OK", "retryable errors", "final errors")
	for _, c := range calls {
		at := c.Start + c.Latency
		switch {
		case c.Code == codes.OK && c.RPC == workload.RPCCreate:
			t.Add(0, at)
		case c.Code == codes.OK:
			t.Add(1, at)
		case workload.CreateOutcome(c.Code) == workload.RetryInBackground:
			t.Add(2, at)
		default:
			t.Add(3, at)
		}
	}
	return t
}

// FromVolumes counts the claims by outcome.
func (r *Report) FromVolumes(vs []workload.VolumeResult) {
	v := Volumes{Requested: len(vs), FailedByCode: map[string]int{}}
	for _, x := range vs {
		if x.Duplicate {
			v.Duplicated++
		}
		if x.DeleteDuringCreate {
			v.DeleteDuringCreate++
		}
		switch x.State {
		case workload.Failed:
			v.Failed++
			v.FailedByCode[x.FinalCode]++
			if !x.DeleteDuringCreate {
				v.Unprovisioned++
			}
		case workload.Deleted:
			v.Created++
			v.Deleted++
		case workload.Undeleted:
			v.Created++
			v.Undeleted++
		case workload.Live:
			v.Created++
		}
	}
	r.Volumes = v
}

// WriteJSON writes the report, indented.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func sortedCodes(m map[string]int) []string {
	ks := slices.Collect(maps.Keys(m))
	slices.SortFunc(ks, func(a, b string) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return ks
}

// codeList writes "Aborted 12, Unavailable 3" without OK.
func codeList(m map[string]int) string {
	s := ""
	for _, k := range sortedCodes(m) {
		if k == codes.OK.String() {
			continue
		}
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%s %d", k, m[k])
	}
	if s == "" {
		return "-"
	}
	return s
}
