package driver

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

// scriptedPinger answers each check from a script and records the gauge as
// each check starts (what the previous checks made of it); it ends the run
// once the script is played.
type scriptedPinger struct {
	script []error
	h      *efsHealth
	cancel context.CancelFunc
	gauge  []float64
}

func (p *scriptedPinger) Ping(context.Context) error {
	p.gauge = append(p.gauge, p.h.value())
	if len(p.gauge) > len(p.script) {
		p.cancel()
		return nil
	}
	return p.script[len(p.gauge)-1]
}

var errPing500 = errors.New("EFS answered 500 InternalServerError")

// The health check says what the driver does: one failed check (an
// injected 500) is not an outage, and no message claims calls are not sent
// or refused meanwhile: they are sent, and only those EFS does not answer
// end UNAVAILABLE. Only failures in a row make the API unreachable.
func TestEFSHealthReportsAnOutageOnlyAfterFailuresInARow(t *testing.T) {
	ok := error(nil)
	for _, tc := range []struct {
		name   string
		script []error
		gauge  []float64 // the gauge after each check
		warns  int       // "unreachable" warnings
		agains int       // "reachable again" lines
	}{
		{"one 500 between answers", []error{ok, errPing500, ok}, []float64{1, 1, 1}, 0, 0},
		{"two 500s in a row", []error{ok, errPing500, errPing500, ok}, []float64{1, 1, 1, 1}, 0, 0},
		{"an outage and its end", []error{ok, errPing500, errPing500, errPing500, errPing500, ok}, []float64{1, 1, 1, 0, 0, 1}, 1, 1},
		{"unreachable from the start", []error{errPing500, errPing500, errPing500}, []float64{-1, -1, 0}, 1, 0},
		{"one 500 at the start", []error{errPing500, ok}, []float64{-1, 1}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			h := newEFSHealth(nil, slog.New(slog.NewTextHandler(&logs, nil)))
			h.every, h.recheckEvery = time.Millisecond, time.Millisecond
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p := &scriptedPinger{script: tc.script, h: h, cancel: cancel}
			h.ping = p
			h.run(ctx)
			if got := p.gauge[1:]; !slices.Equal(got, tc.gauge) {
				t.Errorf("gauge after each check %v, want %v", got, tc.gauge)
			}
			out := logs.String()
			if n := strings.Count(out, "level=WARN"); n != tc.warns {
				t.Errorf("%d warnings, want %d:\n%s", n, tc.warns, out)
			}
			if n := strings.Count(out, "reachable again"); n != tc.agains {
				t.Errorf("%d recoveries logged, want %d:\n%s", n, tc.agains, out)
			}
			for _, overstated := range []string{"answer UNAVAILABLE until", "not sent"} {
				if strings.Contains(out, overstated) {
					t.Errorf("the log says %q, but calls are sent all along:\n%s", overstated, out)
				}
			}
			if strings.Contains(out, "500") && !strings.Contains(out, "still sent") {
				t.Errorf("a failed check is logged without saying that calls are still sent:\n%s", out)
			}
		})
	}
}
