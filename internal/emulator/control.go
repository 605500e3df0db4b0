package emulator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// The control endpoint, on the API's listener (docs/emulator.md):
//
//	GET  /_emulator/healthz        200 "ok"
//	GET  /_emulator/faults         the faults in force, {"Op": Fault, ...}
//	PUT  /_emulator/faults         sets the faults of the operations named ("*": all)
//	POST /_emulator/faults/reset   clears every fault
//	GET  /_emulator/counts         requests per operation, {"Op": n, ...}
//	POST /_emulator/counts/reset   sets the counters to zero
//	GET  /_emulator/accounts       roles, access key accounts, file system owners (AccountsConfig)
//	PUT  /_emulator/accounts       adds roles, assigns access keys, creates/owns file systems
//	GET  /_emulator/clock          {"now": RFC 3339, "offset": "1h"}
//	PUT  /_emulator/clock          {"offset": "-50m"}: moves the clock credentials expire by
//
// Accounts in JSON: {"roles": [{"arn": "arn:aws:iam::111122223333:role/efs",
// "externalId": "x"}], "accessKeys": {"AKIDTEST": "123456789012"},
// "fileSystems": {"fs-0123456789abcdef0": "111122223333"}}.
//
// Faults in JSON use Go duration strings: {"CreateAccessPoint":
// {"latency": "50ms", "jitter": "20ms", "randomThrottleRate": 0.05,
// "throttleRate": 5, "throttleBurst": 1, "errorRate": 0.1,
// "lostAnswerRate": 0.1, "lostAnswerMode": "drop", "visibilityDelay": "2s"}}.
// A PUT replaces the fault of each operation it names, "*" first: a fault
// named for one operation does not add to "*"'s there (Fault.Refine
// builds one that does).

const controlPrefix = "/_emulator"

func (e *Emulator) controlRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+controlPrefix+"/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET "+controlPrefix+"/faults", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, e.Faults())
	})
	mux.HandleFunc("PUT "+controlPrefix+"/faults", func(w http.ResponseWriter, r *http.Request) {
		var set map[Op]Fault
		if aerr := decodeBody(r, &set); aerr != nil {
			writeError(w, aerr)
			return
		}
		if err := validateFaults(set); err != nil {
			writeError(w, badRequest("%v", err))
			return
		}
		e.faults.setAll(set)
		e.log.Info("faults set", "faults", set)
		writeJSON(w, http.StatusOK, e.Faults())
	})
	mux.HandleFunc("POST "+controlPrefix+"/faults/reset", func(w http.ResponseWriter, _ *http.Request) {
		e.ResetFaults()
		e.log.Info("faults reset")
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET "+controlPrefix+"/counts", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, e.Counts())
	})
	mux.HandleFunc("POST "+controlPrefix+"/counts/reset", func(w http.ResponseWriter, _ *http.Request) {
		e.ResetCounts()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET "+controlPrefix+"/accounts", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, e.Accounts())
	})
	mux.HandleFunc("PUT "+controlPrefix+"/accounts", func(w http.ResponseWriter, r *http.Request) {
		var c AccountsConfig
		if aerr := decodeBody(r, &c); aerr != nil {
			writeError(w, aerr)
			return
		}
		if err := e.Configure(c); err != nil {
			writeError(w, badRequest("%v", err))
			return
		}
		writeJSON(w, http.StatusOK, e.Accounts())
	})
	mux.HandleFunc("GET "+controlPrefix+"/clock", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, e.clock())
	})
	mux.HandleFunc("PUT "+controlPrefix+"/clock", func(w http.ResponseWriter, r *http.Request) {
		var c clockJSON
		if aerr := decodeBody(r, &c); aerr != nil {
			writeError(w, aerr)
			return
		}
		d, err := time.ParseDuration(c.Offset)
		if err != nil {
			writeError(w, badRequest("offset: %v", err))
			return
		}
		e.SetClockOffset(d)
		e.log.Info("clock offset set", "offset", d)
		writeJSON(w, http.StatusOK, e.clock())
	})
}

type clockJSON struct {
	Now    string `json:"now,omitempty"`
	Offset string `json:"offset"`
}

func (e *Emulator) clock() clockJSON {
	return clockJSON{Now: e.Now().UTC().Format(time.RFC3339Nano), Offset: time.Duration(e.clockOffset.Load()).String()}
}

// faultJSON is Fault with durations as strings such as "50ms".
type faultJSON struct {
	Latency            string   `json:"latency,omitempty"`
	Jitter             string   `json:"jitter,omitempty"`
	RandomThrottleRate float64  `json:"randomThrottleRate,omitempty"`
	ThrottleRate       float64  `json:"throttleRate,omitempty"`
	ThrottleBurst      int      `json:"throttleBurst,omitempty"`
	ErrorRate          float64  `json:"errorRate,omitempty"`
	LostAnswerRate     float64  `json:"lostAnswerRate,omitempty"`
	LostAnswerMode     LostMode `json:"lostAnswerMode,omitempty"`
	VisibilityDelay    string   `json:"visibilityDelay,omitempty"`
}

func durString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// MarshalJSON writes durations as strings such as "50ms".
func (f Fault) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultJSON{
		Latency: durString(f.Latency), Jitter: durString(f.Jitter), RandomThrottleRate: f.RandomThrottleRate,
		ThrottleRate: f.ThrottleRate, ThrottleBurst: f.ThrottleBurst,
		ErrorRate: f.ErrorRate, LostAnswerRate: f.LostAnswerRate, LostAnswerMode: f.LostAnswerMode,
		VisibilityDelay: durString(f.VisibilityDelay),
	})
}

// UnmarshalJSON reads durations as strings such as "50ms".
func (f *Fault) UnmarshalJSON(b []byte) error {
	var j faultJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	out := Fault{RandomThrottleRate: j.RandomThrottleRate, ThrottleRate: j.ThrottleRate, ThrottleBurst: j.ThrottleBurst, ErrorRate: j.ErrorRate,
		LostAnswerRate: j.LostAnswerRate, LostAnswerMode: j.LostAnswerMode}
	for _, d := range []struct {
		name, s string
		to      *time.Duration
	}{{"latency", j.Latency, &out.Latency}, {"jitter", j.Jitter, &out.Jitter}, {"visibilityDelay", j.VisibilityDelay, &out.VisibilityDelay}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		*d.to = v
	}
	*f = out
	return nil
}
