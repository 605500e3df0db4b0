package core

import "time"

// finishedDeletes are the volumes whose DeleteVolume this process finished:
// their access point deleted (or proven gone) and their record removed. A
// repeat of such a delete (a provisioner retry of a call cut short, a
// duplicate caller) is answered from here without a request, as a repeated
// create is from the answers: it would otherwise send a Describe, a
// DescribeFileSystems and sometimes a DeleteAccessPoint that answers 404,
// spending the budget the real deletes need.
//
// An access point EFS deleted never comes back, but its volume ID might be
// answered again: only by a CreateVolume of the same name (its client
// token), adopting what EFS names for the token. So a create drops the
// memory of its name under its name locks, which every delete remembered
// here held when it was recorded (add runs under them): a delete after that
// create goes the whole way. Answering needs no lock: an answer read before
// the create dropped it is one the delete could have given before the create
// began.
//
// Bounded in time (finishedFresh) and size (maxFinished, the oldest go
// first): a repeat that finds nothing costs what it did before.
//
// One per file system, in its FS, keyed by access point ID. Not for directory volumes: every life of one has the same ID
// (core's deleteDir).
type finishedDeletes struct {
	byKey  map[string]finished
	byName map[string]map[string]bool // name lock -> keys remembered under it
	order  []finishedAt               // in the order added, for the bounds
}

type finished struct {
	at    time.Time
	names []string // the name locks the delete held
}

type finishedAt struct {
	key string
	at  time.Time
}

// finishedFresh is how long a finished delete is remembered: as long as
// the provisioner backs off a failed call (5 minutes), so that the retry of
// a delete cut short by its timeout, which finished here meanwhile, finds it.
const finishedFresh = 5 * time.Minute

// maxFinished bounds the memory (about 200 bytes each): more deletes than
// that within finishedFresh drop the oldest.
const maxFinished = 16384

func newFinishedDeletes() *finishedDeletes {
	return &finishedDeletes{byKey: map[string]finished{}, byName: map[string]map[string]bool{}}
}

// add remembers that key's delete finished at now; names are the name locks
// the delete holds while it calls add.
func (f *finishedDeletes) add(key string, names []string, now time.Time) {
	f.dropLocked(key)
	f.byKey[key] = finished{at: now, names: names}
	for _, n := range names {
		if f.byName[n] == nil {
			f.byName[n] = map[string]bool{}
		}
		f.byName[n][key] = true
	}
	f.order = append(f.order, finishedAt{key, now})
	f.pruneLocked(now)
}

// done reports whether key's delete finished within finishedFresh.
func (f *finishedDeletes) done(key string, now time.Time) bool {
	e, ok := f.byKey[key]
	return ok && now.Sub(e.at) < finishedFresh
}

// dropNames forgets every finished delete remembered under one of names:
// a create of the volume is under way (called under its name locks).
func (f *finishedDeletes) dropNames(names []string) {
	for _, n := range names {
		for key := range f.byName[n] {
			f.dropLocked(key)
		}
	}
}

// drop forgets key: a create answered its volume ID.
func (f *finishedDeletes) drop(key string) {
	f.dropLocked(key)
}

func (f *finishedDeletes) dropLocked(key string) {
	e, ok := f.byKey[key]
	if !ok {
		return
	}
	delete(f.byKey, key)
	for _, n := range e.names {
		if delete(f.byName[n], key); len(f.byName[n]) == 0 {
			delete(f.byName, n)
		}
	}
}

// pruneLocked drops, oldest first, what is older than finishedFresh or over
// maxFinished. An order entry whose key was dropped or added again since
// is skipped; the order never holds more than twice maxFinished entries.
func (f *finishedDeletes) pruneLocked(now time.Time) {
	for len(f.order) > 0 {
		head := f.order[0]
		if now.Sub(head.at) < finishedFresh && len(f.byKey) <= maxFinished && len(f.order) <= 2*maxFinished {
			return
		}
		if e, ok := f.byKey[head.key]; ok && e.at.Equal(head.at) {
			f.dropLocked(head.key)
		}
		f.order = f.order[1:]
	}
}

// len is how many finished deletes are remembered (tests).
func (f *finishedDeletes) len() int {
	return len(f.byKey)
}
