package efs_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

func deleteAP(c *efs.Client, ctx context.Context) error {
	return c.DeleteAccessPoint(ctx, "fsap-0123456789abcdef0")
}

func createAP(c *efs.Client, ctx context.Context) error {
	_, err := c.CreateAccessPoint(ctx, efs.CreateAccessPointInput{FileSystemID: "fs-0123456789abcdef0", ClientToken: "tok", Path: "/x"})
	return err
}

// Every EFS error code maps to its sentinel; errors that cannot heal are
// answered after exactly one request, the others are retried.
func TestErrorCodesMapToSentinels(t *testing.T) {
	tests := []struct {
		name    string
		answer  responder
		op      func(*efs.Client, context.Context) error
		want    error
		retried bool
	}{
		{"AccessPointNotFound", apiError(404, "AccessPointNotFound", nil), deleteAP, efs.ErrAccessPointNotFound, false},
		{"FileSystemNotFound", apiError(404, "FileSystemNotFound", nil), createAP, efs.ErrFileSystemNotFound, false},
		{"AccessPointAlreadyExists", apiError(409, "AccessPointAlreadyExists", map[string]any{"AccessPointId": "fsap-0000000000000000a"}), createAP, efs.ErrAlreadyExists, false},
		{"AccessPointLimitExceeded", apiError(403, "AccessPointLimitExceeded", nil), createAP, efs.ErrLimitExceeded, false},
		{"IncorrectFileSystemLifeCycleState", apiError(409, "IncorrectFileSystemLifeCycleState", nil), createAP, efs.ErrIncorrectState, false},
		{"BadRequest", apiError(400, "BadRequest", nil), createAP, efs.ErrBadRequest, false},
		{"AccessDeniedException", apiError(403, "AccessDeniedException", nil), deleteAP, efs.ErrAccessDenied, false},
		{"AccessDenied", apiError(403, "AccessDenied", nil), deleteAP, efs.ErrAccessDenied, false},
		{"UnrecognizedClientException", apiError(403, "UnrecognizedClientException", nil), deleteAP, efs.ErrAccessDenied, false},
		{"unknown code with 403", apiError(403, "SomethingNew", nil), deleteAP, efs.ErrAccessDenied, false},
		{"unknown code with 400", apiError(400, "SomethingNew", nil), deleteAP, efs.ErrBadRequest, false},
		// DeleteAccessPoint's model lists no ThrottlingException: the SDK
		// gives a generic error, which must classify by its code all the same.
		{"ThrottlingException on delete", apiError(429, "ThrottlingException", nil), deleteAP, efs.ErrThrottled, true},
		{"ThrottlingException on create", apiError(429, "ThrottlingException", nil), createAP, efs.ErrThrottled, true},
		{"bare 429", rawStatus(429), deleteAP, efs.ErrThrottled, true},
		{"InternalServerError", apiError(500, "InternalServerError", nil), createAP, efs.ErrUnavailable, true},
		{"502 from a proxy", rawStatus(502), deleteAP, efs.ErrUnavailable, true},
		{"503", rawStatus(503), deleteAP, efs.ErrUnavailable, true},
		{"dropped connection", dropConnection, createAP, efs.ErrUnavailable, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Once, then the happy path: retried errors heal, the others don't.
			fake := newFake(t, tt.answer)
			c, _ := newClient(t, fake.URL(), nil)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			err := tt.op(c, ctx)
			if tt.retried {
				if err != nil || fake.Requests() != 2 {
					t.Fatalf("got %v after %d requests, want success after 2", err, fake.Requests())
				}
				return
			}
			// A denied delete is told from a gone access point by one
			// Describe (DeleteAccessPoint), which finds it here.
			want := 1
			if errors.Is(tt.want, efs.ErrAccessDenied) {
				want = 2
			}
			if !errors.Is(err, tt.want) || fake.Requests() != want {
				t.Fatalf("got %v after %d requests, want %v after %d", err, fake.Requests(), tt.want, want)
			}
			if !strings.Contains(err.Error(), tt.name) && !strings.HasPrefix(tt.name, "unknown") {
				t.Errorf("error %q lost the API's message", err)
			}
			// Exactly one sentinel per error.
			for _, other := range []error{efs.ErrAccessPointNotFound, efs.ErrFileSystemNotFound, efs.ErrAlreadyExists,
				efs.ErrLimitExceeded, efs.ErrThrottled, efs.ErrPaced, efs.ErrUnavailable, efs.ErrAccessDenied, efs.ErrBadRequest, efs.ErrIncorrectState} {
				if other != tt.want && errors.Is(err, other) {
					t.Errorf("error %q also matches %v", err, other)
				}
			}
		})
	}
}

