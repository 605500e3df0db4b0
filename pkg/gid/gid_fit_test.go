package gid

import "testing"

// pickFit takes the first free id that fits among the next MaxFitProbes
// free ones from its start, wrapping; else, or with no test, pick's.
func TestPickFitPrefersAnIDThatFits(t *testing.T) {
	v := &View{taken: map[int64]uint64{}}
	for _, g := range []int64{3, 4, 6} { // taken
		v.taken[g>>6] |= 1 << (g & 63)
	}
	for _, tc := range []struct {
		name  string
		start int64
		fits  func(int64) bool
		want  int64
	}{
		{"no test", 3, nil, 5},
		{"the first fits", 3, func(int64) bool { return true }, 5},
		{"a later free one fits", 3, func(g int64) bool { return g == 9 }, 9},
		{"past the range's end, wrapping", 9, func(g int64) bool { return g == 1 }, 1},
		{"none fits: pick's", 3, func(int64) bool { return false }, 5},
		{"only a taken one fits: pick's", 3, func(g int64) bool { return g == 4 }, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if g, ok := v.pickFit(0, 10, tc.start, tc.fits); !ok || g != tc.want {
				t.Fatalf("%d %v, want %d", g, ok, tc.want)
			}
		})
	}
}
