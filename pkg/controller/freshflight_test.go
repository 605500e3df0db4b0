package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// Callers that arrive while a call is in flight get the next call's answer,
// all of them the same one; a caller that gives up leaves it to the others.
func TestFreshFlightAnswersFromACallThatStartedAfterTheCaller(t *testing.T) {
	var calls atomic.Int32
	started, release := make(chan int32), make(chan struct{})
	f := newFreshFlight(time.Minute, func(ctx context.Context, key string) (int32, error) {
		n := calls.Add(1)
		started <- n
		<-release
		return n, nil
	})
	joined := make(chan string, 8)
	f.joined = func(k string) { joined <- k }
	type answer struct {
		n   int32
		err error
	}
	do := func(ctx context.Context) <-chan answer {
		c := make(chan answer, 1)
		go func() {
			n, err := f.Do(ctx, "fs-1")
			c <- answer{n, err}
		}()
		return c
	}
	first := do(context.Background())
	<-joined
	if n := <-started; n != 1 {
		t.Fatalf("call %d started, want 1", n)
	}
	gaveUp, giveUp := context.WithCancel(context.Background())
	later := []<-chan answer{do(context.Background()), do(context.Background())}
	quitter := do(gaveUp)
	for range 3 {
		<-joined
	}
	giveUp()
	if a := <-quitter; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("a caller that gave up got %+v", a)
	}
	release <- struct{}{}
	if a := <-first; a.n != 1 || a.err != nil {
		t.Fatalf("first caller got %+v, want call 1", a)
	}
	if n := <-started; n != 2 {
		t.Fatalf("call %d started, want 2", n)
	}
	release <- struct{}{}
	for _, c := range later {
		if a := <-c; a.n != 2 || a.err != nil {
			t.Fatalf("a caller that came during call 1 got %+v, want call 2", a)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d calls, want 2", n)
	}
	// A caller after that gets a call of its own.
	next := do(context.Background())
	if n := <-started; n != 3 {
		t.Fatalf("call %d started, want 3", n)
	}
	release <- struct{}{}
	if a := <-next; a.n != 3 {
		t.Fatalf("a caller after the others got %+v, want call 3", a)
	}
}
