package controller

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// SweepUnrecorded deletes the access points of fsID that this cluster's
// creates made for a record and that no record names (docs/leaks.md,
// "Access points no record names"; its steps in docs/design.md), for the
// orphan collector: the holds a killed sweep left first, the ids held for
// volumes whose record is gone, then every access point listed, each by a
// machine of pkg/controller/core (core.NewResumeSweep, core.NewFreeID,
// core.NewSweep), which says what proves one unrecorded. named reports
// whether a PersistentVolume names an access point, from what the caller
// read of them: the machines ask it between effects, so it must not block
// (core.SweepConfig.Named).
//
// Only the controller's own credentials are used, and only with a cluster
// ID and a record that is the cluster's one (Leases: never a file record
// per host, where another host's record may own it). It
// returns how many access points it deleted.
func (s *Service) SweepUnrecorded(ctx context.Context, fsID string, named func(apID string) bool, grace time.Duration) (int, error) {
	if s.cluster == "" {
		return 0, nil // nothing proves an access point this cluster's
	}
	cfg := core.SweepConfig{Cluster: s.cluster, Grace: grace, Named: named, Logger: s.log}
	n := 0
	var errs []error
	sweep := func(m stepper) {
		x := &effects{s: s, ctx: ctx}
		defer x.release()
		a, _ := x.run(m).(core.Answer) // a sweep hands nothing off
		if a.AP != nil {
			n++
		}
		errs = append(errs, a.Err)
	}
	// A killed sweep's holds first: each is an access point it was about
	// to delete, and an id held for nobody until resumed. Then the ids
	// held for volumes whose record is gone.
	holds, orphans, err := s.journal.ToSweep(ctx, fsID)
	if err != nil {
		return 0, err
	}
	// In id order, as the model checker queues them: a round acts the
	// same way each time (the simulator replays a seed exactly).
	for _, id := range slices.Sorted(maps.Keys(holds)) {
		sweep(core.NewResumeSweep(cfg, fsID, id, holds[id]))
	}
	for _, id := range slices.Sorted(maps.Keys(orphans)) {
		sweep(core.NewFreeID(cfg, fsID, id, orphans[id]))
	}
	aps, err := s.listAfterNow(ctx, fsID)
	if err != nil {
		if errors.Is(err, efs.ErrFileSystemNotFound) || errors.Is(err, efs.ErrAccessDenied) {
			return n, nil // not visible with these credentials: nothing to prove
		}
		return n, errors.Join(append(errs, err)...)
	}
	now := s.now()
	for i := range aps {
		sweep(core.NewSweep(cfg, fsID, &aps[i], now))
	}
	return n, errors.Join(errs...)
}
