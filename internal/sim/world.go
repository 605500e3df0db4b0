package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/journal/journaltest"
)

// The simulated world: EFS and the record stores. Every mutation happens in
// an op's exec, which the scheduler runs while every other goroutine of the
// bubble is blocked, so the world needs no lock of its own (the scheduler's
// lock guards the parked set only).

// simAP is one access point and what the simulator knows of it.
type simAP struct {
	ap efs.AccessPoint
	// listAt and describeAt are when ListAccessPoints and
	// DescribeAccessPoint first show it (EFS's eventual consistency).
	listAt, describeAt time.Time
	maker              string // instance name ("c0.1"), "upstream" or "hand"
	driver             bool   // made by this driver (through a controller)
	// Of one a controller made: the CSI call that made it and its
	// process, and whether a DeleteAccessPoint of it was ever sent.
	call     *callTag
	inst     *instance
	delTried bool
	// lost: its CreateAccessPoint's answer was lost, so its maker never
	// learned its ID and cannot delete it (checkNamed).
	lost bool
}

// fileSystem is one EFS file system.
type fileSystem struct {
	id     string
	aps    map[string]*simAP // by access point ID
	tokens map[string]string // client token -> access point ID, while it exists
	limit  int
	// dirs: directories holding data (root removal), path -> access point
	// whose data it holds ("" for directories nobody wrote to).
	dirs map[string]string
	// trashed: root removal's trash entries (by name, without the purge
	// prefix) and the live holders that reached each when it was moved
	// there, which its purge must not outlive (mounter.go, trashChange).
	trashed map[string][]string
}

// efsWorld is EFS as seen by every controller of every cluster.
type efsWorld struct {
	fss     map[string]*fileSystem
	nextAP  uint64
	lenient bool          // a repeated token with identical parameters answers the access point itself
	lag     time.Duration // the longest listing lag of a new access point (0: none)
	rnd     func(n int) int
	now     func() time.Time
}

func (w *efsWorld) fs(id string) (*fileSystem, error) {
	f, ok := w.fss[id]
	if !ok {
		return nil, fmt.Errorf("sim: %s: %w", id, efs.ErrFileSystemNotFound)
	}
	return f, nil
}

func sameInput(ap *efs.AccessPoint, in efs.CreateAccessPointInput) bool {
	if ap.Path != in.Path || !maps.Equal(ap.Tags, in.Tags) {
		return false
	}
	if (ap.PosixUser == nil) != (in.PosixUser == nil) {
		return false
	}
	if ap.PosixUser != nil && (ap.PosixUser.UID != in.PosixUser.UID || ap.PosixUser.GID != in.PosixUser.GID) {
		return false
	}
	return true
}

func copyAP(a *efs.AccessPoint) *efs.AccessPoint {
	c := *a
	c.Tags = maps.Clone(a.Tags)
	if a.PosixUser != nil {
		u := *a.PosixUser
		c.PosixUser = &u
	}
	if a.CreationInfo != nil {
		ci := *a.CreationInfo
		c.CreationInfo = &ci
	}
	return &c
}

// create applies a CreateAccessPoint.
func (w *efsWorld) create(in efs.CreateAccessPointInput, maker string, driver bool) (*efs.AccessPoint, error) {
	f, err := w.fs(in.FileSystemID)
	if err != nil {
		return nil, err
	}
	if id, ok := f.tokens[in.ClientToken]; ok && in.ClientToken != "" {
		old := f.aps[id]
		if w.lenient && sameInput(&old.ap, in) {
			return copyAP(&old.ap), nil
		}
		return nil, fmt.Errorf("CreateAccessPoint %s: %w", in.ClientToken, &efs.AlreadyExistsError{AccessPointID: id})
	}
	if len(f.aps) >= f.limit {
		return nil, fmt.Errorf("CreateAccessPoint %s: %w", in.ClientToken, efs.ErrLimitExceeded)
	}
	w.nextAP++
	id := fmt.Sprintf("fsap-%017x", w.nextAP)
	now := w.now()
	a := &simAP{ap: efs.AccessPoint{
		ID: id, FileSystemID: f.id, ClientToken: in.ClientToken, Path: in.Path,
		Tags: maps.Clone(in.Tags), LifeCycleState: "available",
	}, listAt: now, describeAt: now, maker: maker, driver: driver}
	if in.PosixUser != nil {
		u := *in.PosixUser
		a.ap.PosixUser = &u
	}
	if in.CreationInfo != nil {
		ci := *in.CreationInfo
		a.ap.CreationInfo = &ci
	}
	if w.lag > 0 {
		// Each access point lags by its own amount: none, or up to lag.
		switch w.rnd(3) {
		case 1:
			a.listAt = now.Add(w.lag / 2)
		case 2:
			a.listAt = now.Add(w.lag)
			a.describeAt = now.Add(w.lag / 4)
		}
	}
	f.aps[id] = a
	if in.ClientToken != "" {
		f.tokens[in.ClientToken] = id
	}
	if _, ok := f.dirs[in.Path]; !ok && f.dirs != nil {
		f.dirs[in.Path] = ""
	}
	return copyAP(&a.ap), nil
}

