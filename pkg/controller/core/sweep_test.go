package core

import (
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// TestSweepSteps drives the sweep of one access point through scripted
// outcomes: it deletes only under its own hold of the access point's id,
// with the record read under that hold not owning it, and releases the
// hold whatever it decides (but when the volume is busy in this process:
// the next round resumes it).
func TestSweepSteps(t *testing.T) {
	cfg := SweepConfig{Cluster: "c1", Grace: time.Hour}
	life := t0.Add(-2 * time.Hour)
	ap, rec := ours()
	ap.Tags[ownership.TagRecordLife] = life.Format(time.RFC3339Nano)
	ap.PosixUser = &efs.PosixUser{UID: 60001, GID: 60001}
	owning := *rec
	owning.Created = life
	moved := owning
	moved.AccessPoint, moved.ClientToken = "", volume.GIDToken(fsID, 60002)
	nextLife := owning
	nextLife.Created = t0
	young := *ap
	young.Tags = map[string]string{}
	for k, v := range ap.Tags {
		young.Tags[k] = v
	}
	young.Tags[ownership.TagRecordLife] = t0.Add(-time.Minute).Format(time.RFC3339Nano)
	foreign := young
	foreign.Tags = map[string]string{ownership.TagCluster: "true", ownership.TagVolumeName: name, ownership.TagClusterID: "c2",
		ownership.TagRecordLife: ap.Tags[ownership.TagRecordLife]}
	notFound := Result{Err: journal.ErrNotFound}
	lock := "lock name/" + name
	deleted := []step{{lock, Result{}}, {"read record hint=false", notFound}, {"named", Result{}},
		{"delete " + apID, Result{}}, {"log access point deleted", Result{}}, {"release sweep 60001", Result{}}, {"answer " + apID, Result{}}}
	// The machines under test, given the script's Named and logger.
	sweep := func(ap *efs.AccessPoint) func(SweepConfig) *Sweep {
		return func(cfg SweepConfig) *Sweep { return NewSweep(cfg, fsID, ap, t0) }
	}
	resume := func(id int64) func(SweepConfig) *Sweep {
		return func(cfg SweepConfig) *Sweep { return NewResumeSweep(cfg, fsID, id, apID) }
	}
	freeID := func(cfg SweepConfig) *Sweep { return NewFreeID(cfg, fsID, 60004, rec.Token) }
	for _, tc := range []struct {
		name  string
		start func(SweepConfig) *Sweep
		steps []step
	}{
		{"an access point made within the grace is left", sweep(&young), []step{{"answer ok", Result{}}}},
		{"another cluster's is left", sweep(&foreign), []step{{"answer ok", Result{}}}},
		{"one a PersistentVolume names is left", sweep(ap), []step{{"named", Result{Yes: true}}, {"answer ok", Result{}}}},
		{"one its record names is left, nothing held", sweep(ap), []step{
			{"named", Result{}}, {"read record hint=false", Result{Record: &owning}}, {"answer ok", Result{}}}},
		{"one no record names is deleted under the sweep's hold", sweep(ap), append([]step{
			{"named", Result{}}, {"read record hint=false", notFound}, {"hold for sweep 60001", Result{}}}, deleted...)},
		{"a record that moved off it or is of another life does not own it", sweep(ap), append([]step{
			{"named", Result{}}, {"read record hint=false", Result{Record: &moved}}, {"hold for sweep 60001", Result{}}}, deleted...)},
		{"an id its volume's next life holds is left: that life may adopt it", sweep(ap), []step{
			{"named", Result{}}, {"read record hint=false", Result{Record: &nextLife}},
			{"hold for sweep 60001", Result{Err: journal.ErrIDTaken, Token: rec.Token}}, {"release moved 60001", Result{}},
			{"hold for sweep 60001", Result{Err: journal.ErrIDTaken, Token: rec.Token}}, {"answer ok", Result{}}}},
		{"an id held for nobody is released, then held", sweep(ap), append([]step{
			{"named", Result{}}, {"read record hint=false", notFound},
			{"hold for sweep 60001", Result{Err: journal.ErrIDTaken, Token: rec.Token}}, {"release moved 60001", Result{}},
			{"hold for sweep 60001", Result{}}}, deleted...)},
		{"a record that owns it under the hold keeps it, and the hold goes", sweep(ap), []step{
			{"named", Result{}}, {"read record hint=false", notFound}, {"hold for sweep 60001", Result{}},
			{lock, Result{}}, {"read record hint=false", Result{Record: &owning}}, {"release sweep 60001", Result{}}, {"answer ok", Result{}}}},
		{"a volume busy in this process: the hold stays for the next round", sweep(ap), []step{
			{"named", Result{}}, {"read record hint=false", notFound}, {"hold for sweep 60001", Result{}},
			{lock, Result{Err: keylock.ErrBusy}}, {"answer ok", Result{}}}},
		{"a failed delete keeps the hold: resumed next round", sweep(ap), []step{
			{"named", Result{}}, {"read record hint=false", notFound}, {"hold for sweep 60001", Result{}},
			{lock, Result{}}, {"read record hint=false", notFound}, {"named", Result{}},
			{"delete " + apID, Result{Err: errAPI}}, {"answer sweep " + apID + ": " + errAPI.Error(), Result{}}}},
		{"a killed sweep's hold is resumed", resume(60001), append([]step{
			{"describe " + apID, Result{AP: ap, Now: t0}}}, deleted...)},
		{"a hold whose access point is gone is released", resume(60001), []step{
			{"describe " + apID, Result{Err: efs.ErrAccessPointNotFound}}, {"release sweep 60001", Result{}}, {"answer ok", Result{}}}},
		{"a forged hold (for an id the access point does not carry) deletes nothing", resume(60007), []step{
			{"describe " + apID, Result{AP: ap, Now: t0}}, {"release sweep 60007", Result{}}, {"answer ok", Result{}}}},
		{"a forged hold for another cluster's access point deletes nothing", resume(60001), []step{
			{"describe " + apID, Result{AP: &foreign, Now: t0}}, {"release sweep 60001", Result{}}, {"answer ok", Result{}}}},
		{"an id held for a volume whose record is gone is released, and logged", freeID, []step{
			{"core.ReleaseOrphanID", Result{Yes: true}}, {"log id released", Result{}}, {"answer ok", Result{}}}},
		{"an id its volume's record keeps stays held", freeID, []step{
			{"core.ReleaseOrphanID", Result{}}, {"answer ok", Result{}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drive(t, func(s *script) stepper {
				cfg := cfg
				cfg.Named, cfg.Logger = s.named, s.logger()
				return tc.start(cfg)
			}, describeCreate, tc.steps)
		})
	}
}