func TestAlreadyExistsCarriesTheExistingAccessPointID(t *testing.T) {
	fake := newFake(t, apiError(409, "AccessPointAlreadyExists", map[string]any{"AccessPointId": "fsap-0000000000000000a"}))
	c, _ := newClient(t, fake.URL(), nil)
	err := createAP(c, t.Context())
	var ae *efs.AlreadyExistsError
	if !errors.As(err, &ae) || ae.AccessPointID != "fsap-0000000000000000a" {
		t.Fatalf("got %v, want *AlreadyExistsError for fsap-0000000000000000a", err)
	}
}

// A create whose first answer was lost is retried, and the retry's
// AlreadyExists (for the access point the lost attempt made) is returned as
// such: the controller adopts it.
func TestRetriedCreateAfterLostAnswerReturnsAlreadyExists(t *testing.T) {
	fake := newFake(t, dropConnection, apiError(409, "AccessPointAlreadyExists", map[string]any{"AccessPointId": "fsap-0000000000000000b"}))
	c, obs := newClient(t, fake.URL(), nil)
	err := createAP(c, t.Context())
	var ae *efs.AlreadyExistsError
	if !errors.As(err, &ae) || ae.AccessPointID != "fsap-0000000000000000b" {
		t.Fatalf("got %v, want *AlreadyExistsError for fsap-0000000000000000b", err)
	}
	if got := obs.Calls(efs.OpCreateAccessPoint, efs.OutcomeNetworkError); got != 1 {
		t.Errorf("observer saw %d network errors, want 1", got)
	}
}

// A burst of throttles, 5xx answers or dropped connections ends in success
// within the deadline, however long the burst; each retry is observed.
func TestBurstOfFailuresThenSuccess(t *testing.T) {
	const n = 30 // more than any fixed attempt cap or retry quota would allow
	tests := []struct {
		name    string
		answer  responder
		outcome string
	}{
		{"429", apiError(429, "ThrottlingException", nil), efs.OutcomeThrottled},
		{"500", apiError(500, "InternalServerError", nil), efs.OutcomeServerError},
		{"dropped connections", dropConnection, efs.OutcomeNetworkError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			script := make([]responder, n)
			for i := range script {
				script[i] = tt.answer
			}
			fake := newFake(t, script...)
			c, obs := newClient(t, fake.URL(), func(cfg *efs.Config) {
				cfg.MaxBackoff = 5 * time.Millisecond
				// 30 throttles in a row would (rightly) bring the adaptive
				// rate to its floor of one request per two seconds; this
				// test is about the retry loop having no attempt cap.
				cfg.DisableAdaptive = true
			})
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if err := deleteAP(c, ctx); err != nil {
				t.Fatalf("DeleteAccessPoint after %d failures: %v", n, err)
			}
			if got := obs.Calls(efs.OpDeleteAccessPoint, tt.outcome); got != n {
				t.Errorf("observed %d %s attempts, want %d", got, tt.outcome, n)
			}
			if got := obs.Retries(efs.OpDeleteAccessPoint); got != n {
				t.Errorf("observed %d retries, want %d", got, n)
			}
			if got := obs.Calls(efs.OpDeleteAccessPoint, efs.OutcomeOK); got != 1 {
				t.Errorf("observed %d ok attempts, want 1", got)
			}
		})
	}
}

