package emulator_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"
	"github.com/aws/smithy-go"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
)

// faultEnv is an emulator with one file system, for the fault cases.
func faultEnv(t *testing.T, cfg emulator.Config) (*env, string) {
	t.Helper()
	emulatorOnly(t)
	v := newEnv(t, cfg)
	return v, v.fileSystem()
}

func TestLatencyDelaysAnswers(t *testing.T) {
	v, fsID := faultEnv(t, emulator.Config{Faults: map[emulator.Op]emulator.Fault{
		emulator.OpDescribeAccessPoints: {Latency: 80 * time.Millisecond, Jitter: 20 * time.Millisecond}}})
	start := time.Now()
	if _, err := v.efs.DescribeAccessPoints(context.Background(), &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID)}); err != nil {
		t.Fatalf("DescribeAccessPoints: %v", err)
	}
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Fatalf("answer after %v, want at least the 80ms latency", d)
	}
}

func TestThrottleAnswersThrottlingExceptionPastTheBucket(t *testing.T) {
	// A bucket of 2 that refills once in 1000 s: the third call is throttled.
	v, fsID := faultEnv(t, emulator.Config{})
	v.emu.SetFault(emulator.OpCreateAccessPoint, emulator.Fault{ThrottleRate: 0.001, ThrottleBurst: 2})
	v.emu.ResetCounts()
	v.mustCreateAP(fsID)
	v.mustCreateAP(fsID)
	_, err := v.createAP(apInput(fsID))
	asError[*types.ThrottlingException](t, err)
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) && re.HTTPStatusCode() != http.StatusTooManyRequests {
		t.Errorf("status %d, want 429", re.HTTPStatusCode())
	}
	if n := v.emu.Counts()[emulator.OpCreateAccessPoint]; n != 3 {
		t.Errorf("CreateAccessPoint counted %d requests, want 3 (throttled ones count)", n)
	}
	if n := len(v.listAll(fsID, 0)); n != 2 {
		t.Errorf("%d access points exist, want 2", n)
	}
	// Other operations have their own bucket (none here).
	if _, err := v.efs.DescribeAccessPoints(context.Background(), &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID)}); err != nil {
		t.Errorf("DescribeAccessPoints while CreateAccessPoint is throttled: %v", err)
	}
}

// An error and a random throttle answer before applying: nothing is
// created, the request is counted, and its client token stays free.
func TestErrorsAndRandomThrottlesAnswerWithoutApplying(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fault  emulator.Fault
		answer func(*testing.T, error)
	}{
		{"error rate", emulator.Fault{ErrorRate: 1}, func(t *testing.T, err error) { asError[*types.InternalServerError](t, err) }},
		{"random throttle", emulator.Fault{RandomThrottleRate: 1}, func(t *testing.T, err error) { asError[*types.ThrottlingException](t, err) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, fsID := faultEnv(t, emulator.Config{})
			v.emu.SetFault(emulator.OpCreateAccessPoint, tc.fault)
			v.emu.ResetCounts()
			tok := token()
			_, err := v.createAP(apInput(fsID, withToken(tok)))
			tc.answer(t, err)
			if n := len(v.listAll(fsID, 0)); n != 0 {
				t.Fatalf("%d access points exist after a failed create, want 0", n)
			}
			if n := v.emu.Counts()[emulator.OpCreateAccessPoint]; n != 1 {
				t.Errorf("CreateAccessPoint counted %d requests, want 1 (faulted ones count)", n)
			}
			v.emu.SetFault(emulator.OpCreateAccessPoint, emulator.Fault{})
			v.mustCreateAP(fsID, withToken(tok)) // the token was never used
		})
	}
}

func TestLostAnswerCommitsAndThenFails(t *testing.T) {
	for _, mode := range []emulator.LostMode{emulator.Lost500, emulator.LostDrop} {
		t.Run(string(mode), func(t *testing.T) {
			v, fsID := faultEnv(t, emulator.Config{})
			v.emu.SetFault(emulator.OpCreateAccessPoint, emulator.Fault{LostAnswerRate: 1, LostAnswerMode: mode})
			tok := token()
			_, err := v.createAP(apInput(fsID, withToken(tok)))
			if mode == emulator.Lost500 {
				asError[*types.InternalServerError](t, err)
			} else {
				var ae smithy.APIError
				if err == nil || errors.As(err, &ae) {
					t.Fatalf("dropped connection gave %v, want a transport error", err)
				}
			}
			aps := v.listAll(fsID, 0)
			if len(aps) != 1 || *aps[0].ClientToken != tok {
				t.Fatalf("after a lost answer the file system lists %v, want the one access point of token %s", ids(aps), tok)
			}
			// Failed requests keep their answers: a retry learns what happened.
			_, err = v.createAP(apInput(fsID, withToken(tok)))
			if ae := asError[*types.AccessPointAlreadyExists](t, err); *ae.AccessPointId != *aps[0].AccessPointId {
				t.Fatalf("retry names %s, want %s", *ae.AccessPointId, *aps[0].AccessPointId)
			}
		})
	}
}

