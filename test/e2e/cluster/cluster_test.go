package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The serving certificate must verify for every name clients use, against the CA that
// the kubeconfigs carry; the SA key pair must be a matching RSA pair the API server reads.
func TestPKIServingCertificateVerifiesForLoopbackNames(t *testing.T) {
	p, err := newPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(p.ServingCert, p.ServingKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(p.CAPEM) {
		t.Fatal("CA PEM not parsable")
	}
	for _, name := range []string{"127.0.0.1", "localhost", "kubernetes.default.svc"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	keyPEM, err := os.ReadFile(p.SAKey)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(keyPEM)
	key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := os.ReadFile(p.SAPub)
	if err != nil {
		t.Fatal(err)
	}
	pblock, _ := pem.Decode(pubPEM)
	pub, err := x509.ParsePKIXPublicKey(pblock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !key.PublicKey.Equal(pub) {
		t.Error("sa.pub is not the public half of sa.key")
	}
}

func TestProcessStop(t *testing.T) {
	tests := []struct {
		name         string
		script       string
		grace        time.Duration
		wantGraceful bool
	}{
		// The shell exits on SIGTERM: Stop reports a graceful exit.
		{"exits on SIGTERM", `trap 'exit 0' TERM; echo "rea""dy"; while :; do sleep 0.05; done`, 10 * time.Second, true},
		// The shell ignores SIGTERM: Stop kills it after the grace period.
		{"ignores SIGTERM and is killed", `trap '' TERM; echo "rea""dy"; while :; do sleep 0.05; done`, 300 * time.Millisecond, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p, err := StartProcess("sh", dir, "/bin/sh", nil, "-c", tc.script)
			if err != nil {
				t.Fatal(err)
			}
			// Signal only once the trap is installed, i.e. once "ready" is in the log (the
			// script spells it in two parts: the log's first line shows the command).
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := p.WaitReady(ctx, logContains(p.LogPath, "ready")); err != nil {
				t.Fatal(err)
			}
			_, graceful := p.Stop(syscall.SIGTERM, tc.grace)
			if graceful != tc.wantGraceful {
				t.Errorf("graceful = %v, want %v", graceful, tc.wantGraceful)
			}
			select {
			case <-p.Done():
			default:
				t.Error("Stop returned with the process still running")
			}
		})
	}
}

func TestWaitReadyReportsAnEarlyExit(t *testing.T) {
	p, err := StartProcess("false", t.TempDir(), "/bin/false", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitReady(context.Background(), func(context.Context) error { return errors.New("never ready") })
	if !errors.Is(err, ErrExited) {
		t.Fatalf("err = %v, want ErrExited", err)
	}
}

// With EFS_E2E_BUILD=0 semantics (build=false) an empty cache is reported as
// ErrComponentsMissing, which the suite turns into a skip, and nothing is built.
func TestLoadComponentsWithoutBuildReportsMissing(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..", "..")
	cache := t.TempDir()
	t.Setenv("EFS_E2E_CACHE", cache)
	c, err := LoadComponents(context.Background(), repo, false, io.Discard)
	if !errors.Is(err, ErrComponentsMissing) {
		t.Fatalf("err = %v, want ErrComponentsMissing", err)
	}
	if !strings.HasPrefix(c.Etcd, cache+"/etcd-") || !strings.HasPrefix(c.CSIProvisioner, cache+"/csi-provisioner-") {
		t.Errorf("paths not under the cache: %+v", c)
	}
	entries, _ := os.ReadDir(cache)
	if len(entries) != 0 {
		t.Errorf("--paths wrote into the cache: %v", entries)
	}
}

func logContains(path, s string) func(context.Context) error {
	return func(context.Context) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), s) {
			return errors.New("not yet")
		}
		return nil
	}
}

// A busy child shows CPU time and a resident set: the figures the e2e report sizes
// resource requests from are read, not zero.
func TestUsageOfABusyProcess(t *testing.T) {
	p, err := StartProcess("busy", t.TempDir(), "/bin/sh", nil, "-c", `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo "fin""ished"; exec sleep 60`)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx, logContains(p.LogPath, "finished")); err != nil {
		t.Fatal(err)
	}
	u, err := p.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.PeakRSS == 0 || u.CPU == 0 {
		t.Errorf("usage = %+v, want non-zero memory and CPU", u)
	}
}

func TestBuildReleaseOfAnUnknownRevisionIsErrRevisionMissing(t *testing.T) {
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	_, err = BuildRelease(context.Background(), repo, "no-such-tag-or-commit", cache)
	if !errors.Is(err, ErrRevisionMissing) {
		t.Fatalf("BuildRelease of an unknown revision: %v, want ErrRevisionMissing", err)
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 0 {
		t.Errorf("the cache holds %d entries after a failed build", len(entries))
	}
}
