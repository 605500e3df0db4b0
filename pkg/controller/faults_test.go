package controller

import (
	"fmt"
	"sync"
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
)

// Point 7 and 6 under load: bursts of throttles, 5xx answers and answers lost
// after the change was applied never turn into hard failures, and never into
// a second access point or a shared GID.
func TestFaultBurstsNeverBecomeHardFailuresOrLeaks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault emulator.Fault
	}{
		{"throttle", emulator.Fault{ThrottleRate: 50, ThrottleBurst: 5}},
		{"server errors", emulator.Fault{ErrorRate: 0.3}},
		{"lost answers", emulator.Fault{LostAnswerRate: 0.3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBed(t)
			for _, op := range []emulator.Op{"CreateAccessPoint", "DeleteAccessPoint", "DescribeAccessPoints"} {
				b.emu.SetFault(op, tc.fault)
			}
			const n = 60
			vols := make([]string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					r, err := b.create(fmt.Sprintf("pvc-%d", i))
					if err != nil {
						t.Errorf("create %d: %v", i, err)
						return
					}
					vols[i] = r.GetVolume().GetVolumeId()
				})
			}
			wg.Wait()
			seen := map[int64]bool{}
			for _, ap := range b.wantAccessPoints(n) {
				if seen[ap.PosixUser.GID] {
					t.Errorf("GID %d given twice", ap.PosixUser.GID)
				}
				seen[ap.PosixUser.GID] = true
			}
			for _, v := range vols {
				wg.Go(func() {
					if err := b.delete(v); err != nil {
						t.Errorf("delete %s: %v", v, err)
					}
				})
			}
			wg.Wait()
			b.wantAccessPoints(0)
		})
	}
}
