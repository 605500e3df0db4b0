package controller

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/statedir"
)

// sightings keeps, across restarts, when this host's controller first saw an
// access point whose creator cannot be named (no tag at all: enableTagging
// "false"). The verifier answers such an access point only once it has been
// known for settleAfter (verify.go): its creator yields, if ever, within
// yieldDeadline of creating it, and every sighting comes after the creation,
// so the earliest sighting of any process serves as well as this process's
// own. Without it, a controller restarted more often than settleAfter never
// answers a volume an earlier process made.
//
// One file per access point (seen-<id>: nanoseconds, token and path, so a
// file left for another access point that had the same ID is not believed),
// beside the controller's temporary mount points (pkg/statedir). A sighting
// older than sightingMaxAge is not believed either (the clock then starts
// again: a longer wait, never a shorter one).
type sightings struct {
	dir *statedir.Dir
}

const sightingMaxAge = time.Hour

var sightingIDRe = regexp.MustCompile(`^fsap-[0-9a-f]{8,40}$`)

func openSightings(dir string) *sightings { return &sightings{dir: statedir.New(dir)} }

// first returns when ap was first seen: a stored sighting of the same access
// point no later than now and younger than sightingMaxAge, else now (stored).
func (s *sightings) first(ap *efs.AccessPoint, now time.Time) time.Time {
	if !sightingIDRe.MatchString(ap.ID) {
		return now
	}
	name := "seen-" + ap.ID
	if data, ok := s.dir.Read(name); ok {
		f := strings.SplitN(string(data), "\n", 3)
		if len(f) == 3 && f[1] == ap.ClientToken && f[2] == ap.Path {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				if t := time.Unix(0, ns); !t.After(now) && now.Sub(t) < sightingMaxAge {
					return t
				}
			}
		}
	}
	_ = s.dir.Write(name, fmt.Appendf(nil, "%d\n%s\n%s", now.UnixNano(), ap.ClientToken, ap.Path))
	return now
}

// forget drops the sighting of a deleted access point.
func (s *sightings) forget(apID string) {
	if sightingIDRe.MatchString(apID) {
		s.dir.Remove("seen-" + apID)
	}
}
