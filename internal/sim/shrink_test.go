package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// shrinkRun makes a failing run smaller while it still breaks the same
// invariant (kind): fewer actors and controllers, then fewer decisions
// (delta debugging over the script), then faults turned into plain
// releases. It returns the config and the full decision list of the last
// failing replay.
func shrinkRun(t *testing.T, cfg Config, decisions []string, kind string) (Config, []string) {
	want, _, _ := strings.Cut(kind, "/")
	fails := func(c Config, sc []string) (*Result, bool) {
		r := runOne(t, c, sc, false)
		return r, r.Kind() == want
	}
	script := slices.Clone(decisions)
	try := func(c Config, sc []string) bool {
		if _, ok := fails(c, sc); ok {
			// The script as given: once it ends, the replay goes on
			// without faults, deterministically from the seed.
			cfg, script = c, sc
			return true
		}
		return false
	}
	// Fewer actors, controllers, clusters, and a plainer world.
	for changed := true; changed; {
		changed = false
		var cands []Config
		if cfg.Volumes > 1 {
			c := cfg
			c.Volumes--
			cands = append(cands, c)
		}
		if cfg.Dups > 0 {
			c := cfg
			c.Dups--
			cands = append(cands, c)
		}
		if cfg.Writers > 0 {
			c := cfg
			c.Writers--
			cands = append(cands, c)
		}
		for i := range cfg.Controllers {
			if cfg.Controllers[i] > 1 {
				c := cfg
				c.Controllers = slices.Clone(cfg.Controllers)
				c.Controllers[i]--
				cands = append(cands, c)
			}
		}
		if len(cfg.Controllers) > 1 {
			c := cfg
			c.Controllers = cfg.Controllers[:len(cfg.Controllers)-1]
			cands = append(cands, c)
		}
		if cfg.Lag > 0 {
			c := cfg
			c.Lag = 0
			cands = append(cands, c)
		}
		if cfg.FileSystems > 2 {
			c := cfg
			c.FileSystems--
			cands = append(cands, c)
		}
		if cfg.Down != 0 {
			c := cfg
			c.Down, c.DownAt = 0, 0
			cands = append(cands, c)
		}
		if cfg.Limit < 1000 {
			c := cfg
			c.Limit = 1000
			cands = append(cands, c)
		}
		for _, c := range cands {
			if try(c, script) {
				changed = true
				break
			}
		}
	}
	// Fewer decisions: remove chunks, halving their size.
	for chunk := max(len(script)/2, 1); chunk >= 1; chunk /= 2 {
		for i := 0; i < len(script); {
			cand := slices.Concat(script[:i], script[min(i+chunk, len(script)):])
			if !try(cfg, cand) {
				i += chunk
			}
		}
		if chunk == 1 {
			break
		}
	}
	// Plainer decisions: a fault becomes a release, a kill a drop.
	for i, d := range script {
		verb, arg, _ := strings.Cut(d, " ")
		switch verb {
		case "lost", "fail", "throttle":
			cand := slices.Clone(script)
			cand[i] = "ok " + arg
			try(cfg, cand)
		}
	}
	return cfg, script
}

// saveShrunk shrinks a failing seed and writes it as a scenario under
// testdata/found/, named by its kind and seed.
func saveShrunk(t *testing.T, cfg Config, r *Result, kind string) (string, error) {
	c, script := shrinkRun(t, cfg, r.Decisions, kind)
	final := runOne(t, c, script, false)
	script = final.Decisions // every decision spelled out: the same run
	dir := filepath.Join("testdata", "found")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := strings.ReplaceAll(kind, "/", "-")
	path := filepath.Join(dir, fmt.Sprintf("%s-seed%d.txt", name, cfg.Seed))
	return path, os.WriteFile(path, []byte(scenarioText(
		fmt.Sprintf("Found by seed %d (%s), shrunk from %d to %d decisions.\n%s", cfg.Seed, kind, len(r.Decisions), len(script), strings.Join(final.Violations, "\n")),
		c, script)), 0o644)
}

// scenarioText is a scenario file: comment, run directive, decisions, and
// the promised verdict: ok.
func scenarioText(comment string, c Config, script []string) string {
	var b strings.Builder
	for _, l := range strings.Split(comment, "\n") {
		b.WriteString("# " + l + "\n")
	}
	b.WriteString("run " + c.String() + "\n")
	for _, d := range script {
		b.WriteString(d + "\n")
	}
	b.WriteString("----\nok\n")
	return b.String()
}