func (w *efsWorld) find(id string) (*fileSystem, *simAP) {
	for _, f := range w.fss {
		if a, ok := f.aps[id]; ok {
			return f, a
		}
	}
	return nil, nil
}

func (w *efsWorld) delete(id string) error {
	f, a := w.find(id)
	if a == nil {
		return fmt.Errorf("DeleteAccessPoint %s: %w", id, efs.ErrAccessPointNotFound)
	}
	delete(f.aps, id)
	if f.tokens[a.ap.ClientToken] == id {
		delete(f.tokens, a.ap.ClientToken)
	}
	return nil
}

func (w *efsWorld) describe(id string) (*efs.AccessPoint, error) {
	_, a := w.find(id)
	if a == nil || w.now().Before(a.describeAt) {
		return nil, fmt.Errorf("DescribeAccessPoint %s: %w", id, efs.ErrAccessPointNotFound)
	}
	return copyAP(&a.ap), nil
}

func (w *efsWorld) list(fsID string) ([]efs.AccessPoint, error) {
	f, err := w.fs(fsID)
	if err != nil {
		return nil, err
	}
	now := w.now()
	var out []efs.AccessPoint
	for _, id := range slices.Sorted(maps.Keys(f.aps)) {
		a := f.aps[id]
		if now.Before(a.listAt) {
			continue
		}
		out = append(out, *copyAP(&a.ap))
	}
	return out, nil
}

// store is one record store (a cluster's Leases): the
// contract of journal.Store, with listings in key order.
type store struct {
	name string
	m    map[journal.Key]journal.Entry
	seq  uint64
}

func newStore(name string) *store { return &store{name: name, m: map[journal.Key]journal.Entry{}} }

func (s *store) put(e journal.Entry) journal.Entry {
	s.seq++
	e.Version = strconv.FormatUint(s.seq, 10)
	e.Value = bytes.Clone(e.Value)
	s.m[e.Key] = e
	return e
}

func (s *store) get(k journal.Key) (journal.Entry, error) {
	e, ok := s.m[k]
	if !ok {
		return journal.Entry{}, fmt.Errorf("%w: %s", journal.ErrNotFound, k)
	}
	e.Value = bytes.Clone(e.Value)
	return e, nil
}

func (s *store) create(e journal.Entry) (journal.Entry, error) {
	if old, ok := s.m[e.Key]; ok {
		old.Value = bytes.Clone(old.Value)
		return old, fmt.Errorf("%w: %s", journal.ErrExists, e.Key)
	}
	return s.put(e), nil
}

func (s *store) update(e journal.Entry) (journal.Entry, error) {
	old, ok := s.m[e.Key]
	switch {
	case !ok:
		return journal.Entry{}, fmt.Errorf("%w: %s", journal.ErrNotFound, e.Key)
	case old.Version != e.Version:
		old.Value = bytes.Clone(old.Value)
		return old, fmt.Errorf("%w: %s", journal.ErrConflict, e.Key)
	}
	return s.put(e), nil
}

func (s *store) delete(e journal.Entry) error {
	old, ok := s.m[e.Key]
	switch {
	case !ok:
		return nil
	case old.Version != e.Version:
		return fmt.Errorf("%w: %s", journal.ErrConflict, e.Key)
	}
	delete(s.m, e.Key)
	s.seq++
	return nil
}

