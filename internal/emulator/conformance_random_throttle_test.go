package emulator_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"
	"github.com/aws/smithy-go"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
)

// A random throttle is, to the client, the token bucket's throttle: the
// same status, error code and body.
func TestRandomThrottleAnswersExactlyAsTheTokenBucket(t *testing.T) {
	v, _ := faultEnv(t, emulator.Config{})
	create := func() (int, string, string) {
		status, code, body := v.raw(http.MethodPost, "/2015-02-01/access-points", `{}`)
		return status, code, string(body)
	}
	v.emu.SetFault(emulator.OpCreateAccessPoint, emulator.Fault{ThrottleRate: 0.001, ThrottleBurst: 1})
	create() // takes the bucket's one token
	bucketStatus, bucketCode, bucketBody := create()
	v.emu.SetFault(emulator.OpCreateAccessPoint, emulator.Fault{RandomThrottleRate: 1})
	randomStatus, randomCode, randomBody := create()
	if bucketStatus != http.StatusTooManyRequests || !strings.HasPrefix(bucketCode, "ThrottlingException") {
		t.Fatalf("token bucket throttle %d %q, want 429 ThrottlingException", bucketStatus, bucketCode)
	}
	if randomStatus != bucketStatus || randomCode != bucketCode || randomBody != bucketBody {
		t.Errorf("random throttle %d %q %s, want the bucket's %d %q %s", randomStatus, randomCode, randomBody, bucketStatus, bucketCode, bucketBody)
	}
}

