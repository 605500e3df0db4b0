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

// faultSet is the faults of some operations (emulator.AllOps: of every one).
type faultSet = map[emulator.Op]emulator.Fault

// profile is the emulator fault set a profile name stands for. rate scales
// the probabilistic profiles (errors, lost answers, random throttles); the
// fault-mix storm has its own rates.
func profile(name string, rate float64) (faultSet, error) {
	switch name {
	case ProfileNone:
		return nil, nil
	case ProfileLatency:
		// Every API call takes 10-30 ms: a slow region, calls overlap longer.
		return faultSet{emulator.AllOps: {Latency: 10 * time.Millisecond, Jitter: 20 * time.Millisecond}}, nil
	case ProfileThrottle:
		// EFS throttles fast creation: the driver must back off, not fail.
		return buckets(100, 20, 200, 50), nil
	case ProfileTokenBucket:
		// Issue 21's token buckets: 20 mutations/s of each kind, burst 20.
		return buckets(20, 20, 50, 50), nil
	case ProfileRandomThrottle:
		// Throttles that no pacing avoids: the driver must retry, and not
		// slow down more than the throttles make it.
		return randomThrottles(rate), nil
	case ProfileThrottleMix:
		return combine(buckets(20, 20, 50, 50), randomThrottles(rate)), nil
	case ProfileFaultMix:
		return faultMix(), nil
	case ProfileFaultMixBucket:
		// Issue 30's storm: throttles that the driver's rate causes (one
		// operation's bucket) among those it does not, and lost answers.
		return combine(faultMix(), each(emulator.Fault{ThrottleRate: 50, ThrottleBurst: 50},
			emulator.OpCreateAccessPoint, emulator.OpS3CreateAccessPoint)), nil
	case ProfileErrors:
		// InternalServerError before applying, on every operation.
		return faultSet{emulator.AllOps: {ErrorRate: rate}}, nil
	case ProfileListingLag:
		return faultSet{emulator.OpCreateAccessPoint: {VisibilityDelay: time.Second},
			emulator.OpS3CreateAccessPoint: {VisibilityDelay: time.Second}}, nil
	case ProfileLostAnswers:
		// The change is committed, then the answer is lost: the case that
		// makes retries dangerous.
		return each(emulator.Fault{LostAnswerRate: rate}, mutations...), nil
	}
	return nil, fmt.Errorf("--fault-profile %q: want one of %s", name, strings.Join(Profiles(), ", "))
}

// faultMix is issue 21's "fault proxy" storm: mutations applied and answered
// 500 (15%), random throttles (5%) and unapplied 500s (3%) on every
// operation.
func faultMix() faultSet {
	return combine(
		each(emulator.Fault{LostAnswerRate: 0.15, LostAnswerMode: emulator.Lost500}, append(mutations, tagging...)...),
		faultSet{emulator.AllOps: {RandomThrottleRate: 0.05, ErrorRate: 0.03}},
	)
}

// The operations that change access points (EFS's, and an s3files-ap
// run's), and those that tag them.
var (
	mutations = []emulator.Op{emulator.OpCreateAccessPoint, emulator.OpDeleteAccessPoint,
		emulator.OpS3CreateAccessPoint, emulator.OpS3DeleteAccessPoint}
	tagging = []emulator.Op{emulator.OpTagResource, emulator.OpS3TagResource}
)

// each is f on each of ops.
func each(f emulator.Fault, ops ...emulator.Op) faultSet {
	set := faultSet{}
	for _, op := range ops {
		set[op] = f
	}
	return set
}

// buckets throttles the access point operations, EFS's and an s3files-ap
// run's alike: creates and deletes each at mutate requests/s of burst
// mutateBurst, reads at read/s of burst readBurst.
func buckets(mutate float64, mutateBurst int, read float64, readBurst int) faultSet {
	return combine(
		each(emulator.Fault{ThrottleRate: mutate, ThrottleBurst: mutateBurst}, mutations...),
		each(emulator.Fault{ThrottleRate: read, ThrottleBurst: readBurst}, emulator.OpDescribeAccessPoints,
			emulator.OpS3ListAccessPoints, emulator.OpS3GetAccessPoint),
	)
}

// randomThrottles answers every operation ThrottlingException with
// probability rate, whatever the request rate.
func randomThrottles(rate float64) faultSet {
	return faultSet{emulator.AllOps: {RandomThrottleRate: rate}}
}

// combine puts several fault sets in force together: each operation gets
// every aspect (latency, random throttle, bucket, error, lost answer) any
// set gives it. Where two give it the same aspect, a fault named for the
// operation wins over one for every operation ("*"), and a later set over
// an earlier one. The emulator replaces an operation's fault with the one
// named for it (its "*" first), so a named fault here carries the "*"
// aspects too.
func combine(sets ...faultSet) faultSet {
	out := faultSet{}
	for _, set := range sets {
		for op, f := range set {
			out[op] = out[op].Refine(f)
		}
	}
	if all, ok := out[emulator.AllOps]; ok {
		for op, f := range out {
			out[op] = all.Refine(f)
		}
	}
	return out
}

// faultControl sets and clears the emulator's faults and reads its counters,
// in-process or through its control endpoint.
type faultControl interface {
	set(ctx context.Context, faults faultSet) error
	reset(ctx context.Context) error
	counts(ctx context.Context) (map[string]int64, error)
}

// local drives an in-process emulator.
type local struct{ e *emulator.Emulator }

func (l local) set(_ context.Context, f faultSet) error {
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

func (r remote) set(ctx context.Context, f faultSet) error {
	return r.do(ctx, http.MethodPut, "/faults", f, nil)
}

func (r remote) reset(ctx context.Context) error {
	return r.do(ctx, http.MethodPost, "/faults/reset", nil, nil)
}

func (r remote) counts(ctx context.Context) (map[string]int64, error) {
	var out map[string]int64
	return out, r.do(ctx, http.MethodGet, "/counts", nil, &out)
}
