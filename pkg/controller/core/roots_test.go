package core

import (
	"fmt"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/rootpath"
)

// A create is in FS's index from Creating, at its planned root; its end
// puts it at the access point it answered (adopted ones may differ), and
// it stays GoneMemory, dropped by the sweep once the index has doubled.
func TestCreatesIndexFromBeginToPrune(t *testing.T) {
	f := NewFS(fsID)
	f.Creating("tok", "pvc-1", "/a/b")
	got := f.Creates("/a")
	if len(got) != 1 || got[0] != (rootpath.Holder{Token: "tok", Name: "pvc-1", Path: "/a/b", Kind: rootpath.Creating, Live: true}) {
		t.Fatalf("under way: Creates(/a) = %v", got)
	}
	f.CreateEnded("tok", &efs.AccessPoint{ID: "fsap-1", Path: "/c"}, t0)
	if got := f.Creates("/a"); len(got) != 0 {
		t.Errorf("ended at another path: Creates(/a) = %v", got)
	}
	if got := f.Creates("/c/d"); len(got) != 1 || got[0].APID != "fsap-1" || got[0].Name != "pvc-1" {
		t.Errorf("ended: Creates(/c/d) = %v", got)
	}
	// One under way, never ended, is never pruned; ended ones are, once
	// GoneMemory has passed and their number reached the sweep's mark.
	f.Creating("open", "pvc-open", "/o")
	late := t0.Add(GoneMemory + 1)
	for i := range 1023 {
		tok := fmt.Sprint("t", i)
		f.Creating(tok, tok, "/x/"+tok)
		f.CreateEnded(tok, nil, late)
	}
	if got := f.Creates("/c"); len(got) != 0 {
		t.Errorf("after the sweep: the create that ended GoneMemory ago is kept: %v", got)
	}
	if got := f.Creates("/o"); len(got) != 1 {
		t.Errorf("after the sweep: the create under way is gone: %v", got)
	}
	if got := len(f.Creates("/x")); got != 1023 {
		t.Errorf("after the sweep: %d of 1023 recent creates kept", got)
	}
	f.CreateEnded("unknown", nil, late) // no Creating: nothing to end
	if got := f.Creates("/"); len(got) != 1024 {
		t.Errorf("%d creates indexed, want 1024", len(got))
	}
}

// Gone remembers a delete for root removal, and forgets the GID token the
// access point held; old ones go by the same doubling sweep.
func TestGoneIsRememberedUntilPruned(t *testing.T) {
	f := NewFS(fsID)
	f.Gone("fsap-old", t0)
	if !f.Deleted("fsap-old") || f.Deleted("fsap-other") {
		t.Fatal("Deleted does not say what Gone noted")
	}
	late := t0.Add(GoneMemory + 1)
	for i := range 1023 {
		f.Gone(fmt.Sprint("fsap-", i), late)
	}
	if f.Deleted("fsap-old") || !f.Deleted("fsap-0") {
		t.Error("the sweep at 1024 deletes kept the old one or dropped a recent one")
	}
}
