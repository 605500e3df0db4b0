// Package emulatortest runs an EFS API emulator for a test.
package emulatortest

import (
	"errors"
	"net"
	"net/http"
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
)

// Start serves an emulator on a random loopback port until the test ends and
// returns its endpoint URL (http://127.0.0.1:PORT) for the SDK's
// BaseEndpoint. An empty cfg.DataDir becomes a fresh t.TempDir().
func Start(t testing.TB, cfg emulator.Config) (endpointURL string, e *emulator.Emulator) {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	e, err := emulator.New(cfg)
	if err != nil {
		t.Fatalf("start emulator: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = e.Close()
		t.Fatalf("listen: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- e.Serve(l) }()
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close emulator: %v", err)
		}
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("emulator served with error: %v", err)
		}
	})
	return "http://" + l.Addr().String(), e
}
