package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Election names the Lease replicas compete for and its timings.
type Election struct {
	Namespace, Name string
	// Identity of this candidate; "" is the host name (the pod name) plus a
	// random suffix, so that two processes never share one.
	Identity      string
	LeaseDuration time.Duration // how long a leader that stopped renewing keeps the lease
	RenewDeadline time.Duration // how long the leader tries to renew before it gives up
	RetryPeriod   time.Duration // between attempts to acquire or renew
	// OnLeading, if set, is called with true when this candidate starts leading
	// and false when it stops (for logs and metrics).
	OnLeading func(bool)
}

// RunWhileLeader campaigns for the Lease until ctx ends and runs fn while
// this candidate holds it (client-go's leaderelection with a
// coordination.k8s.io Lease). fn's context ends when the lease is lost or ctx
// ends; the next campaign starts only after fn has returned, so one process
// never runs fn twice at once. On ctx's end the lease is released, so a
// standby takes over within RetryPeriod instead of LeaseDuration. Two
// processes can overlap by at most the time a deposed leader's fn takes to
// see its context end: fn must be safe to run concurrently with itself in
// another process (the collector is: its deletions are idempotent).
func (c *Client) RunWhileLeader(ctx context.Context, e Election, fn func(context.Context)) error {
	if e.Identity == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		e.Identity = host + "_" + hex.EncodeToString(b[:])
	}
	if e.Namespace == "" || e.Name == "" {
		return errors.New("kube: the election needs a Lease namespace and name")
	}
	for ctx.Err() == nil {
		if err := c.leadOnce(ctx, e, fn); err != nil {
			return err
		}
	}
	return nil
}

// leadOnce campaigns until it wins and then leads until the lease is lost,
// or until ctx ends; it returns only once fn has returned (or will never be
// called). client-go's Run starts fn in a goroutine of its own and does not
// wait for it: entered/stopping tell whether that goroutine must be waited for.
func (c *Client) leadOnce(ctx context.Context, e Election, fn func(context.Context)) error {
	var (
		mu                sync.Mutex
		entered, stopping bool
		done              = make(chan struct{})
	)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name},
			Client:     c.leases,
			LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
		},
		LeaseDuration:   e.LeaseDuration,
		RenewDeadline:   e.RenewDeadline,
		RetryPeriod:     e.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            e.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				mu.Lock()
				if stopping {
					mu.Unlock()
					return
				}
				entered = true
				mu.Unlock()
				defer close(done)
				if e.OnLeading != nil {
					e.OnLeading(true)
					defer e.OnLeading(false)
				}
				fn(lctx)
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return err
	}
	// Run returns once the lease is lost (after winning it: it gives up only
	// when ctx ends) or ctx ends, and cancels fn's context.
	le.Run(ctx)
	mu.Lock()
	stopping = ctx.Err() != nil
	wait := entered || !stopping // not stopping: Run won, so fn's goroutine is on its way
	mu.Unlock()
	if wait {
		<-done
	}
	return nil
}

// LeaseState is what a Lease says of its election.
type LeaseState struct {
	Created time.Time `json:"created"` // when the Lease was first made: no election under its name before
	Holder  string    `json:"holder"`  // "" when released
	Renewed time.Time `json:"renewed"` // the holder's last renewal
	// Duration is how long the holder's claim lasts after Renewed.
	Duration time.Duration `json:"duration"`
}

// Held reports whether a candidate held the Lease at now.
func (l LeaseState) Held(now time.Time) bool {
	return l.Holder != "" && !l.Renewed.IsZero() && now.Sub(l.Renewed) <= l.Duration
}

// Lease reads the Lease namespace/name; ok is false when there is none.
func (c *Client) Lease(ctx context.Context, namespace, name string) (st LeaseState, ok bool, err error) {
	l, err := c.leases.Leases(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return LeaseState{}, false, nil
	}
	if err != nil {
		return LeaseState{}, false, fmt.Errorf("kube: get Lease %s/%s: %w", namespace, name, err)
	}
	st.Created = l.CreationTimestamp.Time
	if h := l.Spec.HolderIdentity; h != nil {
		st.Holder = *h
	}
	if r := l.Spec.RenewTime; r != nil {
		st.Renewed = r.Time
	}
	if d := l.Spec.LeaseDurationSeconds; d != nil {
		st.Duration = time.Duration(*d) * time.Second
	}
	return st, true, nil
}
