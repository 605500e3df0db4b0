package core

import (
	"context"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
)

// DoRecord executes e if it is an effect on the record, with j, and says
// whether it was: the one executor of record verbs, which the service
// (pkg/controller's effects), and through it the simulator, and the model
// checker run, each against its own store. What the caller adds is its
// own: the context (the service detaches ReleaseMovedID's from the
// call's) and what it learns from an outcome (the service's memory of a
// Hold that found the id taken).
func DoRecord(ctx context.Context, j *journal.Journal, e Effect) (r Result, ok bool) {
	switch e := e.(type) {
	case ReadRecord:
		read, key := j.Volume, e.Key
		switch {
		case e.AccessPoint != "" && e.Hint:
			read, key = j.ByAccessPointHint, e.AccessPoint
		case e.AccessPoint != "":
			read, key = j.ByAccessPoint, e.AccessPoint
		case e.Hint:
			read = j.VolumeHint
		}
		r.Record, r.Err = read(ctx, e.FileSystem, key)
	case Begin:
		r.Record, r.Yes, r.Held, r.Err = j.BeginHeld(ctx, e.Volume)
	case Hold:
		r.Yes, r.Err = j.Hold(ctx, e.Record)
	case HoldID:
		r.Err = j.HoldID(ctx, e.Record)
	case Touch:
		r.Err = j.Touch(ctx, e.Record)
	case SetIDs:
		set := j.SetIDs
		if e.Move {
			set = j.MoveID
		}
		r.Err = set(ctx, e.Record, e.From, e.UID, e.GID, e.ID, e.ClientToken, e.Probe)
	case ReleaseUnsentID:
		r.Err = j.ReleaseUnsentID(ctx, e.Record, e.ID, e.OnlyMade)
	case ReleaseMovedID:
		r.Err = j.ReleaseMovedID(ctx, e.FileSystem, e.ID, e.Holder)
	case HoldForSweep:
		r.Token, r.Err = j.HoldForSweep(ctx, e.FileSystem, e.ID, e.AccessPoint)
	case ReleaseOrphanID:
		r.Yes, r.Err = j.ReleaseOrphanID(ctx, e.FileSystem, e.ID, e.Holder)
	case ReleaseSweep:
		r.Err = j.ReleaseSweep(ctx, e.FileSystem, e.ID, e.AccessPoint)
	case SetAccessPoint:
		r.Err = j.SetAccessPoint(ctx, e.Record, e.Made, e.Replace)
	case SetClaim:
		r.Err = j.SetClaim(ctx, e.Record, e.Name, e.Namespace)
	case Mark:
		switch {
		case e.IfOrphan != nil:
			r.Record, r.Err = j.MarkDeletingIf(ctx, e.Record, func(cur *journal.Record) bool { return OrphanChange(e.IfOrphan, cur) == "" })
		case e.IfAgrees != nil:
			r.Record, r.Err = j.MarkDeletingFor(ctx, e.Record, e.IfAgrees.ID, func(cur *journal.Record) bool { return ownership.Agrees(cur, e.IfAgrees) })
		default:
			r.Err = j.MarkDeleting(ctx, e.Record)
		}
	case Finish:
		r.Err = j.Finish(ctx, e.Record)
	case SetDirMade:
		r.Err = j.SetDirMade(ctx, e.Record)
	default:
		return r, false
	}
	return r, true
}
