package controller

// Classes over several file systems (docs/design.md, "Several file
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

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// ErrNoFileSystem: none of a class's file systems can take a new volume
// (each at its access point limit, unreachable, or in another zone).
var ErrNoFileSystem = fmt.Errorf("%w: no file system of the class can take the volume", gid.ErrExhausted)

// place is the file system of params.FileSystemIDs that holds the volume
// named name: the one recorded for it, else the one chosen now and
// recorded (unless another create recorded one first, which wins). The
// choice: of the file systems whose access points could be counted (the
// allocator's view: one listing per file system and minute, shared with
// GID allocation) and, for a class of access points, below
// Config.AccessPointLimit, and, when the request requires zones, a
// Regional one or a One Zone one in such a zone: the one with the fewest
// access points and creates in flight; a tie goes by a hash of the name
// and the file system, so that volumes spread.
func (s *Service) place(ctx context.Context, name string, params volume.Params, req *csi.TopologyRequirement) (string, error) {
	key := volume.NameToken(name)
	fs, err := s.journal.Placement(ctx, key)
	if err == nil {
		return fs, nil
	}
	if !errors.Is(err, journal.ErrNotFound) {
		return "", err
	}
	best, bestN := "", 0
	var skipped []string
	for _, fs := range strings.Split(params.FileSystemIDs, ",") {
		if why := s.zoneMismatch(ctx, fs, req); why != "" {
			skipped = append(skipped, fs+": "+why)
			continue
		}
		n, err := s.gids.Count(ctx, s.gidSource(), fs)
		if err != nil {
			if ctx.Err() != nil {
				return "", err
			}
			skipped = append(skipped, fs+": not reachable: "+err.Error())
			continue
		}
		if limit := s.cfg.AccessPointLimit; limit > 0 && !params.Dir() && n >= limit {
			skipped = append(skipped, fmt.Sprintf("%s: %d access points, at the limit of %d (--access-point-limit)", fs, n, limit))
			continue
		}
		if best == "" || n < bestN || n == bestN && spread(name, fs) < spread(name, best) {
			best, bestN = fs, n
		}
	}
	if best == "" {
		return "", fmt.Errorf("%w %q: %s", ErrNoFileSystem, params.FileSystemIDs, strings.Join(skipped, "; "))
	}
	return s.journal.Place(ctx, key, best)
}

// zoneMismatch says why fs cannot serve a request that requires zones: a
// One Zone file system in none of them; "" when it can (Regional, in one,
// no requirement, or zones not known to this controller).
func (s *Service) zoneMismatch(ctx context.Context, fs string, req *csi.TopologyRequirement) string {
	if s.describer == nil || len(requisiteZones(req.GetRequisite())) == 0 {
		return ""
	}
	zone, err := s.zone(ctx, fs)
	switch {
	case err != nil:
		return "not reachable: " + err.Error()
	case zone != "" && !zoneAllowed(zone, req.GetRequisite()):
		return fmt.Sprintf("One Zone file system in %s, the volume must be in %s", zone, strings.Join(requisiteZones(req.GetRequisite()), ", "))
	}
	return ""
}

// spread orders file systems for one volume name: a hash of both.
func spread(name, fs string) string {
	sum := sha256.Sum256([]byte(name + "\x00" + fs))
	return string(sum[:8])
}
