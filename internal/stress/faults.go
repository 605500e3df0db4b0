package stress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
)

// profile is the emulator fault set a profile name stands for. rate scales
// the probabilistic profiles (errors, lost answers).
func profile(name string, rate float64) (map[emulator.Op]emulator.Fault, error) {
	switch name {
	case ProfileNone:
		return nil, nil
	case ProfileLatency:
		// Every API call takes 10-30 ms: a slow region, calls overlap longer.
		return map[emulator.Op]emulator.Fault{emulator.AllOps: {Latency: 10 * time.Millisecond, Jitter: 20 * time.Millisecond}}, nil
	case ProfileThrottle:
		// EFS throttles fast creation: the driver must back off, not fail.
		return map[emulator.Op]emulator.Fault{
			emulator.OpCreateAccessPoint:    {ThrottleRate: 100, ThrottleBurst: 20},
			emulator.OpDeleteAccessPoint:    {ThrottleRate: 100, ThrottleBurst: 20},
			emulator.OpDescribeAccessPoints: {ThrottleRate: 200, ThrottleBurst: 50},
			// An s3files-ap run's operations, throttled alike.
			emulator.OpS3CreateAccessPoint: {ThrottleRate: 100, ThrottleBurst: 20},
			emulator.OpS3DeleteAccessPoint: {ThrottleRate: 100, ThrottleBurst: 20},
			emulator.OpS3ListAccessPoints:  {ThrottleRate: 200, ThrottleBurst: 50},
			emulator.OpS3GetAccessPoint:    {ThrottleRate: 200, ThrottleBurst: 50},
		}, nil
	case ProfileErrors:
		// InternalServerError before applying, on every operation.
		return map[emulator.Op]emulator.Fault{emulator.AllOps: {ErrorRate: rate}}, nil
	case ProfileLostAnswers:
		// The change is committed, then the answer is lost: the case that
		// makes retries dangerous.
		return map[emulator.Op]emulator.Fault{
			emulator.OpCreateAccessPoint:   {LostAnswerRate: rate},
			emulator.OpDeleteAccessPoint:   {LostAnswerRate: rate},
			emulator.OpS3CreateAccessPoint: {LostAnswerRate: rate},
			emulator.OpS3DeleteAccessPoint: {LostAnswerRate: rate},
		}, nil
	}
	return nil, fmt.Errorf("--fault-profile %q: want none, latency, throttle, errors or lost-answers", name)
}

// faultControl sets and clears the emulator's faults and reads its counters,
// in-process or through its control endpoint.
type faultControl interface {
	set(ctx context.Context, faults map[emulator.Op]emulator.Fault) error
	reset(ctx context.Context) error
	counts(ctx context.Context) (map[string]int64, error)
}

// local drives an in-process emulator.
type local struct{ e *emulator.Emulator }

func (l local) set(_ context.Context, f map[emulator.Op]emulator.Fault) error {
	if f[emulator.AllOps] != (emulator.Fault{}) {
		l.e.SetFault(emulator.AllOps, f[emulator.AllOps])
	}
	for op, fault := range f {
		if op != emulator.AllOps {
			l.e.SetFault(op, fault)
		}
	}
	return nil
}

func (l local) reset(context.Context) error { l.e.ResetFaults(); return nil }

func (l local) counts(context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	for op, n := range l.e.Counts() {
		out[string(op)] = n
	}
	return out, nil
}

// remote drives an emulator through /_emulator/ on its API listener
// (docs/emulator.md).
type remote struct{ base string }

func (r remote) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(r.base, "/")+"/_emulator"+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("emulator control %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("emulator control %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

func (r remote) set(ctx context.Context, f map[emulator.Op]emulator.Fault) error {
	return r.do(ctx, http.MethodPut, "/faults", f, nil)
}

func (r remote) reset(ctx context.Context) error {
	return r.do(ctx, http.MethodPost, "/faults/reset", nil, nil)
}

func (r remote) counts(ctx context.Context) (map[string]int64, error) {
	var out map[string]int64
	return out, r.do(ctx, http.MethodGet, "/counts", nil, &out)
}