// When the deadline is too short for the failures to pass, the call returns
// the last classified error together with the deadline, and returns early:
// it stops as soon as the next backoff would pass the deadline.
func TestDeadlineTooShortReturnsClassifiedAndDeadlineError(t *testing.T) {
	tests := []struct {
		name   string
		answer responder
		want   error
	}{
		{"throttled", apiError(429, "ThrottlingException", nil), efs.ErrThrottled},
		{"5xx", apiError(500, "InternalServerError", nil), efs.ErrUnavailable},
		{"dropped connections", dropConnection, efs.ErrUnavailable},
		{"hung attempts", hang, efs.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := newFake(t)
			fake.always = tt.answer
			c, _ := newClient(t, fake.URL(), func(cfg *efs.Config) {
				cfg.BaseBackoff = 50 * time.Millisecond
				cfg.MaxBackoff = time.Second
				cfg.AttemptTimeout = 100 * time.Millisecond
			})
			const deadline = 400 * time.Millisecond
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			start := time.Now()
			err := deleteAP(c, ctx)
			took := time.Since(start)
			// After a throttle the adaptive rate may put the next token past
			// the deadline: then the call stops at once, paced (not sent),
			// instead of waiting for the deadline.
			ended := errors.Is(err, context.DeadlineExceeded) || tt.want == efs.ErrThrottled && errors.Is(err, efs.ErrPaced)
			if !errors.Is(err, tt.want) || !ended {
				t.Fatalf("got %v, want %v and context.DeadlineExceeded", err, tt.want)
			}
			if took > deadline+2*time.Second {
				t.Errorf("took %v with a %v deadline", took, deadline)
			}
			if fake.Requests() < 2 {
				t.Errorf("only %d requests: nothing was retried", fake.Requests())
			}
		})
	}
}

// An attempt that hangs is abandoned after AttemptTimeout and retried,
// instead of eating the caller's whole deadline.
func TestHungAttemptIsRetried(t *testing.T) {
	fake := newFake(t, hang)
	c, obs := newClient(t, fake.URL(), func(cfg *efs.Config) { cfg.AttemptTimeout = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := deleteAP(c, ctx); err != nil {
		t.Fatalf("DeleteAccessPoint: %v", err)
	}
	if got := obs.Calls(efs.OpDeleteAccessPoint, efs.OutcomeTimeout); got != 1 {
		t.Errorf("observed %d timeouts, want 1", got)
	}
}

// The caller's cancellation stays detectable, with ErrUnavailable (a
// mutation's outcome is unknown once the request may have left).
func TestCallerCancellationIsDetectable(t *testing.T) {
	arrived := make(chan struct{}, 1)
	fake := newFake(t)
	fake.always = func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		hang(w, r)
	}
	c, obs := newClient(t, fake.URL(), nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- deleteAP(c, ctx) }()
	<-arrived // cancel once the request is at the server, not before
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) || !errors.Is(err, efs.ErrUnavailable) {
		t.Fatalf("got %v, want context.Canceled and ErrUnavailable", err)
	}
	if got := obs.Calls(efs.OpDeleteAccessPoint, efs.OutcomeCanceled); got != 1 {
		t.Errorf("observed %d canceled attempts, want 1", got)
	}
}