// The reason lost answers matter: the SDK's own retry of a create whose
// answer was lost meets the access point it made.
func TestRetryAfterALostAnswerMeetsItsOwnAccessPoint(t *testing.T) {
	v, fsID := faultEnv(t, emulator.Config{})
	v.emu.SetFault(emulator.OpCreateAccessPoint, emulator.Fault{LostAnswerRate: 1, LostAnswerMode: emulator.Lost500})
	retrying := newClient(v.url, 3)
	_, err := retrying.CreateAccessPoint(context.Background(), apInput(fsID))
	ae := asError[*types.AccessPointAlreadyExists](t, err)
	if got := ids(v.listAll(fsID, 0)); len(got) != 1 || got[0] != *ae.AccessPointId {
		t.Fatalf("access points %v; the error names %s", got, *ae.AccessPointId)
	}
}

func TestVisibilityDelayHidesNewAccessPointsFromDescribe(t *testing.T) {
	v, fsID := faultEnv(t, emulator.Config{})
	ctx := context.Background()
	visible := v.mustCreateAP(fsID)
	v.emu.SetFault(emulator.OpCreateAccessPoint, emulator.Fault{VisibilityDelay: time.Hour})
	hidden := v.mustCreateAP(fsID)

	_, err := v.efs.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{AccessPointId: hidden.AccessPointId})
	asError[*types.AccessPointNotFound](t, err)
	if got := ids(v.listAll(fsID, 0)); !slices.Equal(got, []string{*visible.AccessPointId}) {
		t.Fatalf("listing %v, want only %s", got, *visible.AccessPointId)
	}
	// Its token is taken all the same: the case a driver must survive.
	_, err = v.createAP(apInput(fsID, withToken(*hidden.ClientToken)))
	if ae := asError[*types.AccessPointAlreadyExists](t, err); *ae.AccessPointId != *hidden.AccessPointId {
		t.Fatalf("AccessPointAlreadyExists names %s, want %s", *ae.AccessPointId, *hidden.AccessPointId)
	}

	v.emu.SetFault(emulator.OpCreateAccessPoint, emulator.Fault{VisibilityDelay: 200 * time.Millisecond})
	soon := v.mustCreateAP(fsID)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := v.efs.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{AccessPointId: soon.AccessPointId})
		if err == nil {
			break
		}
		asError[*types.AccessPointNotFound](t, err)
		if time.Now().After(deadline) {
			t.Fatal("access point created with a 200ms visibility delay still invisible after 10s")
		}
		time.Sleep(20 * time.Millisecond) // polling for the delay to pass, not ordering events
	}
}

func TestCountsCountEveryRequestPerOperation(t *testing.T) {
	v, fsID := faultEnv(t, emulator.Config{})
	v.emu.ResetCounts()
	v.emu.SetFault(emulator.OpDeleteAccessPoint, emulator.Fault{ErrorRate: 1})
	for range 3 {
		v.mustCreateAP(fsID)
	}
	v.listAll(fsID, 2) // 2 pages
	_, _ = v.efs.DeleteAccessPoint(context.Background(), &efs.DeleteAccessPointInput{AccessPointId: aws.String("fsap-0123456789abcdef0")})
	got := v.emu.Counts()
	want := map[emulator.Op]int64{emulator.OpCreateAccessPoint: 3, emulator.OpDescribeAccessPoints: 2, emulator.OpDeleteAccessPoint: 1}
	for _, op := range emulator.Ops() {
		if got[op] != want[op] {
			t.Errorf("%s counted %d, want %d", op, got[op], want[op])
		}
	}
}

