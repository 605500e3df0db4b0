package core

import "testing"

// A volume's sequence tries first an id the record keeps with the
// volume's record (fits), within maxFitProbes of its place; past them, or
// with no test, it chooses as it always did. The record's own id (a move's
// from > 0 starts past it) is never the one that fits.
func TestCandidateTriesFirstAnIDThatFits(t *testing.T) {
	const lo, hi = 50000, 50999
	f := listedFS()
	seq := func(i int) int64 { return SequenceAt(fsID, "pvc-1", lo, hi, i) }
	for _, tc := range []struct {
		name   string
		from   int
		fits   func(int64) bool
		wantAt int // the index answered
	}{
		{"no test: the sequence's first", 0, nil, 0},
		{"every id fits: the sequence's first", 0, func(int64) bool { return true }, 0},
		{"the fourth fits", 0, func(id int64) bool { return id == seq(3) }, 3},
		{"from a move's place", 5, func(id int64) bool { return id == seq(9) }, 9},
		{"none fits: the sequence's first", 0, func(int64) bool { return false }, 0},
		{"one past maxFitProbes fits: the sequence's first", 0, func(id int64) bool { return id == seq(maxFitProbes) }, 0},
		{"only the record's own id fits: the next of the sequence", 7, func(id int64) bool { return id == seq(6) }, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, n, err := f.Candidate("pvc-1", "/pvc-1", lo, hi, tc.from, tc.fits)
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.wantAt || id != seq(tc.wantAt) {
				t.Fatalf("id %d at %d, want %d at %d", id, n, seq(tc.wantAt), tc.wantAt)
			}
		})
	}
}
