package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Results of an applied action.
const (
	ResultDone    = "done"
	ResultSkipped = "skipped"
	ResultFailed  = "failed"
)

// Plan is the exact, minimal plan of --fix: every provable leak found
// (an access point to delete, or a record whose access point is gone to
// release), nothing else. It is also the report's.
func (a *Audit) Plan() *Plan {
	slices.SortFunc(a.leaks, func(x, y planned) int {
		return cmp.Or(cmp.Compare(x.action.FileSystem, y.action.FileSystem), cmp.Compare(x.action.Kind, y.action.Kind),
			cmp.Compare(x.action.AccessPoint, y.action.AccessPoint), cmp.Compare(x.action.Token, y.action.Token))
	})
	p := &Plan{Actions: []Action{}}
	for _, l := range a.leaks {
		p.Actions = append(p.Actions, l.action)
	}
	switch c := a.rep.Cluster; {
	case c.JournalError != "":
		p.Note = "the record could not be read (" + c.JournalError + "): nothing is provably this cluster's, nothing is planned"
	case len(p.Actions) == 0 && !c.Collector.Watching:
		p.Note = "nothing is provably leaked; an access point whose record names it is a leak only if no PV ever named it, which needs an orphan collector watching PVs since before it was created: " + c.Collector.Why
	case len(p.Actions) == 0:
		p.Note = "nothing is provably leaked"
	}
	a.rep.Plan = p
	return p
}

// Fix applies the plan: first the PVs and every action's claim are read
// again (a PV or claim that appeared since the audit keeps its volume),
// then each action goes through the controller's CollectOrphan, which
// reads the record again under the volume's locks and deletes through
// DeleteVolume (another cluster's access point, one on another file
// system, a record changed since: nothing is deleted). The root
// directories of deleted access points are kept: the audit mounts
// nothing. It returns an error when an action failed.
func (a *Audit) Fix(ctx context.Context) error {
	p := a.rep.Plan
	if p == nil {
		p = a.Plan()
	}
	p.Applied = true
	defer a.finish() // the requests and the time, the fix's included
	if len(p.Actions) == 0 {
		return nil
	}
	a.clients.mu.Lock()
	a.clients.journal, a.clients.cluster = a.src.Journal, a.rep.Cluster.ID
	a.clients.mu.Unlock()
	named := map[string]bool{} // fs/ap of every PV now
	if err := a.src.Kube.PersistentVolumes(ctx, a.cfg.Driver, func(page []kube.PersistentVolume) error {
		for _, pv := range page {
			if id, err := volume.ParseID(pv.Handle); err == nil && id.AccessPointID != "" {
				named[id.FileSystemID+"/"+id.AccessPointID] = true
			}
		}
		return nil
	}); err != nil {
		for i := range p.Actions {
			p.Actions[i].Result, p.Actions[i].Error = ResultSkipped, "PVs not read again: "+err.Error()
		}
		return err
	}
	var errs []error
	for i := range a.leaks {
		l, act := &a.leaks[i], &p.Actions[i]
		why, err := a.apply(ctx, l, named)
		act.Result, act.Error = why, ""
		if err != nil {
			act.Error = err.Error()
			if why == ResultFailed {
				errs = append(errs, fmt.Errorf("%s %s: %w", act.Kind, cmp.Or(act.AccessPoint, act.Token), err))
			}
		}
	}
	return errors.Join(errs...)
}

// apply acts on one leak: ResultDone, or ResultSkipped or ResultFailed
// with why.
func (a *Audit) apply(ctx context.Context, l *planned, named map[string]bool) (string, error) {
	rec := l.rec
	if rec.AccessPoint != "" && named[rec.FileSystem+"/"+rec.AccessPoint] || l.action.AccessPoint != "" && named[rec.FileSystem+"/"+l.action.AccessPoint] {
		return ResultSkipped, errors.New("a PersistentVolume names it now")
	}
	uid, err := a.src.Kube.ClaimUID(ctx, rec.ClaimNamespace, rec.ClaimName)
	if err != nil {
		return ResultSkipped, fmt.Errorf("claim not read again: %w", err)
	}
	if uid != "" {
		return ResultSkipped, fmt.Errorf("claim %s/%s exists now", rec.ClaimNamespace, rec.ClaimName)
	}
	svc, err := a.clients.service(ctx, l.key)
	if err != nil {
		return ResultFailed, err
	}
	if l.action.Kind == ActionReleaseRecord && rec.AccessPoint != "" {
		// Only the record is to go: an access point that shows up after
		// all (EFS lists with a lag) is not proven never bound.
		lister, err := a.clients.lister(ctx, backendKey{api: apiOf(rec), role: l.key.role})
		if err != nil {
			return ResultFailed, err
		}
		switch _, err := lister.DescribeAccessPoint(ctx, rec.AccessPoint); {
		case err == nil:
			return ResultSkipped, fmt.Errorf("access point %s exists after all", rec.AccessPoint)
		case !errors.Is(err, efs.ErrAccessPointNotFound):
			return ResultFailed, err
		}
	}
	err = svc.CollectOrphan(ctx, rec)
	switch {
	case err == nil:
		return ResultDone, nil
	case errors.Is(err, keylock.ErrBusy), errors.Is(err, controller.ErrNotOrphan), errors.Is(err, controller.ErrNotCollectable), errors.Is(err, controller.ErrForeign):
		return ResultSkipped, err
	}
	return ResultFailed, err
}
