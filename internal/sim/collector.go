package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/orphans"
)

// The orphan collector (pkg/orphans), run on every live record once every
// claim is deleted: what it cleans is no leak. Its Kubernetes is the
// simulated one: PersistentVolumes name the answered volumes whose
// DeleteVolume did not succeed yet, claims exist while their provisioner
// runs.
type kube struct {
	s *Sim
	c *cluster
}

func (k *kube) VolumeHandles(ctx context.Context, _ string) ([]string, error) {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	var hs []string
	for _, an := range k.s.answers {
		if an.inst.cluster == k.c && !k.s.deletedIDs[an.volID] {
			hs = append(hs, an.volID)
		}
	}
	return hs, nil
}

func (k *kube) ClaimUID(ctx context.Context, namespace, name string) (string, error) {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	for _, a := range k.s.actors {
		if a.kind == "prov" && a.c == k.c && claimOf(a.pv) == name && !a.claimGone {
			return "uid-" + name, nil
		}
	}
	return "", nil
}

func claimOf(pv string) string { return "claim-" + pv }

// collectRounds runs the collector on the record of slot's controller
// until it holds no volume (or rounds run out: what is left is reported by
// final); each round through the controller then in the slot (a killed one
// is replaced), while it keeps that record. A real collector runs for the
// controller's life: here at least minRounds, and two once faults have
// stopped (at most maxRounds), so that what is left is what the
// collector cannot collect, not what faults kept it from.
const minRounds, maxRounds = 6, 30

func (s *Sim) collectRounds(a *actor, c *cluster, slot int, st *store) {
	defer s.finish(a)
	var (
		col *orphans.Collector
		on  *instance
	)
	quietRounds := 0
	for round := 0; round < maxRounds && (round < minRounds || quietRounds < 2); round++ {
		s.mu.Lock()
		during := s.cfg.During && s.provisioning()
		if during {
			round = 0 // the rounds that count start once the provisioners end
		}
		s.mu.Unlock()
		if !s.step(a.tag(), fmt.Sprintf("collect round %d on %s", round, st.name)) {
			return
		}
		s.mu.Lock()
		inst := c.slots[slot]
		s.mu.Unlock()
		if on != inst {
			// A collector of the controller now in the slot (its first
			// round only notes what it sees).
			var err error
			oc := orphans.Config{Driver: "efs.csi.aws.com", Interval: time.Second, Grace: 0,
				Cluster: &kube{s: s, c: c}, Journal: inst.svc.Journal(), Collector: inst.svc}
			// The cluster's one record (the driver's Leases): what it
			// does not name is swept.
			oc.Sweep = inst.svc.SweepUnrecorded
			oc.Purge = inst.svc.PurgeTrash
			// The StorageClasses' file systems: the class's, each.
			oc.FileSystems = func(context.Context) ([]string, error) { return s.fsIDs(), nil }
			col, err = orphans.New(oc)
			if err != nil {
				panic(err)
			}
			on = inst
		}
		a.calls++
		ctx, cancel := context.WithTimeout(withTag(context.Background(), &callTag{actor: a.name, call: a.calls}), time.Minute)
		n, err := col.Round(ctx)
		cancel()
		s.mu.Lock()
		s.atracef(a, "%s collected %d on %s (%v)", a.name, n, inst.name, err)
		// Counted before the loop's condition reads it: a round that
		// collected may have left what the next two finish (a record
		// whose access point it deleted, seen again as an orphan, then
		// released), even past minRounds (seed 40144083 of -sim.fs=3: the
		// sixth round deleted an access point, and no round finished its
		// record). Quiet once faults have stopped and the listing outage
		// is over too (Config.Down): a fault the collector waits out, as a
		// real one does.
		switch {
		case n > 0:
			quietRounds = 0
		case s.quiet && !during && !s.outage():
			quietRounds++
		}
		s.mu.Unlock()
		// The collector's interval, as far as it matters here: an orphan
		// it marked last round (markOrphan) is listed once the
		// controller's --listing-lag has passed.
		if d := max(s.cfg.Lag, s.cfg.ListingLag); d > 0 {
			time.Sleep(d)
		}
		if during {
			time.Sleep(time.Second) // the collector's --interval, beside the provisioners
		}
		s.mu.Lock()
		out := s.outage()
		s.mu.Unlock()
		if out {
			time.Sleep(5 * time.Second) // its interval, while a listing outage lasts
		}
	}
}

// provisioning: an actor other than a collector still runs (s.mu held).
func (s *Sim) provisioning() bool {
	for _, a := range s.actors {
		if a.kind != "gc" && !a.over {
			return true
		}
	}
	return false
}
