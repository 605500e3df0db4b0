package snapshot

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// job is a copy running in this process, in the background: it outlives
// the call that started it (the CO calls again until it is done), and at
// most Config.MaxCopies run at once.
type job struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// start returns the job of key, started now with run if none runs.
func (m *Manager) start(key journal.Key, run func(ctx context.Context) error) *job {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := jobKey(key)
	if j := m.jobs[k]; j != nil {
		return j
	}
	ctx, cancel := context.WithCancel(context.Background())
	j := &job{cancel: cancel, done: make(chan struct{})}
	m.jobs[k] = j
	go func() {
		defer cancel()
		select {
		case m.slots <- struct{}{}:
			j.err = m.runSafely(ctx, k, run)
			<-m.slots
		case <-ctx.Done():
			j.err = ctx.Err()
		}
		if j.err != nil {
			m.cfg.Logger.Error("copy failed: the next call starts it again", slog.String("entry", k), slog.Any("error", j.err))
		}
		m.mu.Lock()
		if m.jobs[k] == j {
			delete(m.jobs, k)
		}
		m.mu.Unlock()
		close(j.done)
	}()
	return j
}

// runSafely runs a copy; a panic of the copier (a defect) is its error,
// logged loudly with its stack, not the controller's end.
func (m *Manager) runSafely(ctx context.Context, k string, run func(ctx context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			m.cfg.Logger.Error("copy panicked: a defect; the next call starts it again", slog.String("entry", k),
				slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			err = fmt.Errorf("snapshot: copy of %s panicked: %v", k, p)
		}
	}()
	return run(ctx)
}

func jobKey(k journal.Key) string { return string(k.Kind) + "/" + k.FileSystem + "/" + k.Name }

// await waits for j up to Config.Wait and the call's own end: ErrPending
// if it still runs then.
func (m *Manager) await(ctx context.Context, j *job) error {
	wait, cancel := context.WithTimeout(ctx, m.cfg.Wait)
	defer cancel()
	select {
	case <-j.done:
		return j.err
	case <-wait.Done():
		return fmt.Errorf("%w: call again", ErrPending)
	}
}

// running reports whether a copy of key runs in this process.
func (m *Manager) running(key journal.Key) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.jobs[jobKey(key)] != nil
}

// stop cancels the copy of key, if one runs here, and waits for its end.
func (m *Manager) stop(key journal.Key) {
	m.mu.Lock()
	j := m.jobs[jobKey(key)]
	m.mu.Unlock()
	if j != nil {
		j.cancel()
		<-j.done
	}
}

// Close stops every copy of this process (each call after starts them
// again, on whichever controller it reaches).
func (m *Manager) Close() {
	m.mu.Lock()
	jobs := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		jobs = append(jobs, j)
	}
	m.mu.Unlock()
	for _, j := range jobs {
		j.cancel()
		<-j.done
	}
}