func TestHookHoldsRequestsBeforeAndAfterApplying(t *testing.T) {
	v, fsID := faultEnv(t, emulator.Config{})
	for _, phase := range []emulator.Phase{emulator.BeforeApply, emulator.AfterApply} {
		t.Run(phase.String(), func(t *testing.T) {
			tok := token()
			reached, release := make(chan *emulator.CreateAccessPointInput, 1), make(chan struct{})
			v.emu.SetHook(func(op emulator.Op, p emulator.Phase, req any) {
				if in, ok := req.(*emulator.CreateAccessPointInput); ok && op == emulator.OpCreateAccessPoint && p == phase && *in.ClientToken == tok {
					reached <- in
					<-release
				}
			})
			defer v.emu.SetHook(nil)
			done := make(chan error, 1)
			go func() { _, err := v.createAP(apInput(fsID, withToken(tok))); done <- err }()
			<-reached

			listed := slices.ContainsFunc(v.listAll(fsID, 0), func(ap types.AccessPointDescription) bool { return *ap.ClientToken == tok })
			if want := phase == emulator.AfterApply; listed != want {
				t.Errorf("while held %s, listed = %v, want %v", phase, listed, want)
			}
			select {
			case err := <-done:
				t.Fatalf("the client got its answer (%v) while the hook held the request", err)
			default:
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatalf("CreateAccessPoint: %v", err)
			}
		})
	}
}

func TestConcurrentCreatesWithOneTokenMakeOneAccessPoint(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	fsID := v.fileSystem()
	tok := token()
	const n = 20
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		made      []string
		conflicts []string
	)
	for range n {
		wg.Go(func() {
			out, err := v.createAP(apInput(fsID, withToken(tok)))
			mu.Lock()
			defer mu.Unlock()
			var ae *types.AccessPointAlreadyExists
			switch {
			case err == nil:
				made = append(made, *out.AccessPointId)
			case errors.As(err, &ae):
				conflicts = append(conflicts, *ae.AccessPointId)
			default:
				t.Errorf("CreateAccessPoint: %v", err)
			}
		})
	}
	wg.Wait()
	if len(made) != 1 || len(conflicts) != n-1 {
		t.Fatalf("%d creates succeeded and %d conflicted, want 1 and %d", len(made), len(conflicts), n-1)
	}
	for _, id := range conflicts {
		if id != made[0] {
			t.Fatalf("a conflict names %s, want %s", id, made[0])
		}
	}
}

func TestControlEndpointSetsFaultsAndReportsCounts(t *testing.T) {
	v, fsID := faultEnv(t, emulator.Config{})
	call := func(method, path, body string) (int, []byte) {
		t.Helper()
		return controlCall(t, v.url, method, path, body)
	}
	status, body := call("PUT", "/_emulator/faults", `{"CreateAccessPoint":{"errorRate":1,"latency":"5ms"}}`)
	if status != 200 {
		t.Fatalf("PUT faults: %d %s", status, body)
	}
	if got := v.emu.Faults()[emulator.OpCreateAccessPoint]; got.ErrorRate != 1 || got.Latency != 5*time.Millisecond {
		t.Fatalf("fault in force %+v, want errorRate 1 and latency 5ms", got)
	}
	_, err := v.createAP(apInput(fsID))
	asError[*types.InternalServerError](t, err)

	_, body = call("GET", "/_emulator/faults", "")
	var faults map[emulator.Op]emulator.Fault
	if err := json.Unmarshal(body, &faults); err != nil || faults[emulator.OpCreateAccessPoint].Latency != 5*time.Millisecond {
		t.Fatalf("GET faults: %s (%v)", body, err)
	}
	for _, bad := range []string{`{"NoSuchOp":{"errorRate":1}}`, `{"*":{"errorRate":2}}`, `{"*":{"randomThrottleRate":2}}`, `{"*":{"latency":"soon"}}`, `[`} {
		if status, body := call("PUT", "/_emulator/faults", bad); status != 400 {
			t.Errorf("PUT faults %s: %d %s, want 400", bad, status, body)
		}
	}
	if status, _ := call("POST", "/_emulator/faults/reset", ""); status != 204 {
		t.Fatalf("reset faults: %d", status)
	}
	v.mustCreateAP(fsID)

	_, body = call("GET", "/_emulator/counts", "")
	var counts map[emulator.Op]int64
	if err := json.Unmarshal(body, &counts); err != nil || counts[emulator.OpCreateAccessPoint] != 2 {
		t.Fatalf("GET counts: %s (%v), want CreateAccessPoint 2", body, err)
	}
	call("POST", "/_emulator/counts/reset", "")
	if n := v.emu.Counts()[emulator.OpCreateAccessPoint]; n != 0 {
		t.Fatalf("after reset CreateAccessPoint counts %d", n)
	}
	if status, body := call("GET", "/_emulator/healthz", ""); status != 200 || strings.TrimSpace(string(body)) != "ok" {
		t.Fatalf("healthz: %d %q", status, body)
	}
}

// controlCall sends one request to the control endpoint at url.
func controlCall(t *testing.T, url, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
