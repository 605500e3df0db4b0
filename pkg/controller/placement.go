package controller

// Classes over several file systems (docs/placement.md, "Several file
// systems per class"): fileSystemId "fs-a,fs-b". Each volume is placed on
// one, once: the record's place entry (journal.Place, a compare-and-swap
// create keyed by the volume's name token) says which, so that a retry, a
// restart and another controller send every create of the volume to the
// same file system. The volume ID names it, so delete and publish are
// those of any volume.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// ErrNoFileSystem: none of a class's file systems can take a new volume
// (each at its access point limit, unreachable, or in another zone).
var ErrNoFileSystem = fmt.Errorf("%w: no file system of the class can take the volume", gid.ErrExhausted)

// placed plans the volume named name (planOn: every check of the request
// that can refuse the create, on the file system given, placed being the
// place entry's key) on the file system of params.FileSystemIDs that
// holds it: the one recorded for it, else the one chosen now (choose),
// which is recorded only once planOn accepts it, so that a refused create
// leaves no place entry. Another create may record its own choice
// between (journal.Place's compare-and-swap): it wins, and the volume is
// planned on it instead.
//
// What refuses after this (the GID range full, EFS's refusal, a
// record write that failed) keeps the entry: a create of the same name
// by another replica may have read it and be writing its record, or have
// sent its create to EFS, with no lock of this process to tell; removing
// the entry would let a third create place the volume on another file
// system beside that one, two volumes for one name. Finish removes it
// with the volume's record.
func (s *Service) placed(ctx context.Context, name string, params volume.Params, req *csi.TopologyRequirement,
	planOn func(params volume.Params, placed string) (*plan, error)) (*plan, error) {
	key := volume.NameToken(name)
	fs, recorded, err := s.choose(ctx, name, params, req)
	if err != nil {
		return nil, err
	}
	params.FileSystemID = fs
	p, err := planOn(params, key)
	if err != nil || recorded {
		return p, err
	}
	won, err := s.journal.Place(ctx, key, fs)
	if err != nil || won == fs {
		return p, err
	}
	params.FileSystemID = won
	return planOn(params, key)
}

// choose is the file system of params.FileSystemIDs recorded for the
// volume named name (recorded), else the one chosen now. The choice: of
// the file systems whose access points could be counted (the allocator's
// view: one listing per file system and minute, shared with GID
// allocation) and, for a class of access points, below
// Config.AccessPointLimit, and, when the request requires zones, a
// Regional one or a One Zone one in such a zone: the one with the fewest
// access points and creates in flight; a tie goes by a hash of the name
// and the file system, so that volumes spread. A file system that could
// not be listed or described is skipped, and not asked again within
// unreachableSkip.
func (s *Service) choose(ctx context.Context, name string, params volume.Params, req *csi.TopologyRequirement) (fs string, recorded bool, err error) {
	fs, err = s.journal.Placement(ctx, volume.NameToken(name))
	if err == nil {
		return fs, true, nil
	}
	if !errors.Is(err, journal.ErrNotFound) {
		return "", false, err
	}
	best, bestN := "", 0
	var skipped []string
	for _, fs := range strings.Split(params.FileSystemIDs, ",") {
		if why, ok := s.fs(fs).down(s.now()); ok {
			skipped = append(skipped, fs+": "+why)
			continue
		}
		why, err := s.zoneMismatch(ctx, fs, req)
		if why != "" {
			skipped = append(skipped, fs+": "+why)
			continue
		}
		n := 0
		if err == nil {
			n, err = s.gids.Count(ctx, s.gidSource(), fs)
		}
		if err != nil {
			if ctx.Err() != nil {
				return "", false, err
			}
			skipped = append(skipped, fs+": "+s.unreachable(fs, err))
			continue
		}
		s.answered(fs)
		if limit := s.cfg.AccessPointLimit; limit > 0 && !params.Dir() && n >= limit {
			skipped = append(skipped, fmt.Sprintf("%s: %d access points, at the limit of %d (--access-point-limit)", fs, n, limit))
			continue
		}
		if best == "" || n < bestN || n == bestN && spread(name, fs) < spread(name, best) {
			best, bestN = fs, n
		}
	}
	if best == "" {
		return "", false, fmt.Errorf("%w %q: %s", ErrNoFileSystem, params.FileSystemIDs, strings.Join(skipped, "; "))
	}
	return best, false, nil
}

// unreachableSkip is how long placement skips a file system of a class
// whose listing (or Describe) failed, without asking it again. The
// allocator remembers no failed listing, so without it every create of a
// class with unreachable file systems would ask each of them again (a
// class over 100 file systems, 99 of them gone: 101 requests a create).
// Short, since a file system that is back takes no new volume until it
// ends: about the external-provisioner's retries of one create over its
// first backoffs, so a skipped file system costs one request per window,
// not one per create.
const unreachableSkip = 30 * time.Second

// unreachable remembers that fs could not be asked (err) and says so for
// ErrNoFileSystem; it logs when fs starts being skipped.
func (s *Service) unreachable(fs string, err error) string {
	if s.fs(fs).markUnreachable(err.Error(), s.now()) {
		s.log.Warn("file system of a class not reachable: new volumes are not placed on it; it is asked again after a while",
			"fileSystemId", fs, "skippedFor", unreachableSkip, "error", err)
	}
	return fmt.Sprintf("skipped for %s: not reachable: %v", unreachableSkip, err)
}

// answered notes that fs answered; it logs when fs was skipped before.
func (s *Service) answered(fs string) {
	if s.fs(fs).markReachable() {
		s.log.Info("file system of a class reachable again: new volumes may be placed on it", "fileSystemId", fs)
	}
}

// down says why placement skips this file system at now, if it does:
// its listing or Describe failed less than unreachableSkip before.
func (st *fsState) down(now time.Time) (string, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.downAt.IsZero() || now.Sub(st.downAt) >= unreachableSkip {
		return "", false
	}
	return fmt.Sprintf("skipped for %s more: not reachable at %s: %s",
		(unreachableSkip - now.Sub(st.downAt)).Round(time.Second), st.downAt.UTC().Format(time.RFC3339), st.downWhy), true
}

// markUnreachable remembers that a listing or Describe failed at now
// (why); started: the file system was not skipped before.
func (st *fsState) markUnreachable(why string, now time.Time) (started bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	started = st.downAt.IsZero()
	st.downAt, st.downWhy = now, why
	return started
}

// markReachable forgets a failure; was: there was one.
func (st *fsState) markReachable() (was bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	was = !st.downAt.IsZero()
	st.downAt, st.downWhy = time.Time{}, ""
	return was
}

// zoneMismatch says why fs cannot serve a request that requires zones: a
// One Zone file system in none of them; "" when it can (Regional, in one,
// no requirement, or zones not known to this controller). err: fs could
// not be described.
func (s *Service) zoneMismatch(ctx context.Context, fs string, req *csi.TopologyRequirement) (string, error) {
	if s.describer == nil || len(requisiteZones(req.GetRequisite())) == 0 {
		return "", nil
	}
	zone, err := s.zone(ctx, fs)
	switch {
	case err != nil:
		return "", err
	case zone != "" && !zoneAllowed(zone, req.GetRequisite()):
		return fmt.Sprintf("One Zone file system in %s, the volume must be in %s", zone, strings.Join(requisiteZones(req.GetRequisite()), ", ")), nil
	}
	return "", nil
}

// spread orders file systems for one volume name: a hash of both.
func spread(name, fs string) string {
	sum := sha256.Sum256([]byte(name + "\x00" + fs))
	return string(sum[:8])
}
