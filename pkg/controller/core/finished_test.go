package core

import (
	"strconv"
	"testing"
	"time"
)

// The memory of finished deletes is bounded in time and size, and a create
// of a name drops what was remembered under it (and nothing else).
func TestFinishedDeletesBoundsAndDrops(t *testing.T) {
	t0 := time.Now()
	for _, tc := range []struct {
		name   string
		run    func(f *finishedDeletes) time.Time // returns when to ask
		want   map[string]bool                    // key -> done
		maxLen int
	}{
		{"fresh", func(f *finishedDeletes) time.Time {
			f.add("a", []string{"name/a"}, t0)
			return t0.Add(finishedFresh - time.Second)
		}, map[string]bool{"a": true}, 1},
		{"too old", func(f *finishedDeletes) time.Time {
			f.add("a", []string{"name/a"}, t0)
			return t0.Add(finishedFresh)
		}, map[string]bool{"a": false}, 1},
		{"a create of its name drops it", func(f *finishedDeletes) time.Time {
			f.add("a", []string{"name/a", "name/token-a"}, t0)
			f.add("b", []string{"name/b"}, t0)
			f.dropNames([]string{"name/token-a"})
			return t0
		}, map[string]bool{"a": false, "b": true}, 1},
		{"an answered ID drops it", func(f *finishedDeletes) time.Time {
			f.add("a", []string{"name/a"}, t0)
			f.drop("a")
			return t0
		}, map[string]bool{"a": false}, 0},
		{"the oldest go over the size bound", func(f *finishedDeletes) time.Time {
			for i := range maxFinished + 10 {
				f.add(strconv.Itoa(i), []string{"name/" + strconv.Itoa(i)}, t0.Add(time.Duration(i)))
			}
			return t0.Add(time.Second)
		}, map[string]bool{"0": false, "9": false, "10": true, strconv.Itoa(maxFinished + 9): true}, maxFinished},
		{"old entries go as new ones come", func(f *finishedDeletes) time.Time {
			f.add("old", []string{"name/old"}, t0)
			f.add("new", []string{"name/new"}, t0.Add(finishedFresh))
			return t0.Add(finishedFresh)
		}, map[string]bool{"old": false, "new": true}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFinishedDeletes()
			at := tc.run(f)
			for key, want := range tc.want {
				if got := f.done(key, at); got != want {
					t.Errorf("done(%q) = %v, want %v", key, got, want)
				}
			}
			if n := f.len(); n > tc.maxLen {
				t.Errorf("%d remembered, want at most %d", n, tc.maxLen)
			}
			if len(f.order) > 2*maxFinished {
				t.Errorf("%d in order for %d remembered", len(f.order), f.len())
			}
			for name, keys := range f.byName {
				for key := range keys {
					if _, ok := f.byKey[key]; !ok {
						t.Errorf("name %q still names the forgotten %q", name, key)
					}
				}
			}
		})
	}
}