func keyLess(a, b journal.Key) int {
	if c := strings.Compare(string(a.Kind), string(b.Kind)); c != 0 {
		return c
	}
	if c := strings.Compare(a.FileSystem, b.FileSystem); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

func (s *store) list(kind journal.Kind, fs, index string) []journal.Entry {
	var page []journal.Entry
	for k, e := range s.m {
		if k.Kind == kind && (fs == "" || k.FileSystem == fs) && (index == "" || e.Index == index) {
			e.Value = bytes.Clone(e.Value)
			page = append(page, e)
		}
	}
	slices.SortFunc(page, func(a, b journal.Entry) int { return keyLess(a.Key, b.Key) })
	return page
}

// sorted is every entry in key order (checks, traces).
func (s *store) sorted() []journal.Entry {
	out := slices.Collect(maps.Values(s.m))
	slices.SortFunc(out, func(a, b journal.Entry) int { return keyLess(a.Key, b.Key) })
	return out
}

var errKilled = errors.New("sim: controller killed")

// ports: what each controller instance sees of the world. Every call parks
// as an op until the scheduler releases it.

type efsPort struct {
	s    *Sim
	inst *instance
}

func (p *efsPort) CreateAccessPoint(ctx context.Context, in efs.CreateAccessPointInput) (*efs.AccessPoint, error) {
	gid := int64(-1)
	if in.PosixUser != nil {
		gid = in.PosixUser.GID
	}
	t, _ := ctx.Value(tagKey{}).(*callTag)
	var made *simAP
	v, err := p.s.park(ctx, p.inst, kindEFS, fmt.Sprintf("CreateAccessPoint %s gid=%d", in.ClientToken, gid), func() (any, error) {
		ap, err := p.s.efs.create(in, p.inst.name, true)
		if err == nil {
			_, made = p.s.efs.find(ap.ID)
			made.call, made.inst = t, p.inst
		}
		return ap, err
	})
	if errors.Is(err, errLost) && made != nil {
		p.s.mu.Lock()
		made.lost = true
		p.s.mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	return v.(*efs.AccessPoint), nil
}

func (p *efsPort) DeleteAccessPoint(ctx context.Context, id string) error {
	// Asked for, whatever EFS answers (a fault before it is applied too):
	// one whose delete failed is the collector's (checkNamed).
	p.s.mu.Lock()
	if _, a := p.s.efs.find(id); a != nil {
		a.delTried = true
	}
	p.s.mu.Unlock()
	_, err := p.s.park(ctx, p.inst, kindEFS, "DeleteAccessPoint "+id, func() (any, error) {
		_, a := p.s.efs.find(id)
		if a != nil && !a.driver && !p.s.answeredAP(id) && !p.s.handVolume(id) {
			p.s.violate("foreign: %s deleted %s, made by %s (%s), which no DeleteVolume named", p.inst.name, id, a.maker, a.ap.ClientToken)
		}
		if a != nil && p.s.handVolume(id) {
			p.s.keptRoots[p.inst]++ // its DeleteVolume kept the directory first (checkKeptRoots)
		}
		return nil, p.s.efs.delete(id)
	})
	return err
}

func (p *efsPort) DescribeAccessPoint(ctx context.Context, id string) (*efs.AccessPoint, error) {
	v, err := p.s.park(ctx, p.inst, kindEFSRead, "DescribeAccessPoint "+id, func() (any, error) {
		if f, _ := p.s.efs.find(id); f != nil && p.s.isDown(f.id) {
			return nil, failure(kindEFSRead, errDown)
		}
		return p.s.efs.describe(id)
	})
	if err != nil {
		return nil, err
	}
	return v.(*efs.AccessPoint), nil
}

func (p *efsPort) ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error {
	v, err := p.s.park(ctx, p.inst, kindEFSRead, "ListAccessPoints "+fsID, func() (any, error) {
		if p.s.isDown(fsID) {
			return nil, failure(kindEFSRead, errDown)
		}
		return p.s.efs.list(fsID)
	})
	if err != nil {
		return err
	}
	if aps := v.([]efs.AccessPoint); len(aps) > 0 {
		return fn(aps)
	}
	return nil
}

// storePort is a controller instance's view of its record store. It
// keeps hints (journal.Hinter) as pkg/kube's Lease store does: every entry
// as this instance last saw it answered, however stale since, so the
// simulator searches the schedules where a hint is out of date.
type storePort struct {
	s    *Sim
	inst *instance
	st   *store
	journaltest.Hints
}

// port is inst's store port: one that makes pairs (Config.Pairs), or not.
func (s *Sim) port(inst *instance) journal.Store {
	p := &storePort{s: s, inst: inst, st: inst.st}
	if s.cfg.Pairs {
		return &pairPort{p}
	}
	return p
}

// pairPort is a storePort that makes a record and its id in one write
// (journal.Pairer), as pkg/kube's Lease store does where the two share a
// shard: here every two keys do (Near nil), so a volume's sequence is as
// without pairs.
type pairPort struct{ *storePort }

func (p *pairPort) Near(journal.Key) func(journal.Key) bool { return nil }

func (p *pairPort) CreateBoth(ctx context.Context, a, b journal.Entry) (journal.Entry, journal.Entry, error) {
	v, err := p.s.park(ctx, p.inst, kindStore, "CreateBoth "+a.Key.String()+" "+b.Key.String(), func() (any, error) {
		for _, e := range []journal.Entry{a, b} {
			if _, ok := p.st.m[e.Key]; ok {
				return nil, fmt.Errorf("%w: %s", journal.ErrExists, e.Key)
			}
		}
		return [2]journal.Entry{p.st.put(a), p.st.put(b)}, nil
	})
	if err != nil {
		return journal.Entry{}, journal.Entry{}, err
	}
	got := v.([2]journal.Entry)
	p.Saw(a.Key, &got[0])
	p.Saw(b.Key, &got[1])
	return got[0], got[1], nil
}

func (p *storePort) Get(ctx context.Context, k journal.Key) (journal.Entry, error) {
	v, err := p.s.park(ctx, p.inst, kindStoreRead, "Get "+k.String(), func() (any, error) { return p.st.get(k) })
	e, _ := v.(journal.Entry)
	switch {
	case err == nil:
		p.Saw(k, &e)
	case errors.Is(err, journal.ErrNotFound):
		p.Saw(k, nil)
	}
	return e, err
}

func (p *storePort) Create(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	v, err := p.s.park(ctx, p.inst, kindStore, "Create "+e.Key.String(), func() (any, error) { return p.st.create(e) })
	got, _ := v.(journal.Entry)
	if err == nil || errors.Is(err, journal.ErrExists) {
		p.Saw(e.Key, &got)
	}
	return got, err
}

func (p *storePort) Update(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	v, err := p.s.park(ctx, p.inst, kindStore, "Update "+e.Key.String(), func() (any, error) { return p.st.update(e) })
	got, _ := v.(journal.Entry)
	switch {
	case err == nil:
		p.Saw(e.Key, &got)
	case errors.Is(err, journal.ErrNotFound):
		p.Saw(e.Key, nil)
	}
	return got, err
}

func (p *storePort) Delete(ctx context.Context, e journal.Entry) error {
	_, err := p.s.park(ctx, p.inst, kindStore, "Delete "+e.Key.String(), func() (any, error) { return nil, p.st.delete(e) })
	if err == nil {
		p.Saw(e.Key, nil)
	}
	return err
}

func (p *storePort) List(ctx context.Context, kind journal.Kind, fs, index string, fn func([]journal.Entry) error) error {
	v, err := p.s.park(ctx, p.inst, kindStoreRead, "List "+string(kind)+" "+fs+" "+index, func() (any, error) {
		return p.st.list(kind, fs, index), nil
	})
	if err != nil {
		return err
	}
	if page := v.([]journal.Entry); len(page) > 0 {
		return fn(page)
	}
	return nil
}

// answeredAP: some volume answered names the access point.
func (s *Sim) answeredAP(id string) bool {
	for _, an := range s.answers {
		if an.apID == id {
			return true
		}
	}
	return false
}

// handVolume: a PersistentVolume made by hand names the access point, and
// its DeleteVolume was called (runWriter).
func (s *Sim) handVolume(apID string) bool {
	for _, h := range s.handVolumes {
		if h.apID == apID {
			return true
		}
	}
	return false
}
