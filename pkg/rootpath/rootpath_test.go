package rootpath

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
			x := NewIndex()
			x.Add("k", Holder{Path: pair[0]})
			if got := len(x.Nested(pair[1])) == 1; got != tc.want {
				t.Errorf("Index holding %q, Nested(%q) = %v, want %v", pair[0], pair[1], x.Nested(pair[1]), tc.want)
			}
			x.Remove("k", pair[0])
			if len(x.at) != 0 || len(x.below) != 0 {
				t.Errorf("Index holding %q: removed, but the index keeps %v, %v", pair[0], x.at, x.below)
			}
			// Among others that reach neither, in sorted order around it.
			sorted := NewSorted([]Holder{{Path: "/a!"}, {Path: pair[0], Name: "k"}, {Path: "/a-"}, {Path: "/0"}, {Path: "/z/y"}})
			_, got := sorted.Find(pair[1], func(h Holder) bool { return h.Name == "k" })
			if got != tc.want {
				t.Errorf("Sorted holding %q, Find(%q) = %v, want %v", pair[0], pair[1], got, tc.want)
			}
		}
	}
}
