package controller

import "testing"

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
		if got := nested(tc.a, tc.b); got != tc.want {
			t.Errorf("nested(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
