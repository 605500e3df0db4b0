package mount

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrNotResponding: a system call on this mount point, made by an earlier
// call whose caller has given up, has not returned yet: the server does not
// answer. Callers answer UNAVAILABLE at once rather than block another
// thread on it.
var ErrNotResponding = errors.New("mount point not responding")

// NotRespondingError is the error of a call refused because an earlier one
// is still blocked. It wraps ErrNotResponding.
type NotRespondingError struct {
	Op, Path string
	// Since is when the blocked system call started.
	Since time.Time
}

func (e *NotRespondingError) Error() string {
	return fmt.Sprintf("%v: an earlier %s has been blocked since %s", ErrNotResponding, e.Op, e.Since.UTC().Format(time.RFC3339))
}

func (e *NotRespondingError) Unwrap() error { return ErrNotResponding }

// BlockedSince reports when the blocked system call behind err started;
// ok is false when err is not a NotRespondingError.
func BlockedSince(err error) (since time.Time, ok bool) {
	var nr *NotRespondingError
	if errors.As(err, &nr) {
		return nr.Since, true
	}
	return time.Time{}, false
}

// gate lets at most one system call per key (a mount point, and a class of
// call) run at a time. A system call blocked on a hung NFS server cannot be
// interrupted and pins an OS thread until the kernel lets it go; without the
// gate every retry of kubelet's would pin one more, until the process hits
// its thread limit and dies. With it:
//
//   - a caller that finds the key free runs the call in a goroutine and waits
//     for it within its context; if the context ends first, the call is
//     abandoned (it goes on, holding the key, until the kernel returns);
//   - a caller that finds a call in flight whose caller still waits, waits
//     for it to finish (within its own context) and then makes its own;
//   - a caller that finds an abandoned call in flight answers with a
//     NotRespondingError, and so does everyone waiting behind it: at once
//     once the call is abandonGrace old; before, it waits for the call to
//     return (a cancelled call on a live mount point) until then.
//
// So per key at most one thread is ever blocked, whatever the callers do.
type gate struct {
	mu     sync.Mutex
	flying map[string]*flight

	// waitingAbandoned, if set, is called when a caller starts waiting for
	// a young abandoned call. Tests use it to order events.
	waitingAbandoned func()
}

type flight struct {
	op        string
	start     time.Time
	done      chan struct{} // closed when the system call returned
	abandoned chan struct{} // closed when its caller gave up first
	once      sync.Once
}

func (f *flight) abandon() { f.once.Do(func() { close(f.abandoned) }) }

func newGate() *gate { return &gate{flying: map[string]*flight{}} }

// inFlight counts the system calls running now, abandoned ones included.
func (g *gate) inFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.flying)
}

// abandonGrace is how long after its start an abandoned call is still
// waited for rather than taken for a hung server. A caller gives up on a
// call on a live mount point too, when it is cancelled (NodeUnpublishVolume
// cancels the volume's usage walk, then unmounts at once): its statfs then
// returns within microseconds, milliseconds on a loaded machine, and the
// next call must not be refused for it. A call on a hung server is still
// answered NotResponding, at most this much later.
const abandonGrace = time.Second

// awaitYoungAbandoned waits, within ctx, until the abandoned call fl
// returns (returned) or is abandonGrace old.
func (g *gate) awaitYoungAbandoned(ctx context.Context, fl *flight) (returned bool, err error) {
	wait := time.Until(fl.start.Add(abandonGrace))
	if wait <= 0 {
		return false, nil
	}
	if g.waitingAbandoned != nil {
		g.waitingAbandoned()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-fl.done:
		return true, nil
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// gated runs f, a system call named op on path that may block on a hung
// server, through g under key; see gate.
func gated[T any](ctx context.Context, g *gate, key, op, path string, f func() (T, error)) (T, error) {
	var zero T
	for {
		if err := ctx.Err(); err != nil {
			return zero, err
		}
		g.mu.Lock()
		fl, busy := g.flying[key]
		if !busy {
			fl = &flight{op: op, start: time.Now(), done: make(chan struct{}), abandoned: make(chan struct{})}
			g.flying[key] = fl
		}
		g.mu.Unlock()
		if busy {
			select {
			case <-fl.done: // finished: try again, with a call of our own
				continue
			case <-fl.abandoned:
				returned, err := g.awaitYoungAbandoned(ctx, fl)
				if err != nil {
					return zero, err
				}
				if returned {
					continue
				}
				return zero, &NotRespondingError{Op: fl.op, Path: path, Since: fl.start}
			case <-ctx.Done():
				return zero, ctx.Err()
			}
		}
		type result struct {
			v   T
			err error
		}
		ch := make(chan result, 1)
		go func() {
			v, err := f()
			g.mu.Lock()
			delete(g.flying, key)
			g.mu.Unlock()
			close(fl.done)
			ch <- result{v, err}
		}()
		select {
		case r := <-ch:
			return r.v, r.err
		case <-ctx.Done():
			fl.abandon()
			return zero, ctx.Err()
		}
	}
}
