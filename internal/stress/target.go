package stress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	efssdk "github.com/aws/aws-sdk-go-v2/service/efs"
	s3sdk "github.com/aws/aws-sdk-go-v2/service/s3files"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/stress/audit"
)

// target is the driver under test and what surrounds it: the CSI
// connection, the EFS API, the driver process if this tool runs it.
type target struct {
	conn       *grpc.ClientConn
	fsID       string   // the first of fsIDs
	fsIDs      []string // the file systems the class names
	efs        *efssdk.Client
	s3         *s3sdk.Client // an s3files-ap run's: the audit lists S3 Files access points
	metricsURL string
	tmpDir     string // where the driver makes its temporary mount points
	dataDir    string // emulator data directory ("" = markers off)
	rootDirDel bool   // the driver removes root directories on delete
	faults     faultControl
	driver     *driverProc
	driverLog  string
	cleanups   []func()
}

// close undoes setup in reverse order.
func (t *target) close() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// dial connects to a CSI endpoint. Reconnection after a driver restart is
// quick: the default gRPC back-off grows to two minutes, which would stall
// a run after a few kills.
func dial(endpoint string) (*grpc.ClientConn, error) {
	if !strings.Contains(endpoint, "://") {
		endpoint = "unix://" + endpoint
	}
	return grpc.NewClient(endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
}

// awsEnv is the environment of a driver talking to the emulator: everything
// of ours except AWS settings, which point at the emulator.
func awsEnv(endpoint, region string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "AWS_") })
	return append(env, "AWS_ENDPOINT_URL_EFS="+endpoint, "AWS_ENDPOINT_URL_S3FILES="+endpoint, "AWS_REGION="+region,
		"AWS_ACCESS_KEY_ID=efs-csi-stress", "AWS_SECRET_ACCESS_KEY=efs-csi-stress", "AWS_EC2_METADATA_DISABLED=true")
}

// freePort picks a loopback port nobody listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomFileSystemID() string {
	var b [9]byte
	_, _ = rand.Read(b[:])
	return "fs-" + hex.EncodeToString(b[:])[:17]
}