// The client-side rate limit spaces calls: with 5/s and burst 1, three calls
// need at least two intervals of 200 ms. Only a lower bound is asserted.
func TestRateLimitSpacesCalls(t *testing.T) {
	fake := newFake(t)
	c, _ := newClient(t, fake.URL(), func(cfg *efs.Config) {
		cfg.RateLimits = map[string]efs.RateLimit{efs.OpDeleteAccessPoint: {PerSecond: 5, Burst: 1}}
	})
	start := time.Now()
	for range 3 {
		if err := deleteAP(c, t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took < 350*time.Millisecond {
		t.Errorf("3 calls at 5/s burst 1 took %v, want >= ~400ms", took)
	}
}

// A call that cannot get a rate-limit token before its deadline fails at
// once with ErrPaced (not ErrThrottled: EFS did not throttle it), sending nothing, and not with the deadline error
// (the deadline has not passed; see pacing_test.go): a backlog of thousands
// of deletes drains steadily instead of piling onto the API.
// Buckets are per operation: "*" sets every operation not named, and a
// named one (here unlimited) overrides it.
func TestRateLimitBeyondDeadlineFailsFastWithoutRequest(t *testing.T) {
	fake := newFake(t)
	c, _ := newClient(t, fake.URL(), func(cfg *efs.Config) {
		cfg.RateLimits = map[string]efs.RateLimit{
			"*":                        {PerSecond: 0.1, Burst: 1}, // one token per 10 s
			efs.OpDescribeAccessPoints: {PerSecond: 0},
		}
	})
	if err := deleteAP(c, t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	start := time.Now()
	err := deleteAP(c, ctx)
	if !errors.Is(err, efs.ErrPaced) || errors.Is(err, efs.ErrThrottled) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrPaced without ErrThrottled or context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("waited %v for a token that could not come before the deadline", took)
	}
	if fake.Requests() != 1 {
		t.Errorf("%d requests reached the server, want 1", fake.Requests())
	}
	for range 5 {
		if _, err := c.DescribeAccessPoint(ctx, "fsap-1"); err != nil {
			t.Fatalf("DescribeAccessPoint, unlimited, after the delete bucket ran dry: %v", err)
		}
	}
	if _, err := c.DescribeFileSystem(ctx, "fs-0123456789abcdef0"); err != nil {
		t.Fatalf("DescribeFileSystem, first token of its own bucket: %v", err)
	}
}

// listFake serves n access points.
func listFake(t *testing.T, n int) (*fakeEFS, *efs.Client) {
	fake := newFake(t)
	fake.aps = fakeAccessPoints(n)
	c, _ := newClient(t, fake.URL(), nil)
	return fake, c
}

func TestListAccessPointsVisitsAllInOrder(t *testing.T) {
	fake, c := listFake(t, 2500)
	var got []string
	pages := 0
	err := c.ListAccessPoints(t.Context(), "fs-0123456789abcdef0", func(page []efs.AccessPoint) error {
		pages++
		for _, ap := range page {
			got = append(got, ap.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2500 || pages != 3 {
		t.Fatalf("visited %d access points in %d pages, want 2500 in 3", len(got), pages)
	}
	for i, id := range got {
		if want := fmt.Sprintf("fsap-%017x", i); id != want {
			t.Fatalf("item %d is %s, want %s", i, id, want)
		}
	}
	if !strings.Contains(fake.requests[0], "MaxResults=1000") {
		t.Errorf("first request %q does not ask for pages of 1000", fake.requests[0])
	}
}

func TestListAccessPointsStopsAtCallbackError(t *testing.T) {
	fake, c := listFake(t, 2500)
	stop := errors.New("stop")
	err := c.ListAccessPoints(t.Context(), "fs-0123456789abcdef0", func([]efs.AccessPoint) error { return stop })
	if err != stop {
		t.Fatalf("got %v, want the callback's error as is", err)
	}
	if fake.Requests() != 1 {
		t.Errorf("%d pages fetched after the callback stopped the walk", fake.Requests())
	}
}

// A page that fails transiently is retried on its own; the walk goes on.
func TestListAccessPointsRetriesOnePage(t *testing.T) {
	fake, c := listFake(t, 1500)
	n := 0
	err := c.ListAccessPoints(t.Context(), "fs-0123456789abcdef0", func(page []efs.AccessPoint) error {
		if n == 0 {
			fake.mu.Lock()
			fake.script = []responder{apiError(429, "ThrottlingException", nil)}
			fake.mu.Unlock()
		}
		n += len(page)
		return nil
	})
	if err != nil || n != 1500 || fake.Requests() != 3 {
		t.Fatalf("got %v, %d items after %d requests; want 1500 after 3", err, n, fake.Requests())
	}
}

func TestCreateAccessPointSendsAndReturnsEveryField(t *testing.T) {
	fake := newFake(t)
	c, _ := newClient(t, fake.URL(), nil)
	in := efs.CreateAccessPointInput{
		FileSystemID: "fs-0123456789abcdef0",
		ClientToken:  "token-1",
		Path:         "/base/pvc-1",
		CreationInfo: &efs.CreationInfo{OwnerUID: 50001, OwnerGID: 50001, Permissions: "700"},
		PosixUser:    &efs.PosixUser{UID: 50001, GID: 50001, SecondaryGIDs: []int64{7, 8}},
		Tags:         map[string]string{"z": "1", "a": "2", "efs.csi.aws.com/cluster": "true"},
	}
	ap, err := c.CreateAccessPoint(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	want := &efs.AccessPoint{
		ID: "fsap-0123456789abcdef0", FileSystemID: in.FileSystemID, ClientToken: in.ClientToken, Path: in.Path,
		CreationInfo: in.CreationInfo, PosixUser: in.PosixUser, Tags: in.Tags, LifeCycleState: "available",
	}
	if !reflect.DeepEqual(ap, want) {
		t.Errorf("got %+v, want %+v", ap, want)
	}
	// Tags go out sorted by key, so that retries send identical bodies.
	var keys []string
	for _, tag := range fake.bodies[0]["Tags"].([]any) {
		keys = append(keys, tag.(map[string]any)["Key"].(string))
	}
	if want := []string{"a", "efs.csi.aws.com/cluster", "z"}; !reflect.DeepEqual(keys, want) {
		t.Errorf("tags sent in order %v, want %v", keys, want)
	}
}

func TestDescribeFileSystemAndMountTargets(t *testing.T) {
	fake := newFake(t)
	c, _ := newClient(t, fake.URL(), nil)
	fs, err := c.DescribeFileSystem(t.Context(), "fs-0123456789abcdef0")
	if err != nil {
		t.Fatal(err)
	}
	if want := (&efs.FileSystem{ID: "fs-0123456789abcdef0", LifeCycleState: "available", Tags: map[string]string{"Name": "data"}}); !reflect.DeepEqual(fs, want) {
		t.Errorf("got %+v, want %+v", fs, want)
	}
	if _, err := c.DescribeFileSystem(t.Context(), "fs-ffffffffffffffff0"); !errors.Is(err, efs.ErrFileSystemNotFound) {
		t.Errorf("file system absent from the answer: got %v, want ErrFileSystemNotFound", err)
	}
	mts, err := c.DescribeMountTargets(t.Context(), "fs-0123456789abcdef0")
	if err != nil {
		t.Fatal(err)
	}
	if len(mts) != 2 || mts[0].IPAddress != "10.0.0.1" || mts[1].IPAddress != "10.0.0.2" || mts[1].AvailabilityZoneName != "us-east-1a" {
		t.Errorf("mount targets over two pages: got %+v", mts)
	}
}

func TestPing(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := "http://" + closed.Addr().String()
	closed.Close()
	tests := []struct {
		name   string
		answer responder // nil: nothing listens
		ok     bool
	}{
		{"nothing listens", nil, false},
		{"healthy", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, map[string]any{"FileSystems": []any{}})
		}, true},
		{"access denied is an answer", apiError(403, "AccessDeniedException", nil), true},
		{"throttled is an answer", apiError(429, "ThrottlingException", nil), true},
		{"5xx", apiError(500, "InternalServerError", nil), false},
		{"connection dropped", dropConnection, false},
		{"hung", hang, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			endpoint := nobody
			var fake *fakeEFS
			if tt.answer != nil {
				fake = newFake(t)
				fake.always = tt.answer
				endpoint = fake.URL()
			}
			c, _ := newClient(t, endpoint, func(cfg *efs.Config) { cfg.AttemptTimeout = 300 * time.Millisecond })
			err := c.Ping(t.Context())
			if tt.ok != (err == nil) {
				t.Fatalf("Ping: %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, efs.ErrUnavailable) {
				t.Errorf("Ping: %v, want ErrUnavailable", err)
			}
			if fake != nil && fake.Requests() != 1 {
				t.Errorf("Ping sent %d requests, want 1 (no retries)", fake.Requests())
			}
		})
	}
}

// A call whose context has already ended sends nothing and says why.
func TestEndedContextSendsNothing(t *testing.T) {
	fake := newFake(t)
	c, _ := newClient(t, fake.URL(), nil)
	ctx, cancel := context.WithTimeout(t.Context(), -time.Second)
	defer cancel()
	err := deleteAP(c, ctx)
	if !errors.Is(err, efs.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrUnavailable and context.DeadlineExceeded", err)
	}
	if fake.Requests() != 0 {
		t.Errorf("%d requests sent", fake.Requests())
	}
}
