package stress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

// driverProc runs the driver as a child process in its own process group, so
// that a kill reaches everything it started, and restarts it after a kill
// (chaos) or an exit nobody asked for (counted: a crash is an incident).
type driverProc struct {
	argv []string
	env  []string
	out  io.Writer
	log  *slog.Logger
	// onEvent marks kills and crashes on the run's timeline.
	onEvent func(kind, note string)

	mu         sync.Mutex
	cur        *proc
	stopped    bool
	unexpected atomic.Int64
	exits      []string // how each unexpected exit ended
}

type proc struct {
	cmd      *exec.Cmd
	done     chan struct{}
	expected atomic.Bool // the exit was asked for: no restart, no incident
	status   string
}

// startDriver starts the first process.
func startDriver(argv, env []string, out io.Writer, log *slog.Logger, onEvent func(kind, note string)) (*driverProc, error) {
	d := &driverProc{argv: argv, env: env, out: out, log: log, onEvent: onEvent}
	return d, d.start()
}

func (d *driverProc) start() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return errors.New("driver stopped")
	}
	if d.cur != nil {
		select {
		case <-d.cur.done:
		default:
			return nil // a restart raced a kill: one driver is enough
		}
	}
	cmd := exec.Command(d.argv[0], d.argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = d.env, d.out, d.out
	// Pdeathsig: a stress run that dies (a closed pipe, a kill) must not
	// leave its driver serving.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start driver %s: %w", d.argv[0], err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	d.cur = p
	d.log.Debug("driver started", slog.Int("pid", cmd.Process.Pid))
	go d.reap(p)
	return nil
}

// reap waits for p to exit; an exit nobody asked for is counted and the
// driver restarted, as Kubernetes would restart the container.
func (d *driverProc) reap(p *proc) {
	err := p.cmd.Wait()
	p.status = "exit 0"
	if err != nil {
		p.status = err.Error()
	}
	close(p.done)
	if p.expected.Load() {
		return
	}
	d.unexpected.Add(1)
	note := fmt.Sprintf("pid %d: %s", p.cmd.Process.Pid, p.status)
	d.mu.Lock()
	d.exits = append(d.exits, note)
	d.mu.Unlock()
	d.log.Warn("driver exited unexpectedly; restarting", slog.String("how", note))
	d.onEvent("crash", note)
	time.Sleep(200 * time.Millisecond) // as a kubelet back-off would, and no hot loop
	if err := d.start(); err != nil {
		d.log.Error("driver restart failed", slog.Any("error", err))
	}
}

// kill sends SIGKILL to the driver's process group, waits for it to die and
// starts a new one.
func (d *driverProc) kill() (int, error) {
	d.mu.Lock()
	p := d.cur
	d.mu.Unlock()
	p.expected.Store(true)
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-p.done
	return pid, d.start()
}

// stop ends the driver for good: SIGTERM, then SIGKILL after grace.
func (d *driverProc) stop(grace time.Duration) {
	d.mu.Lock()
	d.stopped = true
	p := d.cur
	d.mu.Unlock()
	if p == nil {
		return
	}
	p.expected.Store(true)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// crashes describes the unexpected exits so far.
func (d *driverProc) crashes() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.exits...)
}

// waitReady waits until the driver answers Probe with ready.
func waitReady(ctx context.Context, conn grpc.ClientConnInterface, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	id := csi.NewIdentityClient(conn)
	var last error
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		resp, err := id.Probe(pctx, &csi.ProbeRequest{})
		pcancel()
		if err == nil && (resp.GetReady() == nil || resp.GetReady().GetValue()) {
			return nil
		}
		last = err
		if err == nil {
			last = errors.New("probe says not ready")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("driver not ready after %v: %w", timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// chaos kills the driver at random moments, around every interval, until
// stopped.
type chaos struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startChaos begins killing d. before runs just before each kill (it
// collects the dying driver's counters). Each interval starts once the
// restarted driver answers Probe on conn: a driver killed again before it
// serves (a loaded machine starts processes slowly) would make no progress
// at all, which tests nothing.
func startChaos(ctx context.Context, d *driverProc, conn grpc.ClientConnInterface, interval time.Duration, before func(), kills *atomic.Int64) *chaos {
	ctx, cancel := context.WithCancel(ctx)
	c := &chaos{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			wait := time.Duration((0.5 + rand.Float64()) * float64(interval))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			before()
			pid, err := d.kill()
			kills.Add(1)
			d.onEvent("kill", fmt.Sprintf("pid %d", pid))
			if err != nil {
				d.log.Error("driver restart after kill failed", slog.Any("error", err))
			}
			if err := waitReady(ctx, conn, 30*time.Second); err != nil && ctx.Err() == nil {
				d.log.Error("driver not ready after a kill", slog.Any("error", err))
			}
		}
	}()
	return c
}

// stop ends the chaos and waits for a kill in progress to finish.
func (c *chaos) stop() {
	if c == nil {
		return
	}
	c.cancel()
	<-c.done
}

// findDriver locates efs-csi-driver: next to this executable, then in PATH.
func findDriver() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "efs-csi-driver")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath("efs-csi-driver")
	if err != nil {
		return "", errors.New("efs-csi-driver not found next to efs-csi-stress nor in PATH: run `make build` or pass --driver-binary")
	}
	return p, nil
}
