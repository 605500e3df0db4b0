package efs_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/config"
	sdk "github.com/aws/aws-sdk-go-v2/service/efs"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// throttleHalf answers every other request with ThrottlingException. The
// first burst requests are held until all of them have arrived, so the
// burst really is one: every first attempt is in flight at once and half of
// them come back throttled together. With throttleFirst, the whole first
// round is throttled.
func throttleHalf(f *fakeEFS, burst int64, throttleFirst bool) {
	var n atomic.Int64
	all := make(chan struct{})
	f.always = func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		switch {
		case i == burst:
			close(all)
		case i < burst:
			select {
			case <-all:
			case <-time.After(30 * time.Second): // a call that never came must not hang the test
			}
		}
		if i%2 == 0 || (throttleFirst && i <= burst) {
			apiError(429, "ThrottlingException", nil)(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// runBurst runs n concurrent calls of do, each with the deadline timeout,
// and returns their errors.
func runBurst(n int, timeout time.Duration, do func(ctx context.Context) error) []error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = do(ctx) })
	}
	wg.Wait()
	return errs
}

// The upstream defect: under a burst of throttles the SDK's retry quota runs
// dry and calls fail hard ("retry quota exceeded"). Here, 1,000 concurrent
// deletes against an API that throttles half of all requests all succeed.
func TestThousandConcurrentCallsAtFiftyPercentThrottleAllSucceed(t *testing.T) {
	const calls = 1000
	fake := newFake(t)
	throttleHalf(fake, calls, false)
	// Generous times: on a loaded machine under -race, 1,000 calls take a
	// while, and what is asserted is that none fails, not how fast they are.
	// This server throttles half of all requests whatever their rate, so
	// the adaptive rate would (rightly) slow down to its floor; what is
	// tested here is the retry loop, so adaptation and the in-flight bound
	// (which would hold the burst back from arriving at once) are off.
	c, obs := newClient(t, fake.URL(), func(cfg *efs.Config) {
		cfg.AttemptTimeout = time.Minute
		cfg.DisableAdaptive, cfg.MaxInFlight = true, -1
	})
	errs := runBurst(calls, 2*time.Minute, func(ctx context.Context) error { return c.DeleteAccessPoint(ctx, "fsap-1") })
	failed := 0
	for _, err := range errs {
		if err != nil {
			if failed == 0 {
				t.Errorf("first failure: %v", err)
			}
			failed++
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d calls failed", failed, calls)
	}
	if got := obs.Calls(efs.OpDeleteAccessPoint, efs.OutcomeThrottled); got < calls/2 {
		t.Errorf("only %d throttled attempts observed: the server did not throttle half", got)
	}
	t.Logf("%d requests for %d calls, %d retries", fake.Requests(), calls, obs.Retries(efs.OpDeleteAccessPoint))
}

// The control for the test above: the SDK's own standard retryer, with the
// defaults the upstream driver uses, loses calls to its retry quota. If this
// ever stopped failing, the test above would prove nothing. To keep it fast
// and independent of machine speed, the burst is 300 calls whose first
// attempts are all throttled at once: 300 retries at 5 quota tokens each
// from a quota of 500.
func TestSDKStandardRetryerRunsOutOfQuotaUnderABurst(t *testing.T) {
	const calls = 300
	fake := newFake(t)
	throttleHalf(fake, calls, true)
	awsCfg, err := config.LoadDefaultConfig(t.Context(), config.WithRegion("us-east-1"))
	if err != nil {
		t.Fatal(err)
	}
	// The SDK's defaults, as the upstream driver uses them.
	raw := sdk.NewFromConfig(awsCfg, func(o *sdk.Options) { o.BaseEndpoint = aws.String(fake.URL()) })
	errs := runBurst(calls, time.Minute, func(ctx context.Context) error {
		_, err := raw.DeleteAccessPoint(ctx, &sdk.DeleteAccessPointInput{AccessPointId: aws.String("fsap-1")})
		return err
	})
	quota := 0
	for _, err := range errs {
		var q ratelimit.QuotaExceededError
		if errors.As(err, &q) {
			quota++
		}
	}
	if quota == 0 {
		t.Fatal("no call failed on the retry quota: the burst is too weak to show the upstream defect")
	}
	t.Logf("%d of %d calls failed with retry quota exceeded", quota, calls)
}

// A burst of 1,000 calls of one operation opens at most DefaultMaxInFlight
// requests at once, and all of them succeed. The server answers the first
// DefaultMaxInFlight requests at once (the burst's slow start opens the
// bound to DefaultMaxInFlight as they are answered), then holds every
// request until DefaultMaxInFlight of them are in flight together, so an
// unbounded client would be seen with many more.
func TestInFlightRequestsAreBoundedPerOperation(t *testing.T) {
	const calls = 1000
	fake := newFake(t)
	var cur, peak, seen atomic.Int64
	full := make(chan struct{})
	var once sync.Once
	fake.always = func(w http.ResponseWriter, r *http.Request) {
		if seen.Add(1) <= efs.DefaultMaxInFlight {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		n := cur.Add(1)
		defer cur.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if n >= efs.DefaultMaxInFlight {
			once.Do(func() { close(full) })
		}
		select {
		case <-full:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}
	c, _ := newClient(t, fake.URL(), func(cfg *efs.Config) { cfg.AttemptTimeout = time.Minute })
	errs := runBurst(calls, 2*time.Minute, func(ctx context.Context) error { return c.DeleteAccessPoint(ctx, "fsap-1") })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if got := peak.Load(); got > efs.DefaultMaxInFlight {
		t.Errorf("%d requests in flight at once, want at most %d", got, efs.DefaultMaxInFlight)
	}
}
