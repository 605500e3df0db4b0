// Package rootpath finds what reaches an access point's root directory: the
// holders (listed access points, recorded volumes, this process's creates)
// whose root directory is nested with a given one (the same, above it or
// below it, by whole components: /a/b and /a/bc are unrelated, and "/"
// contains every directory).
//
// It is a package of its own, not part of pkg/controller or of its core
// (pkg/controller/core), because two memories use it, for one thing each:
// the core's file system memory (core.FS) keeps this process's creates
// in an Index, which changes as creates come and go; root removal's views
// (pkg/controller, rootindex.go) build a Sorted of a listing and the
// record, fixed once read. Neither owns the geometry of paths the other
// relies on.
package rootpath

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// Holder is something that reaches a root directory: a listed access
// point, a recorded volume, or a create of this process.
type Holder struct {
	APID  string // its access point; "" for a create whose access point is not known yet
	Token string // its client token; "" for a listed access point (its ID tells it apart)
	Name  string // its volume name, for the log ("" for a listed access point)
	Path  string
	Kind  Kind
	Live  bool // a listed access point being deleted gives its users no access any more
}

// Kind is what a Holder is.
type Kind int

const (
	Listed Kind = iota
	Recorded
	Creating
)

func (h Holder) String() string {
	switch h.Kind {
	case Recorded:
		return fmt.Sprintf("the recorded volume %q at %s", h.Name, h.Path)
	case Creating:
		return fmt.Sprintf("volume %q at %s, just created by this process", h.Name, h.Path)
	}
	return fmt.Sprintf("access point %s at %s", h.APID, h.Path)
}

// Index finds the holders whose root directory is nested with a given one
// with a lookup per component, not a comparison per holder: a file system
// has up to 10,000 access points, and every delete asks. It changes as
// holders come and go (this process's creates); a view's holders, fixed
// once read, are a Sorted. at holds each holder under its own directory,
// below under each directory strictly above it. Its zero value is not
// ready: NewIndex.
type Index struct {
	at    map[string]map[string]Holder
	below map[string]map[string]Holder
}

// NewIndex is an empty Index.
func NewIndex() *Index {
	return &Index{at: map[string]map[string]Holder{}, below: map[string]map[string]Holder{}}
}

// Clean is a root directory as the indexes compare it: "/" for none.
func Clean(p string) string { return path.Clean("/" + p) }

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

// Add indexes h under key, at its root directory.
func (x *Index) Add(key string, h Holder) {
	p := Clean(h.Path)
	put(x.at, p, key, h)
	above(p, func(a string) { put(x.below, a, key, h) })
}

// Remove drops key's holder, which Add indexed at root.
func (x *Index) Remove(key, root string) {
	p := Clean(root)
	drop(x.at, p, key)
	above(p, func(a string) { drop(x.below, a, key) })
}

func put(m map[string]map[string]Holder, p, key string, h Holder) {
	if m[p] == nil {
		m[p] = map[string]Holder{}
	}
	m[p][key] = h
}

func drop(m map[string]map[string]Holder, p, key string) {
	if delete(m[p], key); len(m[p]) == 0 {
		delete(m, p)
	}
}

// Nested is every holder nested with root: those at it, below it, then
// above it.
func (x *Index) Nested(root string) []Holder {
	p := Clean(root)
	groups := []map[string]Holder{x.at[p], x.below[p]}
	above(p, func(a string) { groups = append(groups, x.at[a]) })
	var nested []Holder
	for _, g := range groups {
		for _, h := range g {
			nested = append(nested, h)
		}
	}
	return nested
}

// Sorted is an Index built once, for a view: its holders sorted by root
// directory, so that those at a directory and those below it are each a
// run that a binary search finds. Building it sorts; the maps of an Index
// took 50 ms (and their garbage) for 20,000 holders, and a view is built
// for every batch of deletes.
type Sorted []Holder

// NewSorted sorts hs (cleaning their paths) into a Sorted.
func NewSorted(hs []Holder) Sorted {
	for i := range hs {
		hs[i].Path = Clean(hs[i].Path)
	}
	slices.SortFunc(hs, func(a, b Holder) int { return strings.Compare(a.Path, b.Path) })
	return hs
}

// Find returns a holder nested with root for which counts is true (those
// at it first, then below it, then above it, as Index.Nested lists them).
func (x Sorted) Find(root string, counts func(Holder) bool) (Holder, bool) {
	p := Clean(root)
	if h, ok := x.at(p, counts); ok {
		return h, true
	}
	if h, ok := x.under(p, counts); ok {
		return h, true
	}
	var found Holder
	ok := false
	above(p, func(a string) {
		if !ok {
			found, ok = x.at(a, counts)
		}
	})
	return found, ok
}

// at looks through the holders whose root is dir.
func (x Sorted) at(dir string, counts func(Holder) bool) (Holder, bool) {
	for i := x.first(dir); i < len(x) && x[i].Path == dir; i++ {
		if counts(x[i]) {
			return x[i], true
		}
	}
	return Holder{}, false
}

// under looks through the holders whose root is strictly below dir.
func (x Sorted) under(dir string, counts func(Holder) bool) (Holder, bool) {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for i := x.first(prefix); i < len(x) && strings.HasPrefix(x[i].Path, prefix); i++ {
		if x[i].Path != dir && counts(x[i]) {
			return x[i], true
		}
	}
	return Holder{}, false
}

// first is the index of the first holder whose root sorts at or after p.
func (x Sorted) first(p string) int {
	i, _ := slices.BinarySearchFunc(x, p, func(h Holder, p string) int { return strings.Compare(h.Path, p) })
	return i
}
