package report

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"google.golang.org/grpc/codes"
)

// Comparison is two runs of one workload (one seed, one configuration), each
// on a fresh emulator and driver: the default one, with the driver's usual
// flags, and the compared one, with DriverArgs added.
type Comparison struct {
	DriverArgs []string `json:"driverArgs"`
	// Outcomes, Findings and Files are the default run's, then the
	// compared one's.
	Outcomes [2]string `json:"outcomes"`
	Findings [2]int    `json:"findings"`
	Files    [2]Files  `json:"files"`
	Figures  []Figure  `json:"figures"`
}

// Figure is one measure of both runs. Ratio is default over compared,
// absent when the compared figure is 0.
type Figure struct {
	Name     string   `json:"name"`
	Default  float64  `json:"default"`
	Compared float64  `json:"compared"`
	Ratio    *float64 `json:"ratio,omitempty"`
}

// Compare sets the default run's figures beside the compared run's, which
// added driverArgs.
func Compare(def, compared *Report, driverArgs []string) *Comparison {
	c := &Comparison{DriverArgs: driverArgs, Outcomes: [2]string{def.Outcome, compared.Outcome},
		Findings: [2]int{def.Findings(), compared.Findings()}, Files: [2]Files{def.Files, compared.Files}}
	d, o := def.figures(), compared.figures()
	names := map[string]bool{}
	for _, figs := range [][]namedValue{d, o} {
		for _, f := range figs {
			if !names[f.name] {
				names[f.name] = true
				c.Figures = append(c.Figures, Figure{Name: f.name})
			}
		}
	}
	for i := range c.Figures {
		f := &c.Figures[i]
		f.Default, f.Compared = valueOf(d, f.Name), valueOf(o, f.Name)
		if f.Compared != 0 {
			r := f.Default / f.Compared
			f.Ratio = &r
		}
	}
	return c
}

type namedValue struct {
	name  string
	value float64
}

func valueOf(figs []namedValue, name string) float64 {
	for _, f := range figs {
		if f.name == name {
			return f.value
		}
	}
	return 0
}

// figures are what a comparison shows of one run: speed, EFS requests per
// created volume (each operation the emulator counted, the audit's listings
// included; then the driver's own count per CSI method), what failed.
func (r *Report) figures() []namedValue {
	var phaseSeconds float64
	figs := []namedValue{{"duration (s)", r.Seconds}}
	for _, p := range r.Phases {
		phaseSeconds += p.Seconds
		figs = append(figs, namedValue{p.Name + " vol/s", p.Throughput})
	}
	v := r.Volumes
	if phaseSeconds > 0 {
		figs = append(figs, namedValue{"create+delete vol/s", float64(v.Created+v.Deleted) / phaseSeconds})
	}
	for _, op := range slices.Sorted(maps.Keys(r.Emulator.Counts)) {
		if n := r.Emulator.Counts[op]; n > 0 {
			figs = append(figs, namedValue{op + " requests/volume", perVolume(float64(n), v.Created)})
		}
	}
	if r.Driver.Scraped {
		for _, rpc := range slices.Sorted(maps.Keys(r.Driver.RequestsByRPC)) {
			figs = append(figs, namedValue{"driver's EFS requests/volume for " + rpc, r.RequestsPerVolume(rpc)})
		}
		var retries float64
		for _, n := range r.Driver.APIRetries {
			retries += n
		}
		figs = append(figs, namedValue{"driver's EFS API retries", retries})
	}
	failed, byCode := 0, map[string]int{}
	for _, l := range r.RPCs {
		failed += l.Count - l.OK
		for code, n := range l.ByCode {
			byCode[code] += n
		}
	}
	figs = append(figs, namedValue{"CSI calls not OK", float64(failed)})
	// UNAVAILABLE always: the code of a call the driver gave up on.
	byCode[codes.Unavailable.String()] += 0
	for _, code := range sortedCodes(byCode) {
		if code != codes.OK.String() {
			figs = append(figs, namedValue{"CSI calls " + code, float64(byCode[code])})
		}
	}
	return append(figs,
		namedValue{"CSI calls retried", float64(r.Retries())},
		namedValue{"volumes created", float64(v.Created)},
		namedValue{"volumes failed", float64(v.Failed)},
	)
}

// RequestsPerVolume is the driver's EFS requests on behalf of a CSI method
// per created volume (0 without a created volume).
func (r *Report) RequestsPerVolume(rpc string) float64 {
	return perVolume(r.Driver.RequestsByRPC[rpc], r.Volumes.Created)
}

func perVolume(n float64, volumes int) float64 {
	if volumes == 0 {
		return 0
	}
	return n / float64(volumes)
}

// Show writes v, one of f's two values: as a whole number where both are
// whole, else with two decimals, so that the two columns read alike.
func (f Figure) Show(v float64) string {
	whole := func(x float64) bool { return x == math.Trunc(x) && math.Abs(x) < 1e15 }
	if whole(f.Default) && whole(f.Compared) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// ratio writes a figure's ratio, "-" where there is none.
func ratio(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *r)
}
