package controller

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// holder is something that reaches a root directory: a listed access
// point, a recorded volume, or a create of this process.
type holder struct {
	apID  string // its access point; "" for a create whose access point is not known yet
	token string // its client token; "" for a listed access point (its ID tells it apart)
	name  string // its volume name, for the log ("" for a listed access point)
	path  string
	kind  holderKind
	live  bool // a listed access point being deleted gives its users no access any more
}

type holderKind int

const (
	listedHolder holderKind = iota
	recordedHolder
	creatingHolder
)

func (h holder) String() string {
	switch h.kind {
	case recordedHolder:
		return fmt.Sprintf("the recorded volume %q at %s", h.name, h.path)
	case creatingHolder:
		return fmt.Sprintf("volume %q at %s, just created by this process", h.name, h.path)
	}
	return fmt.Sprintf("access point %s at %s", h.apID, h.path)
}

// pathIndex finds the holders whose root directory is nested with a given
// one (the same, above it or below it, whole components: /a/b and /a/bc are
// unrelated, and "/" contains every directory) with a lookup per
// component, not a comparison per holder: a file system has up to 10,000
// access points, and every delete asks. It changes as holders come and go
// (this process's creates); a view's holders, fixed once read, are a
// sortedRoots. at holds each holder under its own directory, below under
// each directory strictly above it.
type pathIndex struct {
	at    map[string]map[string]holder
	below map[string]map[string]holder
}

func newPathIndex() *pathIndex {
	return &pathIndex{at: map[string]map[string]holder{}, below: map[string]map[string]holder{}}
}

// cleanRoot is a root directory as the indexes compare it: "/" for none.
func cleanRoot(p string) string { return path.Clean("/" + p) }

// above calls fn with every directory strictly above p ("/" first).
func above(p string, fn func(string)) {
	if p == "/" {
		return
	}
	fn("/")
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			fn(p[:i])
		}
	}
}

func (x *pathIndex) add(key string, h holder) {
	p := cleanRoot(h.path)
	put(x.at, p, key, h)
	above(p, func(a string) { put(x.below, a, key, h) })
}

func (x *pathIndex) remove(key, root string) {
	p := cleanRoot(root)
	drop(x.at, p, key)
	above(p, func(a string) { drop(x.below, a, key) })
}

func put(m map[string]map[string]holder, p, key string, h holder) {
	if m[p] == nil {
		m[p] = map[string]holder{}
	}
	m[p][key] = h
}

func drop(m map[string]map[string]holder, p, key string) {
	if delete(m[p], key); len(m[p]) == 0 {
		delete(m, p)
	}
}

// find returns a holder nested with root for which counts is true.
func (x *pathIndex) find(root string, counts func(holder) bool) (holder, bool) {
	p := cleanRoot(root)
	groups := []map[string]holder{x.at[p], x.below[p]}
	above(p, func(a string) { groups = append(groups, x.at[a]) })
	for _, g := range groups {
		for _, h := range g {
			if counts(h) {
				return h, true
			}
		}
	}
	return holder{}, false
}

// sortedRoots is a pathIndex built once, for a view: its holders sorted by
// root directory, so that those at a directory and those below it are each
// a run that a binary search finds. Building it sorts; the maps of a
// pathIndex took 50 ms (and their garbage) for 20,000 holders, and a view
// is built for every batch of deletes.
type sortedRoots []holder

func newSortedRoots(hs []holder) sortedRoots {
	for i := range hs {
		hs[i].path = cleanRoot(hs[i].path)
	}
	slices.SortFunc(hs, func(a, b holder) int { return strings.Compare(a.path, b.path) })
	return hs
}

// find is pathIndex.find.
func (x sortedRoots) find(root string, counts func(holder) bool) (holder, bool) {
	p := cleanRoot(root)
	if h, ok := x.at(p, counts); ok {
		return h, true
	}
	if h, ok := x.under(p, counts); ok {
		return h, true
	}
	var found holder
	ok := false
	above(p, func(a string) {
		if !ok {
			found, ok = x.at(a, counts)
		}
	})
	return found, ok
}

// at looks through the holders whose root is dir.
func (x sortedRoots) at(dir string, counts func(holder) bool) (holder, bool) {
	for i := x.first(dir); i < len(x) && x[i].path == dir; i++ {
		if counts(x[i]) {
			return x[i], true
		}
	}
	return holder{}, false
}

// under looks through the holders whose root is strictly below dir.
func (x sortedRoots) under(dir string, counts func(holder) bool) (holder, bool) {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for i := x.first(prefix); i < len(x) && strings.HasPrefix(x[i].path, prefix); i++ {
		if x[i].path != dir && counts(x[i]) {
			return x[i], true
		}
	}
	return holder{}, false
}

// first is the index of the first holder whose root sorts at or after p.
func (x sortedRoots) first(p string) int {
	i, _ := slices.BinarySearchFunc(x, p, func(h holder, p string) int { return strings.Compare(h.path, p) })
	return i
}

// rootView is what root removal checks a directory against: a listing of the
// file system that started after the delete asked, and the record's volumes
// read after that listing (the creates of this cluster that the listing may
// not show yet: a record is written before its CreateAccessPoint). It is
// built once for every delete waiting when its listing starts and shared
// by them; none modifies it.
type rootView struct {
	began time.Time // when its listing began
	byID  map[string]*efs.AccessPoint
	index sortedRoots
}

// newView lists fsID through client, then reads the record, and indexes
// both by root directory.
func newView(ctx context.Context, client EFS, j *journal.Journal, fsID string, began time.Time) (*rootView, error) {
	aps, err := efs.Collect(ctx, client.ListAccessPoints, fsID)
	if err != nil {
		return nil, err
	}
	v := &rootView{began: began, byID: make(map[string]*efs.AccessPoint, len(aps))}
	hs := make([]holder, 0, 2*len(aps))
	for i := range aps {
		ap := &aps[i]
		v.byID[ap.ID] = ap
		hs = append(hs, holder{apID: ap.ID, path: ap.Path, kind: listedHolder, live: core.Live(ap)})
	}
	err = j.Volumes(ctx, fsID, func(recs []*journal.Record) error {
		for _, r := range recs {
			hs = append(hs, holder{apID: r.AccessPoint, token: r.Token, name: r.Name, path: r.Path, kind: recordedHolder, live: true})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	v.index = newSortedRoots(hs)
	return v, nil
}

// accessPoint is the listed access point apID (a copy), or nil.
func (v *rootView) accessPoint(apID string) *efs.AccessPoint {
	ap, ok := v.byID[apID]
	if !ok {
		return nil
	}
	c := *ap
	return &c
}
