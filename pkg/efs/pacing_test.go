package efs_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// The pacing rule (pacer.reserve in retry.go): a call with a deadline waits
// for its rate token only if the time left afterwards covers an attempt;
// otherwise it fails at once with ErrPaced, before its deadline and without
// sending a request. The assertions are on
// outcomes (errors, requests that reached the server, whether the deadline
// had passed when the call returned), never on how long something took.

// wantShed checks err is a shed: ErrPaced, not the deadline error, and
// returned while ctx's deadline had not passed yet.
func wantShed(t *testing.T, ctx context.Context, err error) {
	t.Helper()
	if !errors.Is(err, efs.ErrPaced) {
		t.Fatalf("got %v, want ErrPaced", err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Errorf("got %v: a shed must not wrap the context's error", err)
	}
	if ctx.Err() != nil {
		t.Errorf("the call returned after its deadline (%v): it waited instead of failing at once", ctx.Err())
	}
}

// With 1/s and burst 1, after one call has taken the token: calls with a
// 300 ms deadline fail at once without a request; the tokens they reserved
// go back (ten of them do not push the next token ten seconds out), so a
// call with a 5 s deadline waits about a second and succeeds; a call without
// a deadline waits as before.
func TestPacingShortDeadlineFailsAtOnceLongDeadlineWaits(t *testing.T) {
	fake := newFake(t)
	c, _ := newClient(t, fake.URL(), func(cfg *efs.Config) {
		cfg.RateLimits = map[string]efs.RateLimit{efs.OpDeleteAccessPoint: {PerSecond: 1, Burst: 1}}
	})
	if err := deleteAP(c, t.Context()); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		err := deleteAP(c, ctx)
		wantShed(t, ctx, err)
		cancel()
		if errors.Is(err, efs.ErrUnavailable) {
			t.Fatalf("shed %d: got %v: nothing was sent, so the outcome is not in doubt", i, err)
		}
	}
	if got := fake.Requests(); got != 1 {
		t.Fatalf("%d requests reached the server, want 1: shed calls must send nothing", got)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := deleteAP(c, ctx); err != nil {
		t.Fatalf("5 s deadline, next token within ~1 s: %v", err)
	}
	if err := deleteAP(c, t.Context()); err != nil { // no deadline
		t.Fatalf("no deadline: %v", err)
	}
	if got := fake.Requests(); got != 3 {
		t.Errorf("%d requests reached the server, want 3", got)
	}
}

// A token that comes after the deadline is not waited for; one that leaves
// time for the attempt is.
func TestPacingWaitsOnlyIfTheTimeLeftCoversAnAttempt(t *testing.T) {
	fake := newFake(t)
	c, _ := newClient(t, fake.URL(), func(cfg *efs.Config) {
		cfg.RateLimits = map[string]efs.RateLimit{efs.OpDeleteAccessPoint: {PerSecond: 2, Burst: 1}}
	})
	if err := deleteAP(c, t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	wantShed(t, ctx, deleteAP(c, ctx)) // token 500 ms away
	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := deleteAP(c, ctx); err != nil {
		t.Fatalf("token 500 ms away, 5 s left: %v", err)
	}
	if got := fake.Requests(); got != 2 {
		t.Errorf("%d requests reached the server, want 2", got)
	}
}

// A burst far beyond the rate: 40 concurrent calls with a 2 s deadline at
// 10/s. Each call either succeeds or is shed at once; none waits in the
// queue until its deadline, every token taken leads to a request, and no
// request is sent that the caller no longer waits for.
func TestPacingBurstShedsInsteadOfMissingDeadlines(t *testing.T) {
	const calls = 40
	fake := newFake(t)
	c, _ := newClient(t, fake.URL(), func(cfg *efs.Config) {
		cfg.RateLimits = map[string]efs.RateLimit{efs.OpCreateAccessPoint: {PerSecond: 10, Burst: 1}}
	})
	errs := runBurst(calls, 2*time.Second, func(ctx context.Context) error {
		err := createAP(c, ctx)
		if err != nil && ctx.Err() != nil {
			return errors.Join(err, errors.New("returned after the deadline"))
		}
		return err
	})
	ok, shed := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, efs.ErrPaced) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, efs.ErrUnavailable):
			shed++
		default:
			t.Errorf("neither success nor shed: %v", err)
		}
	}
	if ok == 0 || shed == 0 {
		t.Errorf("%d succeeded, %d shed: want both", ok, shed)
	}
	if got := fake.Requests(); got != ok {
		t.Errorf("%d requests for %d successes: a request was sent whose answer nobody took", got, ok)
	}
	t.Logf("%d succeeded, %d shed", ok, shed)
}

// The token for a retry of a call that changed nothing follows the same
// rule, and the shed error keeps the last attempt's error. The retry of a
// mutation whose outcome is unknown (after a 503) is a follow-up: it is
// never shed, waits until its deadline, and the error wraps both
// ErrUnavailable (the mutation stays in doubt for the caller) and the
// deadline.
func TestPacingRetryToken(t *testing.T) {
	unavailable := apiError(http.StatusServiceUnavailable, "ServiceUnavailable", nil)
	throttled := apiError(http.StatusTooManyRequests, "ThrottlingException", nil)
	tests := []struct {
		name         string
		script       []responder
		burst        int
		deadline     time.Duration
		want         string // "ok", "shed" or "deadline, in doubt"
		wantRequests int
	}{
		// 1/s: the retry's token is ~1 s away, after the 800 ms deadline.
		{"after 429, shed", []responder{throttled}, 1, 800 * time.Millisecond, "shed", 1},
		{"after 503, waits to the deadline", []responder{unavailable}, 1, 800 * time.Millisecond, "deadline, in doubt", 1},
		{"after 503 then 429, waits to the deadline", []responder{unavailable, throttled}, 2, 800 * time.Millisecond, "deadline, in doubt", 2},
		// With 5 s left, the retry waits ~1 s for its token and succeeds.
		{"after 503, waits", []responder{unavailable}, 1, 5 * time.Second, "ok", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFake(t, tt.script...)
			c, _ := newClient(t, fake.URL(), func(cfg *efs.Config) {
				cfg.RateLimits = map[string]efs.RateLimit{efs.OpDeleteAccessPoint: {PerSecond: 1, Burst: tt.burst}}
			})
			ctx, cancel := context.WithTimeout(t.Context(), tt.deadline)
			defer cancel()
			err := deleteAP(c, ctx)
			switch tt.want {
			case "ok":
				if err != nil {
					t.Fatalf("got %v, want success", err)
				}
			case "shed":
				wantShed(t, ctx, err)
				if errors.Is(err, efs.ErrUnavailable) {
					t.Errorf("got %v: nothing in doubt", err)
				}
			default:
				if !errors.Is(err, efs.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, efs.ErrPaced) {
					t.Errorf("got %v, want ErrUnavailable and the deadline, not a shed", err)
				}
			}
			if got := fake.Requests(); got != tt.wantRequests {
				t.Errorf("%d requests reached the server, want %d", got, tt.wantRequests)
			}
		})
	}
}
