package controller

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
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
// written atomically beside the controller's temporary mount points. A
// sighting older than sightingMaxAge is not believed either (the clock then
// starts again: a longer wait, never a shorter one).
type sightings struct {
	dir  string // "": none kept
	mu   sync.Mutex
	root *os.Root // opened at the first sighting: nothing is made before one
	seq  atomic.Uint64
}

const sightingMaxAge = time.Hour

var sightingIDRe = regexp.MustCompile(`^fsap-[0-9a-f]{8,40}$`)

func openSightings(dir string) *sightings { return &sightings{dir: dir} }

// open returns the directory's root, made if create; nil if none.
func (s *sightings) open(create bool) *os.Root {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != nil || s.dir == "" {
		return s.root
	}
	if create && os.MkdirAll(s.dir, 0o700) != nil {
		return nil
	}
	if root, err := os.OpenRoot(s.dir); err == nil {
		s.root = root
	}
	return s.root
}

// first returns when ap was first seen: a stored sighting of the same access
// point no later than now and younger than sightingMaxAge, else now (stored).
func (s *sightings) first(ap *efs.AccessPoint, now time.Time) time.Time {
	if !sightingIDRe.MatchString(ap.ID) {
		return now
	}
	root := s.open(true)
	if root == nil {
		return now
	}
	name := "seen-" + ap.ID
	if data, err := root.ReadFile(name); err == nil {
		f := strings.SplitN(string(data), "\n", 3)
		if len(f) == 3 && f[1] == ap.ClientToken && f[2] == ap.Path {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				if t := time.Unix(0, ns); !t.After(now) && now.Sub(t) < sightingMaxAge {
					return t
				}
			}
		}
	}
	tmp := fmt.Sprintf(".seen-%d-%d", os.Getpid(), s.seq.Add(1))
	if root.WriteFile(tmp, fmt.Appendf(nil, "%d\n%s\n%s", now.UnixNano(), ap.ClientToken, ap.Path), 0o600) == nil {
		if root.Rename(tmp, name) != nil {
			_ = root.Remove(tmp)
		}
	}
	return now
}

// forget drops the sighting of a deleted access point.
func (s *sightings) forget(apID string) {
	if !sightingIDRe.MatchString(apID) {
		return
	}
	if root := s.open(false); root != nil {
		_ = root.Remove("seen-" + apID)
	}
}
