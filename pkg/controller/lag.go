package controller

import (
	"sync"
	"time"
)

// EFS lists (and describes) a new access point with a lag: eventually
// consistent, and the emulator's --visibility-delay. Root removal must see
// an access point another writer made on the directory just before the
// delete, so where EFS lags it waits --listing-lag for a listing that shows
// it (delete.go, removeRootDir). Waiting always would cost every delete
// that second, also where EFS lists at once; so the wait applies only while
// EFS is seen lagging: an access point this process created (and was
// answered) before a listing began is missing from it, or a delete's own
// access point, which exists, is missing from its view. Once seen, the wait
// applies for lagMemory.
//
// What this misses: a lag that begins after lagMemory of prompt listings,
// seen by no listing of this process before a delete whose directory
// another writer's fresh access point reaches (docs/design.md, Known
// limits).

// lagMemory is how long one sighting of a lagging listing keeps the wait on.
const lagMemory = 10 * time.Minute

// maxWatched bounds the access points lagWatch follows (the most recent
// creates are enough to see a lag).
const maxWatched = 4096

// lagWatch follows this process's new access points until a listing shows
// them. Safe for concurrent use. Real time throughout: EFS's lag is.
type lagWatch struct {
	mu      sync.Mutex
	made    map[string]madeAP // access point ID -> when its create was answered
	perFS   map[string]int    // file system -> entries in made
	lagging time.Time         // last sighting of a lag
}

type madeAP struct {
	fs string
	at time.Time
}

func newLagWatch() *lagWatch {
	return &lagWatch{made: map[string]madeAP{}, perFS: map[string]int{}}
}

// created notes an access point whose create was just answered.
func (w *lagWatch) created(fsID, apID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.made[apID]; ok || len(w.made) >= maxWatched {
		return
	}
	w.made[apID] = madeAP{fs: fsID, at: time.Now()}
	w.perFS[fsID]++
}

// watching reports whether a listing of fsID can tell anything.
func (w *lagWatch) watching(fsID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.perFS[fsID] > 0
}

// listed takes a complete listing of fsID that began at began, which has
// reports as showing: an access point created before that and not shown
// is a lag; one shown is followed no more.
func (w *lagWatch) listed(fsID string, began time.Time, has func(apID string) bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for id, m := range w.made {
		switch {
		case m.fs != fsID:
		case has(id), now.Sub(m.at) > lagMemory:
			w.forget(id, m)
		case m.at.Before(began):
			w.lagging = now
		}
	}
}

// forget stops following id. Caller holds w.mu.
func (w *lagWatch) forget(id string, m madeAP) {
	delete(w.made, id)
	if w.perFS[m.fs]--; w.perFS[m.fs] <= 0 {
		delete(w.perFS, m.fs)
	}
}

// deleted stops following an access point this process deleted.
func (w *lagWatch) deleted(apID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m, ok := w.made[apID]; ok {
		w.forget(apID, m)
	}
}

// saw notes a lag seen otherwise (an existing access point missing from a
// listing).
func (w *lagWatch) saw() {
	w.mu.Lock()
	w.lagging = time.Now()
	w.mu.Unlock()
}

// recent reports whether EFS was seen lagging within lagMemory.
func (w *lagWatch) recent() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.lagging.IsZero() && time.Since(w.lagging) < lagMemory
}