// setupEmbedded starts the emulator in-process (loopback, random port, one
// file system, temporary data directory) and the driver as a child process.
func setupEmbedded(ctx context.Context, cfg *Config, outDir string, onEvent func(kind, note string)) (t *target, err error) {
	t = &target{}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	bin := cfg.DriverBinary
	if bin == "" {
		if bin, err = findDriver(); err != nil {
			return t, err
		}
	}
	work, err := os.MkdirTemp("", "efs-csi-stress-work-")
	if err != nil {
		return t, err
	}
	t.cleanups = append(t.cleanups, func() {
		// Never recurse into a mount a failed delete left behind.
		if mounts, err := audit.TempMounts(mountInfo(), work); err == nil {
			for _, m := range mounts {
				_ = unix.Unmount(m, unix.MNT_DETACH)
			}
		}
		if cfg.KeepWorkDir {
			fmt.Fprintf(cfg.Stderr, "work directory kept: %s\n", work)
			return
		}
		_ = os.RemoveAll(work)
	})
	t.dataDir, t.tmpDir = filepath.Join(work, "data"), filepath.Join(work, "tmp")
	if err := os.Mkdir(t.tmpDir, 0o700); err != nil {
		return t, err
	}

	emuLog, err := os.Create(filepath.Join(outDir, "emulator.log"))
	if err != nil {
		return t, err
	}
	t.cleanups = append(t.cleanups, func() { emuLog.Close() })
	for range max(1, cfg.FileSystems) {
		t.fsIDs = append(t.fsIDs, randomFileSystemID())
	}
	t.fsID = t.fsIDs[0]
	ecfg := emulator.Config{DataDir: t.dataDir, FileSystems: t.fsIDs, Seed: int64(cfg.Seed),
		AccessPointLimit: cfg.AccessPointLimit, Logger: slog.New(slog.NewTextHandler(emuLog, nil))}
	if cfg.S3Files() { // the ID has 17 hex digits: an S3 Files ID too
		ecfg.FileSystems, ecfg.S3FilesFileSystems = nil, []string{t.fsID}
	}
	if ecfg.IAMPolicies, err = cfg.iamPolicies(); err != nil {
		return t, err
	}
	em, err := emulator.New(ecfg)
	if err != nil {
		return t, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		em.Close()
		return t, err
	}
	served := make(chan error, 1)
	go func() { served <- em.Serve(l) }()
	t.cleanups = append(t.cleanups, func() {
		em.Close()
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Warn("emulator served with error", slog.Any("error", err))
		}
	})
	t.faults = local{em}
	efsURL := "http://" + l.Addr().String()

	port, err := freePort()
	if err != nil {
		return t, err
	}
	t.metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	sock := filepath.Join(work, "csi.sock")
	argv := []string{bin, "--endpoint", "unix://" + sock, "--mode", "controller", "--node-id", "efs-csi-stress",
		"--local-root", t.dataDir, "--tmp-dir", t.tmpDir, "--http-endpoint", fmt.Sprintf("127.0.0.1:%d", port)}
	// Removing root directories bind-mounts the file system: root only.
	if t.rootDirDel = os.Geteuid() == 0; t.rootDirDel {
		argv = append(argv, "--delete-access-point-root-dir")
	}
	if cfg.AccessPointLimit > 0 {
		argv = append(argv, fmt.Sprintf("--access-point-limit=%d", cfg.AccessPointLimit))
	}
	argv = append(argv, cfg.DriverArgs...)
	for _, a := range cfg.DriverArgs {
		// The audit expects removed root directories only where the driver
		// removes them: a later flag wins, as in the driver's flag parsing.
		switch strings.TrimLeft(a, "-") {
		case "delete-access-point-root-dir=false":
			t.rootDirDel = false
		case "delete-access-point-root-dir", "delete-access-point-root-dir=true":
			t.rootDirDel = os.Geteuid() == 0
		}
	}
	t.driverLog = filepath.Join(outDir, "driver.log")
	dlog, err := os.Create(t.driverLog)
	if err != nil {
		return t, err
	}
	t.cleanups = append(t.cleanups, func() { dlog.Close() })
	if t.driver, err = startDriver(argv, awsEnv(efsURL, cfg.Region), dlog, cfg.Logger, onEvent); err != nil {
		return t, err
	}
	t.cleanups = append(t.cleanups, func() { t.driver.stop(10 * time.Second) })

	if t.conn, err = dial("unix://" + sock); err != nil {
		return t, err
	}
	t.cleanups = append(t.cleanups, func() { t.conn.Close() })
	opts := audit.ClientOptions{Endpoint: efsURL, Region: cfg.Region, AnyCredentials: true}
	if t.efs, err = audit.NewClient(ctx, opts); err == nil && cfg.S3Files() {
		t.s3, err = audit.NewS3FilesClient(ctx, opts)
	}
	return t, err
}

// setupRemote connects to a driver someone else runs (or that --driver-cmd
// starts) and to its EFS API.
func setupRemote(ctx context.Context, cfg *Config, outDir string, onEvent func(kind, note string)) (t *target, err error) {
	t = &target{fsIDs: strings.Split(cfg.FileSystemID, ","), metricsURL: cfg.MetricsURL, tmpDir: cfg.TmpDir, dataDir: cfg.DataDir}
	t.fsID = t.fsIDs[0]
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	if t.tmpDir == "" {
		t.tmpDir = os.TempDir()
	}
	if cfg.EFSEndpoint != "" {
		t.faults = remote{cfg.EFSEndpoint}
	}
	if cfg.DriverCmd != "" {
		t.driverLog = filepath.Join(outDir, "driver.log")
		dlog, err := os.Create(t.driverLog)
		if err != nil {
			return t, err
		}
		t.cleanups = append(t.cleanups, func() { dlog.Close() })
		if t.driver, err = startDriver([]string{"/bin/sh", "-c", cfg.DriverCmd}, os.Environ(), dlog, cfg.Logger, onEvent); err != nil {
			return t, err
		}
		t.cleanups = append(t.cleanups, func() { t.driver.stop(10 * time.Second) })
	}
	if t.conn, err = dial(cfg.Endpoint); err != nil {
		return t, err
	}
	t.cleanups = append(t.cleanups, func() { t.conn.Close() })
	opts := audit.ClientOptions{Endpoint: cfg.EFSEndpoint, Region: cfg.Region,
		AnyCredentials: cfg.EFSEndpoint != "" && os.Getenv("AWS_ACCESS_KEY_ID") == ""}
	if t.efs, err = audit.NewClient(ctx, opts); err == nil && cfg.S3Files() {
		t.s3, err = audit.NewS3FilesClient(ctx, opts)
	}
	return t, err
}

// mountInfo is this process's mount table ("" if unreadable: nothing found).
func mountInfo() *strings.Reader {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	return strings.NewReader(string(b))
}
