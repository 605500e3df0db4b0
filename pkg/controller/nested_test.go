package controller

import "testing"

// The index finds a root directory nested with another (the same, above
// or below it) by whole components, whichever of the two it holds.
func TestNestedComparesWholeComponents(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"/data", "/data", true},
		{"/a", "/a/b", true},
		{"/a/b/c", "/a", true},
		{"/", "/a/b", true},
		{"", "/a", true}, // no root directory set: the file system root
		{"/a/", "/a/b", true},
		{"/a/b", "/a/bc", false},
		{"/a/bc", "/a/b", false},
		{"/ab", "/a", false},
		{"/a/b", "/a/c", false},
	} {
		for _, pair := range [][2]string{{tc.a, tc.b}, {tc.b, tc.a}} {
			x := newPathIndex()
			x.add("k", holder{path: pair[0]})
			if _, got := x.find(pair[1], func(holder) bool { return true }); got != tc.want {
				t.Errorf("pathIndex holding %q, find(%q) = %v, want %v", pair[0], pair[1], got, tc.want)
			}
			x.remove("k", pair[0])
			if len(x.at) != 0 || len(x.below) != 0 {
				t.Errorf("pathIndex holding %q: removed, but the index keeps %v, %v", pair[0], x.at, x.below)
			}
			// Among others that reach neither, in sorted order around it.
			sorted := newSortedRoots([]holder{{path: "/a!"}, {path: pair[0], name: "k"}, {path: "/a-"}, {path: "/0"}, {path: "/z/y"}})
			_, got := sorted.find(pair[1], func(h holder) bool { return h.name == "k" })
			if got != tc.want {
				t.Errorf("sortedRoots holding %q, find(%q) = %v, want %v", pair[0], pair[1], got, tc.want)
			}
		}
	}
}
