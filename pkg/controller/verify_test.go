package controller

import (
	"context"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// In the auto mode, an access point that a verification did not answer (it
// had a rival) is verified again on every attempt, also once the mode's
// window has closed: the window closing says nothing about that rival.
func TestAutoModeVerifiesAContestedAccessPointAfterItsWindow(t *testing.T) {
	clk := newClock()
	me := writer{host: "h", pid: 1, start: 1, nonce: "n"}
	v, err := newVerifier(VerifyAuto, func(context.Context, string) ([]efs.AccessPoint, error) { return nil, nil }, clk.Now, me)
	if err != nil {
		t.Fatal(err)
	}
	x := &efs.AccessPoint{ID: "fsap-x", FileSystemID: testFS, Tags: map[string]string{TagWriter: "h/2/1/other"}}
	rival := efs.AccessPoint{ID: "fsap-y", FileSystemID: testFS, PosixUser: &efs.PosixUser{UID: 50000, GID: 50000}}
	v.learned(x, false)
	if got := v.verdict(x, false, []efs.AccessPoint{rival}); got == answerIt {
		t.Fatalf("verdict on someone else's fresh access point with a rival = answer")
	}
	clk.Advance(startupVerifyWindow + foreignVerifyWindow + settleAfter)
	if !v.needed(x) {
		t.Errorf("contested access point answered without verification once the window closed")
	}
	if v.needed(&efs.AccessPoint{ID: "fsap-z", FileSystemID: testFS}) {
		t.Errorf("an uncontested access point is verified after the window (the auto mode costs listings for nothing)")
	}
}
