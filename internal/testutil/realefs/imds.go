package realefs

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Instance is what the fake instance metadata service tells about the instance.
type Instance struct {
	Region, AZ, AZID, InstanceID, AccountID string
	// Role is the instance profile's role; its credentials are Credentials.
	Role        string
	Credentials Credentials
}

// Credentials are an IAM role's temporary credentials.
type Credentials struct{ AccessKeyID, SecretAccessKey, Token string }

// IMDS is a fake EC2 instance metadata service on 169.254.169.254:80, IMDSv2 only: a
// GET needs a token from PUT /latest/api/token (401 without it), as on an instance that
// requires IMDSv2.
type IMDS struct {
	inst Instance
	mu   sync.Mutex
	reqs []IMDSRequest
	toks map[string]bool
	n    int
}

// IMDSRequest is a request the fake answered.
type IMDSRequest struct {
	Method, Path string
	Token        bool // with a valid token
	Status       int
}

// ServeIMDS starts the fake instance metadata service.
func (e *Env) ServeIMDS(t testing.TB, inst Instance) *IMDS {
	t.Helper()
	l, err := net.Listen("tcp", "169.254.169.254:80")
	if err != nil {
		t.Fatal(err)
	}
	m := &IMDS{inst: inst, toks: map[string]bool{}}
	srv := &http.Server{Handler: m, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return m
}

// Requests are the requests answered so far.
func (m *IMDS) Requests() []IMDSRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]IMDSRequest(nil), m.reqs...)
}

// Asked reports whether path was answered (200) to a request with a token.
func (m *IMDS) Asked(path string) bool {
	for _, r := range m.Requests() {
		if r.Path == path && r.Token && r.Status == http.StatusOK {
			return true
		}
	}
	return false
}

func (m *IMDS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	status := m.serve(w, r)
	m.mu.Lock()
	m.reqs = append(m.reqs, IMDSRequest{Method: r.Method, Path: r.URL.Path, Token: m.toks[r.Header.Get("X-aws-ec2-metadata-token")], Status: status})
	m.mu.Unlock()
}

func (m *IMDS) serve(w http.ResponseWriter, r *http.Request) int {
	const credsPath = "/latest/meta-data/iam/security-credentials/"
	if r.URL.Path == "/latest/api/token" {
		if r.Method != http.MethodPut || r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") == "" {
			http.Error(w, "token: PUT with X-aws-ec2-metadata-token-ttl-seconds", http.StatusBadRequest)
			return http.StatusBadRequest
		}
		m.mu.Lock()
		m.n++
		tok := fmt.Sprintf("imds-token-%d", m.n)
		m.toks[tok] = true
		m.mu.Unlock()
		w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
		fmt.Fprint(w, tok)
		return http.StatusOK
	}
	m.mu.Lock()
	ok := m.toks[r.Header.Get("X-aws-ec2-metadata-token")]
	m.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusUnauthorized)
		return http.StatusUnauthorized
	}
	if r.Method != http.MethodGet {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return http.StatusMethodNotAllowed
	}
	in := m.inst
	text := map[string]string{
		"/latest/meta-data/instance-id":                    in.InstanceID,
		"/latest/meta-data/placement/availability-zone":    in.AZ,
		"/latest/meta-data/placement/availability-zone-id": in.AZID,
		"/latest/meta-data/placement/region":               in.Region,
		strings.TrimSuffix(credsPath, "/"):                 in.Role,
		credsPath:                                          in.Role,
	}
	now := time.Now().UTC()
	switch p := r.URL.Path; {
	case text[p] != "":
		fmt.Fprint(w, text[p])
	case p == "/latest/dynamic/instance-identity/document" || p == "/latest/dynamic/instance-identity/document/":
		writeJSON(w, map[string]any{
			"accountId": in.AccountID, "architecture": "x86_64", "availabilityZone": in.AZ, "imageId": "ami-0123456789abcdef0",
			"instanceId": in.InstanceID, "instanceType": "m5.large", "pendingTime": now.Add(-time.Hour).Format(time.RFC3339),
			"privateIp": "10.0.0.10", "region": in.Region, "version": "2017-09-30",
		})
	case p == credsPath+in.Role && in.Role != "":
		writeJSON(w, map[string]any{
			"Code": "Success", "LastUpdated": now.Format(time.RFC3339), "Type": "AWS-HMAC",
			"AccessKeyId": in.Credentials.AccessKeyID, "SecretAccessKey": in.Credentials.SecretAccessKey,
			"Token": in.Credentials.Token, "Expiration": now.Add(6 * time.Hour).Format(time.RFC3339),
		})
	default:
		http.NotFound(w, r)
		return http.StatusNotFound
	}
	return http.StatusOK
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "text/plain") // as IMDS answers
	json.NewEncoder(w).Encode(v)
}
