package controller

import (
	"context"
	"sync"
	"time"
)

// freshFlight shares calls whose answer must be fresh, such as a listing
// that has to show every access point that existed when the caller asked.
// Do joins the next call for its key that starts after Do was called: one
// call serves every caller waiting when it starts, and a call already in
// flight when a caller arrives does not count for it (it may have read EFS
// before the caller's moment). singleflight's sharing of the call in flight
// is exactly what must not happen here, hence this.
//
// The call runs on a context of its own, bounded by timeout, not on any
// caller's: a caller that gives up leaves the call to the others. It carries
// the values (not the deadline or cancellation) of its batch's first
// caller's context, so that the requests it makes are counted for that
// caller's RPC (efs.WithRequestCounter). Callers
// share the answer and must not modify it. No goroutine is left once no
// caller waits.
type freshFlight[K comparable, V any] struct {
	call    func(context.Context, K) (V, error)
	timeout time.Duration
	joined  func(K) // tests: a caller is queued for the next call

	mu   sync.Mutex
	runs map[K]*freshRun[V] // keys with a call in flight or about to start
}

type freshRun[V any] struct {
	waiting []chan freshResult[V]
	first   context.Context // the first waiter's context, for its values
}

type freshResult[V any] struct {
	v   V
	err error
}

func newFreshFlight[K comparable, V any](timeout time.Duration, call func(context.Context, K) (V, error)) *freshFlight[K, V] {
	return &freshFlight[K, V]{call: call, timeout: timeout, runs: map[K]*freshRun[V]{}}
}

// Do returns the answer of a call for key that started after Do was called,
// or ctx's error if ctx ends first.
func (f *freshFlight[K, V]) Do(ctx context.Context, key K) (V, error) {
	ch := make(chan freshResult[V], 1) // the run never blocks on a caller that left
	f.mu.Lock()
	r, running := f.runs[key]
	if !running {
		r = &freshRun[V]{}
		f.runs[key] = r
	}
	if len(r.waiting) == 0 {
		r.first = context.WithoutCancel(ctx)
	}
	r.waiting = append(r.waiting, ch)
	joined := f.joined
	f.mu.Unlock()
	if !running {
		go f.run(key, r)
	}
	if joined != nil {
		joined(key)
	}
	select {
	case res := <-ch:
		return res.v, res.err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

// run calls for the callers queued when each call starts, until none is.
func (f *freshFlight[K, V]) run(key K, r *freshRun[V]) {
	for {
		f.mu.Lock()
		batch, first := r.waiting, r.first
		r.waiting, r.first = nil, nil
		if len(batch) == 0 {
			delete(f.runs, key)
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		ctx, cancel := context.WithTimeout(first, f.timeout)
		v, err := f.call(ctx, key)
		cancel()
		for _, ch := range batch {
			ch <- freshResult[V]{v, err}
		}
	}
}
