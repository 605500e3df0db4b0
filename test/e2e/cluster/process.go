// Package cluster runs a real Kubernetes control plane on loopback for the end-to-end
// test: etcd, kube-apiserver and kube-controller-manager built by
// hack/e2e-components.sh, plus helpers to run other processes (the emulator, the driver,
// csi-provisioner) beside it with their logs kept for a failing test to show.
package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrExited is returned when a process is waited on for readiness but exits first.
var ErrExited = errors.New("process exited")

// Process is one running child process whose output is appended to LogPath.
type Process struct {
	Name    string
	LogPath string

	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	err  error
}

// StartProcess starts bin with args; env is added to this process's environment. The
// child is killed if the test binary dies (Pdeathsig), so a crashed test leaves nothing.
func StartProcess(name, logDir, bin string, env []string, args ...string) (*Process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return startCmd(name, logDir, cmd)
}

// startCmd starts cmd (its SysProcAttr set by the caller) with its output appended to
// logDir/name.log.
func startCmd(name, logDir string, cmd *exec.Cmd) (*Process, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "==== %s start: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(cmd.Args, " "))
	cmd.Stdout = f
	cmd.Stderr = f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "==== %s exit: %v\n", time.Now().Format(time.RFC3339Nano), err)
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop sends sig, waits up to grace for the process to exit, then kills it. It returns
// how long the process took to exit and whether it exited within grace.
func (p *Process) Stop(sig os.Signal, grace time.Duration) (time.Duration, bool) {
	start := time.Now()
	select {
	case <-p.done:
		return 0, true
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return time.Since(start), true
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return time.Since(start), false
}

// Kill kills the process at once (SIGKILL) and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// WaitReady polls ready until it returns nil, the process exits, or ctx ends.
func (p *Process) WaitReady(ctx context.Context, ready func(context.Context) error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s: %w before it was ready (%v); log %s", p.Name, ErrExited, p.err, p.LogPath)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last: %v); log %s", p.Name, ctx.Err(), last, p.LogPath)
		case <-tick.C:
		}
	}
}

// Tail writes the last n lines of the process's log to w.
func (p *Process) Tail(w io.Writer, n int) {
	TailFile(w, p.LogPath, n)
}

// TailFile writes the last n lines of path to w.
func TailFile(w io.Writer, path string, n int) {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(w, "(%v)\n", err)
		return
	}
	defer f.Close()
	ring := make([]string, 0, n)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if len(ring) == n {
			ring = ring[1:]
		}
		ring = append(ring, sc.Text())
	}
	fmt.Fprintf(w, "---- last %d lines of %s\n%s\n", len(ring), path, strings.Join(ring, "\n"))
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Usage is what a running process has used so far, for sizing resource requests.
type Usage struct {
	PeakRSS uint64        // bytes (VmHWM)
	CPU     time.Duration // user + system
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// Usage reads the process's peak resident memory and CPU time from /proc.
func (p *Process) Usage() (Usage, error) {
	var u Usage
	pid := p.cmd.Process.Pid
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err != nil {
				return u, fmt.Errorf("VmHWM %q: %w", rest, err)
			}
			u.PeakRSS = kb * 1024
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the command name (which may hold spaces) start at state, field 3;
	// utime and stime are fields 14 and 15.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 13 {
		return u, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var utime, stime uint64
	if _, err := fmt.Sscan(fields[11], &utime); err != nil {
		return u, err
	}
	if _, err := fmt.Sscan(fields[12], &stime); err != nil {
		return u, err
	}
	u.CPU = time.Duration(utime+stime) * time.Second / clockTicks
	return u, nil
}