// The share of random throttles is the rate asked for whether the requests
// come one at a time or all at once: unlike the token bucket's, it does not
// depend on how fast they come.
func TestRandomThrottleShareIsTheRateWhateverTheRequestRate(t *testing.T) {
	const n, p = 400, 0.25
	for _, tc := range []struct {
		name    string
		callers int
	}{{"one at a time", 1}, {"sixteen at once", 16}} {
		t.Run(tc.name, func(t *testing.T) {
			v, fsID := faultEnv(t, emulator.Config{})
			v.emu.SetFault(emulator.OpDescribeAccessPoints, emulator.Fault{RandomThrottleRate: p})
			var mu sync.Mutex
			throttled, ok := 0, 0
			var wg sync.WaitGroup
			for c := range tc.callers {
				wg.Go(func() {
					for i := c; i < n; i += tc.callers {
						_, err := v.efs.DescribeAccessPoints(context.Background(), &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID)})
						mu.Lock()
						switch {
						case err == nil:
							ok++
						case throttle(err):
							throttled++
						default:
							t.Errorf("DescribeAccessPoints: %v", err)
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			// Binomial(400, 0.25): mean 100, standard deviation 8.7; the
			// bounds are 4 deviations out.
			if throttled+ok != n || throttled < 65 || throttled > 135 {
				t.Errorf("%d of %d requests throttled (%d answered), want about %.0f", throttled, n, ok, p*n)
			}
		})
	}
}

// A random throttle strikes before the token bucket and takes no token:
// the bucket's tokens all go to requests that pass.
func TestRandomThrottleTakesNoTokenFromTheBucket(t *testing.T) {
	v, fsID := faultEnv(t, emulator.Config{Seed: 7})
	// A bucket of 3 that refills once in 1000 s, and half the requests
	// throttled at random.
	v.emu.SetFault(emulator.OpCreateAccessPoint, emulator.Fault{RandomThrottleRate: 0.5, ThrottleRate: 0.001, ThrottleBurst: 3})
	created, throttled := 0, 0
	for range 40 {
		_, err := v.createAP(apInput(fsID))
		switch {
		case err == nil:
			created++
		default:
			asError[*types.ThrottlingException](t, err)
			throttled++
		}
	}
	if created != 3 || throttled != 37 {
		t.Errorf("%d created and %d throttled of 40, want the bucket's 3 created and 37 throttled", created, throttled)
	}
	if n := len(v.listAll(fsID, 0)); n != created {
		t.Errorf("%d access points exist, want %d", n, created)
	}
}

// The emulator's seed decides which requests are throttled: two emulators
// of one seed, asked alike, throttle alike.
func TestRandomThrottleFollowsTheSeed(t *testing.T) {
	pattern := func() string {
		v, fsID := faultEnv(t, emulator.Config{Seed: 42})
		v.emu.SetFault(emulator.OpDescribeAccessPoints, emulator.Fault{RandomThrottleRate: 0.3})
		var b strings.Builder
		for range 60 {
			_, err := v.efs.DescribeAccessPoints(context.Background(), &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID)})
			b.WriteByte(".T"[btoi(throttle(err))])
		}
		return b.String()
	}
	if a, b := pattern(), pattern(); a != b || !strings.Contains(a, "T") {
		t.Errorf("seed 42 throttled %s, then %s: want the same pattern, with throttles", a, b)
	}
}

// throttle reports a ThrottlingException: DescribeAccessPoints does not
// model it, so the SDK gives a generic API error with its code.
func throttle(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "ThrottlingException"
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// One operation's faults combine in their order: a request is throttled
// at random, or fails unapplied, or is applied and its answer lost as a
// 500: the "fault proxy" storm. Only the lost answers leave access points.
func TestRandomThrottleErrorAndLostAnswerCombineOnOneOperation(t *testing.T) {
	v, fsID := faultEnv(t, emulator.Config{Seed: 3})
	v.emu.SetFault(emulator.OpCreateAccessPoint, emulator.Fault{
		RandomThrottleRate: 0.3, ErrorRate: 0.3, LostAnswerRate: 1, LostAnswerMode: emulator.Lost500})
	by := map[string]int{}
	const n = 60
	for range n {
		_, err := v.createAP(apInput(fsID))
		var ae smithy.APIError
		if !errors.As(err, &ae) {
			t.Fatalf("CreateAccessPoint: %v, want an API error (every answer is lost)", err)
		}
		by[ae.ErrorCode()+": "+ae.ErrorMessage()]++
	}
	throttles := by["ThrottlingException: Rate exceeded"]
	errs := by["InternalServerError: injected internal error (not applied)"]
	lost := by["InternalServerError: injected internal error (applied, answer lost)"]
	if throttles == 0 || errs == 0 || lost == 0 || throttles+errs+lost != n {
		t.Fatalf("answers %v: want throttles, unapplied errors and lost answers, nothing else", by)
	}
	if got := len(v.listAll(fsID, 0)); got != lost {
		t.Errorf("%d access points exist, want one per lost answer, %d", got, lost)
	}
}

// The control endpoint sets random throttles like every fault, and refuses
// a rate that is no probability.
func TestControlEndpointSetsRandomThrottles(t *testing.T) {
	v, fsID := faultEnv(t, emulator.Config{})
	if status, body := controlCall(t, v.url, http.MethodPut, "/_emulator/faults", `{"*":{"randomThrottleRate":1}}`); status != http.StatusOK {
		t.Fatalf("PUT faults: %d %s", status, body)
	}
	_, err := v.efs.DescribeAccessPoints(context.Background(), &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID)})
	wantCode(t, err, "ThrottlingException")
	for _, bad := range []string{`{"*":{"randomThrottleRate":1.5}}`, `{"*":{"randomThrottleRate":-0.1}}`} {
		if status, body := controlCall(t, v.url, http.MethodPut, "/_emulator/faults", bad); status != http.StatusBadRequest {
			t.Errorf("PUT faults %s: %d %s, want 400", bad, status, body)
		}
	}
	if got := v.emu.Faults()[emulator.OpDescribeAccessPoints].RandomThrottleRate; got != 1 {
		t.Errorf("after the refused PUTs DescribeAccessPoints has random throttle rate %v, want 1 still", got)
	}
}
