package efs_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// TestMain isolates the tests from the machine's AWS configuration: static
// test credentials, no shared config files, no metadata service, no
// endpoint or region from the environment (tests that need them set them).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "efs-test-")
	if err != nil {
		panic(err)
	}
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           "AKIDTEST",
		"AWS_SECRET_ACCESS_KEY":       "secret",
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_CONFIG_FILE":             dir + "/config",
		"AWS_SHARED_CREDENTIALS_FILE": dir + "/credentials",
	} {
		os.Setenv(k, v)
	}
	for _, k := range []string{"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EFS", "AWS_REGION", "AWS_DEFAULT_REGION",
		"AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"} {
		os.Unsetenv(k)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// responder answers one request the way EFS (or a broken network) would.
type responder func(w http.ResponseWriter, r *http.Request)

// apiError answers like EFS: x-amzn-ErrorType header, status, JSON body.
func apiError(status int, code string, extra map[string]any) responder {
	return func(w http.ResponseWriter, r *http.Request) {
		body := map[string]any{"ErrorCode": code, "Message": code + " from the fake"}
		for k, v := range extra {
			body[k] = v
		}
		if code != "" {
			w.Header().Set("x-amzn-ErrorType", code)
		}
		writeJSON(w, status, body)
	}
}

// rawStatus answers a bare status with a non-JSON body, as a proxy or load
// balancer in front of the API would.
func rawStatus(status int) responder {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(status)
		io.WriteString(w, "<html>bad gateway</html>")
	}
}

// dropConnection closes the TCP connection without answering: a lost answer.
func dropConnection(w http.ResponseWriter, r *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

// hang never answers; it returns when the client gives up on the request.
func hang(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}

// fakeEFS is an httptest server speaking EFS's REST-JSON wire format. Each
// request is answered by the next scripted responder, then by the happy
// path, which serves a list of access points with real pagination.
type fakeEFS struct {
	srv *httptest.Server

	mu       sync.Mutex
	script   []responder
	always   responder // when set, answers every request after the script
	requests []string  // "METHOD path?query"
	bodies   []map[string]any
	aps      []map[string]any // what DescribeAccessPoints by FileSystemId lists
}

func newFake(t *testing.T, script ...responder) *fakeEFS {
	f := &fakeEFS{script: script}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeEFS) URL() string { return f.srv.URL }

// Requests is how many requests reached the server.
func (f *fakeEFS) Requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func (f *fakeEFS) serve(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
	f.bodies = append(f.bodies, body)
	next := f.always
	if len(f.script) > 0 {
		next, f.script = f.script[0], f.script[1:]
	}
	f.mu.Unlock()
	if next != nil {
		next(w, r)
		return
	}
	f.happy(w, r, body)
}

func accessPointJSON(id, fsID, token string) map[string]any {
	return map[string]any{
		"AccessPointId": id, "FileSystemId": fsID, "ClientToken": token, "LifeCycleState": "available",
		"RootDirectory": map[string]any{"Path": "/" + id},
	}
}

// happy answers like a healthy EFS holding f.aps.
func (f *fakeEFS) happy(w http.ResponseWriter, r *http.Request, body map[string]any) {
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/2015-02-01/access-points":
		ap := map[string]any{
			"AccessPointId": "fsap-0123456789abcdef0", "FileSystemId": body["FileSystemId"],
			"ClientToken": body["ClientToken"], "LifeCycleState": "available",
			"RootDirectory": body["RootDirectory"], "PosixUser": body["PosixUser"], "Tags": body["Tags"],
		}
		writeJSON(w, http.StatusOK, ap)
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet && r.URL.Path == "/2015-02-01/access-points" && q.Get("AccessPointId") != "":
		writeJSON(w, http.StatusOK, map[string]any{"AccessPoints": []any{accessPointJSON(q.Get("AccessPointId"), "fs-0123456789abcdef0", "tok")}})
	case r.Method == http.MethodGet && r.URL.Path == "/2015-02-01/access-points":
		f.list(w, q.Get("MaxResults"), q.Get("NextToken"))
	case r.Method == http.MethodGet && r.URL.Path == "/2015-02-01/file-systems":
		writeJSON(w, http.StatusOK, map[string]any{"FileSystems": []any{map[string]any{
			"FileSystemId": "fs-0123456789abcdef0", "LifeCycleState": "available",
			"Tags": []any{map[string]any{"Key": "Name", "Value": "data"}},
		}}})
	case r.Method == http.MethodGet && r.URL.Path == "/2015-02-01/mount-targets":
		mt := func(id, ip string) map[string]any {
			return map[string]any{"MountTargetId": id, "FileSystemId": q.Get("FileSystemId"), "IpAddress": ip,
				"AvailabilityZoneName": "us-east-1a", "AvailabilityZoneId": "use1-az1", "LifeCycleState": "available"}
		}
		// Two pages, to check that the client follows NextMarker.
		if q.Get("Marker") == "" {
			writeJSON(w, http.StatusOK, map[string]any{"MountTargets": []any{mt("fsmt-1", "10.0.0.1")}, "NextMarker": "m2"})
		} else {
			writeJSON(w, http.StatusOK, map[string]any{"MountTargets": []any{mt("fsmt-2", "10.0.0.2")}})
		}
	default:
		apiError(http.StatusBadRequest, "BadRequest", nil)(w, r)
	}
}

// list pages through f.aps; the NextToken is the index of the next item.
func (f *fakeEFS) list(w http.ResponseWriter, maxResults, token string) {
	limit, err := strconv.Atoi(maxResults)
	if err != nil {
		limit = 100
	}
	start, _ := strconv.Atoi(token)
	f.mu.Lock()
	end := min(start+limit, len(f.aps))
	page := append([]map[string]any(nil), f.aps[start:end]...)
	f.mu.Unlock()
	out := map[string]any{"AccessPoints": page}
	if end < len(f.aps) {
		out["NextToken"] = strconv.Itoa(end)
	}
	writeJSON(w, http.StatusOK, out)
}

// countingObserver records what the client reports.
type countingObserver struct {
	mu      sync.Mutex
	calls   map[string]int // "op outcome"
	retries map[string]int
}

func newObserver() *countingObserver {
	return &countingObserver{calls: map[string]int{}, retries: map[string]int{}}
}

func (o *countingObserver) APICall(op, outcome string, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls[op+" "+outcome]++
}

func (o *countingObserver) Retry(op string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retries[op]++
}

func (o *countingObserver) Calls(op, outcome string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls[op+" "+outcome]
}

func (o *countingObserver) Retries(op string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.retries[op]
}

// newClient builds a Client for endpoint with fast backoff and no rate
// limit, so tests measure behaviour, not waiting; mod adjusts the config.
func newClient(t testing.TB, endpoint string, mod func(*efs.Config)) (*efs.Client, *countingObserver) {
	t.Helper()
	obs := newObserver()
	cfg := efs.Config{
		Region:      "us-east-1",
		Endpoint:    endpoint,
		RateLimits:  map[string]efs.RateLimit{"*": {}},
		BaseBackoff: 2 * time.Millisecond,
		MaxBackoff:  20 * time.Millisecond,
		Observer:    obs,
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := efs.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("efs.New: %v", err)
	}
	return c, obs
}

func fakeAccessPoints(n int) []map[string]any {
	aps := make([]map[string]any, n)
	for i := range aps {
		aps[i] = accessPointJSON(fmt.Sprintf("fsap-%017x", i), "fs-0123456789abcdef0", fmt.Sprintf("tok-%d", i))
	}
	return aps
}
