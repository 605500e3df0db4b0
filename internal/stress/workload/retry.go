// Package workload plays Kubernetes' external-provisioner against a CSI
// controller: it creates and deletes volumes with the provisioner's retry
// policy, its per-call timeout, duplicate calls for one name and claims
// deleted while their volume is being provisioned, and records every call.
package workload

import (
	"math"
	"time"

	"google.golang.org/grpc/codes"
)

// Outcome is what the provisioner does after a CreateVolume answer.
type Outcome int

const (
	// Done: the volume exists; the answer carries its ID.
	Done Outcome = iota
	// RetryInBackground: the call may still be running or may have been
	// applied; the provisioner must call again with the same name until it
	// gets a final answer, or it could leak what that call created.
	RetryInBackground
	// Final: the driver says nothing was created; the attempt is over.
	Final
)

func (o Outcome) String() string {
	switch o {
	case Done:
		return "done"
	case RetryInBackground:
		return "retry"
	}
	return "final"
}

// CreateOutcome classifies a CreateVolume answer as external-provisioner
// does (upstream-parity.md, "What the CSI spec and the provisioner expect"):
// ABORTED (operation pending), UNAVAILABLE, DEADLINE_EXCEEDED and CANCELLED
// mean "maybe still in progress" and are retried in the background; every
// other code, RESOURCE_EXHAUSTED included ("the operation was not started"),
// ends the attempt.
func CreateOutcome(c codes.Code) Outcome {
	switch c {
	case codes.OK:
		return Done
	case codes.Aborted, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return RetryInBackground
	}
	return Final
}

// Backoff is the provisioner's exponential back-off between attempts for one
// volume: Initial after the first failure, multiplied by Factor after each
// further one, capped at Max. The provisioner's own values (1 s to 5 min) are
// scaled down for a stress run; the shape is the same.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Factor  float64 // <= 1 means 2
}

// DefaultBackoff fits a run of a few thousand volumes in seconds.
var DefaultBackoff = Backoff{Initial: 10 * time.Millisecond, Max: time.Second, Factor: 2}

// Delay is the wait after the failures-th consecutive failure (1-based).
// jitter in [0, 1) spreads waiters over the upper half of the interval so
// that calls aborted together do not come back together.
func (b Backoff) Delay(failures int, jitter float64) time.Duration {
	if failures < 1 {
		failures = 1
	}
	f := b.Factor
	if f <= 1 {
		f = 2
	}
	d := float64(b.Initial) * math.Pow(f, float64(failures-1))
	if b.Max > 0 && d > float64(b.Max) {
		d = float64(b.Max)
	}
	jitter = min(max(jitter, 0), 1)
	return time.Duration(d/2 + d/2*jitter)
}
