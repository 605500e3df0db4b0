package stress

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
)

// What each profile puts in force in the emulator, operation by operation:
// the fault named for an operation there keeps the "*" aspects of its
// profile (the emulator replaces, it does not add), and the profiles that
// were there before the new ones are unchanged.
func TestProfilesPutEveryAspectInForceOnEachOperation(t *testing.T) {
	const rate = 0.07
	bucket := func(r float64, b int) emulator.Fault { return emulator.Fault{ThrottleRate: r, ThrottleBurst: b} }
	random := emulator.Fault{RandomThrottleRate: rate}
	storm := emulator.Fault{RandomThrottleRate: 0.05, ErrorRate: 0.03}
	lostAs500 := emulator.Fault{RandomThrottleRate: 0.05, ErrorRate: 0.03, LostAnswerRate: 0.15, LostAnswerMode: emulator.Lost500}
	for _, tc := range []struct {
		profile string
		want    map[emulator.Op]emulator.Fault // ops not named: want["*"]
	}{
		{ProfileNone, nil},
		{ProfileLatency, map[emulator.Op]emulator.Fault{emulator.AllOps: {Latency: 10 * time.Millisecond, Jitter: 20 * time.Millisecond}}},
		{ProfileThrottle, map[emulator.Op]emulator.Fault{
			emulator.OpCreateAccessPoint: bucket(100, 20), emulator.OpDeleteAccessPoint: bucket(100, 20),
			emulator.OpDescribeAccessPoints: bucket(200, 50), emulator.OpS3CreateAccessPoint: bucket(100, 20),
			emulator.OpS3DeleteAccessPoint: bucket(100, 20), emulator.OpS3ListAccessPoints: bucket(200, 50),
			emulator.OpS3GetAccessPoint: bucket(200, 50)}},
		{ProfileErrors, map[emulator.Op]emulator.Fault{emulator.AllOps: {ErrorRate: rate}}},
		{ProfileLostAnswers, map[emulator.Op]emulator.Fault{
			emulator.OpCreateAccessPoint: {LostAnswerRate: rate}, emulator.OpDeleteAccessPoint: {LostAnswerRate: rate},
			emulator.OpS3CreateAccessPoint: {LostAnswerRate: rate}, emulator.OpS3DeleteAccessPoint: {LostAnswerRate: rate}}},
		{ProfileRandomThrottle, map[emulator.Op]emulator.Fault{emulator.AllOps: random}},
		{ProfileTokenBucket, map[emulator.Op]emulator.Fault{
			emulator.OpCreateAccessPoint: bucket(20, 20), emulator.OpDeleteAccessPoint: bucket(20, 20),
			emulator.OpDescribeAccessPoints: bucket(50, 50), emulator.OpS3CreateAccessPoint: bucket(20, 20),
			emulator.OpS3DeleteAccessPoint: bucket(20, 20), emulator.OpS3ListAccessPoints: bucket(50, 50),
			emulator.OpS3GetAccessPoint: bucket(50, 50)}},
		{ProfileThrottleMix, map[emulator.Op]emulator.Fault{
			emulator.AllOps:              random,
			emulator.OpCreateAccessPoint: random.Refine(bucket(20, 20)), emulator.OpDeleteAccessPoint: random.Refine(bucket(20, 20)),
			emulator.OpDescribeAccessPoints: random.Refine(bucket(50, 50)), emulator.OpS3CreateAccessPoint: random.Refine(bucket(20, 20)),
			emulator.OpS3DeleteAccessPoint: random.Refine(bucket(20, 20)), emulator.OpS3ListAccessPoints: random.Refine(bucket(50, 50)),
			emulator.OpS3GetAccessPoint: random.Refine(bucket(50, 50))}},
		{ProfileFaultMix, map[emulator.Op]emulator.Fault{
			emulator.AllOps:              storm,
			emulator.OpCreateAccessPoint: lostAs500, emulator.OpDeleteAccessPoint: lostAs500, emulator.OpTagResource: lostAs500,
			emulator.OpS3CreateAccessPoint: lostAs500, emulator.OpS3DeleteAccessPoint: lostAs500, emulator.OpS3TagResource: lostAs500}},
		{ProfileFaultMixBucket, map[emulator.Op]emulator.Fault{
			emulator.AllOps:              storm,
			emulator.OpCreateAccessPoint: lostAs500.Refine(bucket(50, 50)), emulator.OpDeleteAccessPoint: lostAs500, emulator.OpTagResource: lostAs500,
			emulator.OpS3CreateAccessPoint: lostAs500.Refine(bucket(50, 50)), emulator.OpS3DeleteAccessPoint: lostAs500, emulator.OpS3TagResource: lostAs500}},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			set, err := profile(tc.profile, rate)
			if err != nil {
				t.Fatal(err)
			}
			e, err := emulator.New(emulator.Config{DataDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if err := (local{e}).set(context.Background(), set); err != nil {
				t.Fatal(err)
			}
			inForce := e.Faults()
			for _, op := range emulator.Ops() {
				want, ok := tc.want[op]
				if !ok {
					want = tc.want[emulator.AllOps]
				}
				if got := inForce[op]; got != want {
					t.Errorf("%s: %+v in force, want %+v", op, got, want)
				}
			}
		})
	}
}

func TestEveryProfileIsKnownAndAnUnknownOneIsRefusedNamingThem(t *testing.T) {
	for _, name := range Profiles() {
		if _, err := profile(name, 0.05); err != nil {
			t.Errorf("profile %s: %v", name, err)
		}
		if !strings.Contains(ProfileUsage(), name+" (") {
			t.Errorf("--fault-profile help does not describe %s: %s", name, ProfileUsage())
		}
	}
	_, err := profile("gremlins", 0.05)
	if err == nil || !strings.Contains(err.Error(), strings.Join(Profiles(), ", ")) {
		t.Errorf("unknown profile: %v, want an error listing %v", err, Profiles())
	}
}
