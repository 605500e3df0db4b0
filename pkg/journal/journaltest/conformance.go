// Package journaltest proves that a journal.Store keeps the contract written
// on the interface: one table of subtests, run against every implementation
// (Memory, File, pkg/kube's Leases and ConfigMaps), so that the controller may rely on
// the contract and never on one store's accidents.
package journaltest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// Pager is implemented by a store whose List answers in pages of at most
// PageSize entries. Conformance then lists 2.5 pages' worth and checks that
// no page is larger; a store without it is given 1200 entries (more than
// two pages of 500, the Kubernetes store's size).
type Pager interface {
	PageSize() int
}

// defaultListed is the entries the paging subtest makes without a Pager hint.
const defaultListed = 1200

// Contenders is how many concurrent writers the race subtests start.
const Contenders = 20

// File systems of the subtests: IDs as EFS makes them.
const (
	FS1 = "fs-0123456789abcdef0"
	FS2 = "fs-0fedcba9876543210"
)

// Names holds the names every store must accept and keep apart: client
// tokens are any bytes (the CO's, or a hand-made access point's), so a store
// never derives a path, an object name or a label from one unencoded.
var Names = []string{
	"pvc-5c1e1d7a-8b4b-4e8e-9a55-3f1f0e7d2b61",
	"a/b", "a_b", "a-b", "a.b", "A/B", "a%2Fb", "a?b=c#d",
	"/", "//", "../../etc/passwd", ".", "..",
	"with space", " leading", "trailing ", "new\nline", "tab\tname",
	"ünïcödé", "名前", "🙂",
	strings.Repeat("x", 64), strings.Repeat("/", 64), strings.Repeat("é", 32), // 64 bytes
	"nul\x00byte", "\xff\xfe not UTF-8",
	"",
}

// Conformance runs every clause of the Store contract against stores made by
// open, one fresh (empty) store per subtest.
//
// FileSystem "": a store may refuse an entry whose FileSystem is empty (List
// reads "" as every file system, so such an entry could never be listed by
// its own), with a definitive error: neither ErrUnavailable nor a sentinel
// of another meaning. A store that accepts it keeps it as any other entry.
func Conformance(t *testing.T, open func(t *testing.T) journal.Store) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, s journal.Store)
	}{
		{"CreateThenGet", createThenGet},
		{"GetMissing", getMissing},
		{"CreateExistsAnswersTheEntryFound", createExists},
		{"ConcurrentCreatesOneWins", concurrentCreates},
		{"UpdateCurrent", updateCurrent},
		{"UpdateStaleConflicts", updateStale},
		{"ConcurrentUpdatesOneWins", concurrentUpdates},
		{"UpdateMissingNotFound", updateMissing},
		{"DeleteCurrent", deleteCurrent},
		{"DeleteStaleConflicts", deleteStale},
		{"DeleteMissingIsNil", deleteMissing},
		{"VersionOfAnEarlierLifeIsStale", earlierLife},
		{"VersionChangesOnEveryWrite", versionsChange},
		{"KeysAreKindFileSystemAndName", keysAreDistinct},
		{"NamesOfAnyBytes", namesOfAnyBytes},
		{"ValuesOfAnyBytes", valuesOfAnyBytes},
		{"IndexStoredAndListed", indexListed},
		{"ListFilters", listFilters},
		{"ListPages", listPages},
		{"ListStopsAtTheFirstError", listStops},
		{"EmptyFileSystem", emptyFileSystem},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, open(t))
		})
	}
}

func vol(fs, name string) journal.Key {
	return journal.Key{Kind: journal.KindVolume, FileSystem: fs, Name: name}
}

func id(fs string, n int) journal.Key {
	return journal.Key{Kind: journal.KindID, FileSystem: fs, Name: strconv.Itoa(n)}
}

func value(s string) []byte { return []byte(strconv.Quote(s)) }

// mustCreate creates e and checks the entry answered.
func mustCreate(t *testing.T, s journal.Store, e journal.Entry) journal.Entry {
	t.Helper()
	got, err := s.Create(t.Context(), e)
	if err != nil {
		t.Fatalf("Create %s: %v", e.Key, err)
	}
	if got.Key != e.Key || !bytes.Equal(got.Value, e.Value) || got.Index != e.Index || got.Version == "" {
		t.Fatalf("Create %s answered %s", e.Key, show(got))
	}
	return got
}

func mustUpdate(t *testing.T, s journal.Store, e journal.Entry) journal.Entry {
	t.Helper()
	got, err := s.Update(t.Context(), e)
	if err != nil {
		t.Fatalf("Update %s at %q: %v", e.Key, e.Version, err)
	}
	if got.Key != e.Key || !bytes.Equal(got.Value, e.Value) || got.Index != e.Index || got.Version == "" {
		t.Fatalf("Update %s answered %s", e.Key, show(got))
	}
	return got
}

// expect checks that the store holds want (Key, Value, Index and Version).
func expect(t *testing.T, s journal.Store, want journal.Entry) {
	t.Helper()
	got, err := s.Get(t.Context(), want.Key)
	if err != nil {
		t.Fatalf("Get %s: %v", want.Key, err)
	}
	if !same(got, want) {
		t.Fatalf("Get %s = %s, want %s", want.Key, show(got), show(want))
	}
}

func expectMissing(t *testing.T, s journal.Store, k journal.Key) {
	t.Helper()
	if got, err := s.Get(t.Context(), k); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("Get %s = %s, %v; want ErrNotFound", k, show(got), err)
	}
}

func same(a, b journal.Entry) bool {
	return a.Key == b.Key && bytes.Equal(a.Value, b.Value) && a.Index == b.Index && a.Version == b.Version
}

func show(e journal.Entry) string {
	return fmt.Sprintf("{%s value %q index %q version %q}", e.Key, e.Value, e.Index, e.Version)
}

// definitive fails unless err is a definitive error: not nil, not
// ErrUnavailable, and none of the sentinels that mean something else.
func definitive(t *testing.T, what string, err error) {
	t.Helper()
	for _, s := range []error{journal.ErrUnavailable, journal.ErrExists, journal.ErrConflict} {
		if errors.Is(err, s) {
			t.Fatalf("%s: %v, want a definitive error", what, err)
		}
	}
	if err == nil {
		t.Fatalf("%s succeeded, want a definitive error", what)
	}
}

// Create stores the entry; Get answers it. A Version given to Create is
// not the store's: ignored.
func createThenGet(t *testing.T, s journal.Store) {
	e := journal.Entry{Key: vol(FS1, "pvc-1"), Value: []byte(`{"token":"pvc-1"}`), Index: "fsap-0123456789abcdef0", Version: "bogus"}
	got, err := s.Create(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != e.Key || !bytes.Equal(got.Value, e.Value) || got.Index != e.Index || got.Version == "" || got.Version == "bogus" {
		t.Fatalf("Create answered %s", show(got))
	}
	expect(t, s, got)
	plain := mustCreate(t, s, journal.Entry{Key: id(FS1, 50000), Value: []byte("pvc-1")})
	expect(t, s, plain)
}

func getMissing(t *testing.T, s journal.Store) {
	expectMissing(t, s, vol(FS1, "never"))
	mustCreate(t, s, journal.Entry{Key: vol(FS1, "other"), Value: value("x")})
	expectMissing(t, s, vol(FS1, "never"))
}

// A second Create of a key is ErrExists with the entry found, its Value,
// Index and Version, and changes nothing.
func createExists(t *testing.T, s journal.Store) {
	first := mustCreate(t, s, journal.Entry{Key: vol(FS1, "pvc-1"), Value: value("first"), Index: "fsap-1"})
	got, err := s.Create(t.Context(), journal.Entry{Key: vol(FS1, "pvc-1"), Value: value("second"), Index: "fsap-2"})
	if !errors.Is(err, journal.ErrExists) {
		t.Fatalf("second Create: %v, want ErrExists", err)
	}
	if !same(got, first) {
		t.Fatalf("second Create answered %s, want the entry found %s", show(got), show(first))
	}
	expect(t, s, first)
}

// race runs n calls of f at once (as far as the scheduler allows: all
// released together, no sleeps) and returns their results in order.
func race[R any](n int, f func(i int) R) []R {
	out := make([]R, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			out[i] = f(i)
		})
	}
	close(start)
	wg.Wait()
	return out
}

type result struct {
	e   journal.Entry
	err error
}

// Of Contenders concurrent Creates of a key exactly one succeeds; every
// other one is ErrExists with the winner's Value and Version.
func concurrentCreates(t *testing.T, s journal.Store) {
	for round := range 3 {
		k := id(FS1, 50000+round)
		rs := race(Contenders, func(i int) result {
			e, err := s.Create(t.Context(), journal.Entry{Key: k, Value: value("contender " + strconv.Itoa(i))})
			return result{e, err}
		})
		var winner *journal.Entry
		for i, r := range rs {
			if r.err == nil {
				if winner != nil {
					t.Fatalf("%s: two Creates succeeded: %s and %s", k, show(*winner), show(r.e))
				}
				if !bytes.Equal(r.e.Value, value("contender "+strconv.Itoa(i))) {
					t.Fatalf("%s: the winner %d was answered %s", k, i, show(r.e))
				}
				winner = &rs[i].e
			}
		}
		if winner == nil {
			t.Fatalf("%s: no Create succeeded: %v", k, rs[0].err)
		}
		for i, r := range rs {
			if r.err == nil {
				continue
			}
			if !errors.Is(r.err, journal.ErrExists) {
				t.Fatalf("%s: contender %d: %v, want ErrExists", k, i, r.err)
			}
			if !same(r.e, *winner) {
				t.Fatalf("%s: contender %d was answered %s, want the winner %s", k, i, show(r.e), show(*winner))
			}
		}
		expect(t, s, *winner)
	}
}

// Update with the current version replaces value and index, and answers
// the new version; Get answers the update.
func updateCurrent(t *testing.T, s journal.Store) {
	e := mustCreate(t, s, journal.Entry{Key: vol(FS1, "pvc-1"), Value: value("planned")})
	e.Value, e.Index = value("bound"), "fsap-1"
	up := mustUpdate(t, s, e)
	if up.Version == e.Version {
		t.Fatalf("Update kept version %q", e.Version)
	}
	expect(t, s, up)
	// The index is replaced too, and cleared by "".
	up.Index = "fsap-2"
	up = mustUpdate(t, s, up)
	expect(t, s, up)
	up.Index = ""
	up = mustUpdate(t, s, up)
	expect(t, s, up)
	for _, ap := range []string{"fsap-1", "fsap-2"} {
		if got := listAll(t, s, journal.KindVolume, FS1, ap); len(got) != 0 {
			t.Fatalf("List by %s after the index was cleared: %v", ap, names(got))
		}
	}
}

// Update with a version that is no longer current is ErrConflict and
// changes nothing; so is an Update with no version.
func updateStale(t *testing.T, s journal.Store) {
	old := mustCreate(t, s, journal.Entry{Key: vol(FS1, "pvc-1"), Value: value("v1")})
	cur := old
	cur.Value = value("v2")
	cur = mustUpdate(t, s, cur)
	for _, stale := range []string{old.Version, ""} {
		e := journal.Entry{Key: old.Key, Value: value("lost"), Index: "fsap-lost", Version: stale}
		if _, err := s.Update(t.Context(), e); !errors.Is(err, journal.ErrConflict) {
			t.Fatalf("Update at version %q (current %q): %v, want ErrConflict", stale, cur.Version, err)
		}
		expect(t, s, cur)
	}
}

// Of Contenders concurrent Updates from one version exactly one succeeds;
// every other one is ErrConflict.
func concurrentUpdates(t *testing.T, s journal.Store) {
	base := mustCreate(t, s, journal.Entry{Key: vol(FS1, "pvc-1"), Value: value("base")})
	rs := race(Contenders, func(i int) result {
		e := base
		e.Value = value("writer " + strconv.Itoa(i))
		got, err := s.Update(t.Context(), e)
		return result{got, err}
	})
	var winner *journal.Entry
	for i, r := range rs {
		switch {
		case r.err == nil && winner != nil:
			t.Fatalf("two Updates from version %q succeeded: %s and %s", base.Version, show(*winner), show(r.e))
		case r.err == nil:
			winner = &rs[i].e
		case !errors.Is(r.err, journal.ErrConflict):
			t.Fatalf("writer %d: %v, want ErrConflict", i, r.err)
		}
	}
	if winner == nil {
		t.Fatalf("no Update succeeded: %v", rs[0].err)
	}
	expect(t, s, *winner)
}

// Update of a key never written, or deleted, is ErrNotFound.
func updateMissing(t *testing.T, s journal.Store) {
	if _, err := s.Update(t.Context(), journal.Entry{Key: vol(FS1, "never"), Value: value("x"), Version: "1"}); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("Update of a key never written: %v, want ErrNotFound", err)
	}
	e := mustCreate(t, s, journal.Entry{Key: vol(FS1, "gone"), Value: value("x")})
	if err := s.Delete(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	e.Value = value("y")
	if _, err := s.Update(t.Context(), e); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("Update of a deleted entry: %v, want ErrNotFound", err)
	}
	expectMissing(t, s, e.Key)
}

// Delete with the current version removes the entry; the key is free again.
func deleteCurrent(t *testing.T, s journal.Store) {
	e := mustCreate(t, s, journal.Entry{Key: vol(FS1, "pvc-1"), Value: value("x"), Index: "fsap-1"})
	keep := mustCreate(t, s, journal.Entry{Key: vol(FS1, "pvc-2"), Value: value("y")})
	if err := s.Delete(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	expectMissing(t, s, e.Key)
	expect(t, s, keep)
	if got := listAll(t, s, journal.KindVolume, FS1, "fsap-1"); len(got) != 0 {
		t.Fatalf("List by the index of a deleted entry: %v", names(got))
	}
	again := mustCreate(t, s, journal.Entry{Key: e.Key, Value: value("again")})
	expect(t, s, again)
}

// Delete with a stale version, or none, is ErrConflict and removes nothing.
func deleteStale(t *testing.T, s journal.Store) {
	old := mustCreate(t, s, journal.Entry{Key: id(FS1, 50000), Value: []byte("pvc-1")})
	cur := old
	cur.Value = []byte("pvc-2")
	cur = mustUpdate(t, s, cur)
	for _, stale := range []string{old.Version, ""} {
		e := cur
		e.Version = stale
		if err := s.Delete(t.Context(), e); !errors.Is(err, journal.ErrConflict) {
			t.Fatalf("Delete at version %q (current %q): %v, want ErrConflict", stale, cur.Version, err)
		}
		expect(t, s, cur)
	}
}

// Delete of an entry that is gone (or never was) is nil, whatever the version.
func deleteMissing(t *testing.T, s journal.Store) {
	for _, v := range []string{"", "1", "12345"} {
		if err := s.Delete(t.Context(), journal.Entry{Key: vol(FS1, "never"), Version: v}); err != nil {
			t.Fatalf("Delete of a key never written (version %q): %v", v, err)
		}
	}
	e := mustCreate(t, s, journal.Entry{Key: vol(FS1, "gone"), Value: value("x")})
	if err := s.Delete(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(t.Context(), e); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
}

// An entry deleted and created again is a new entry: the version of its
// earlier life is stale for Update and Delete (no ABA).
func earlierLife(t *testing.T, s journal.Store) {
	first := mustCreate(t, s, journal.Entry{Key: id(FS1, 50000), Value: []byte("pvc-1")})
	if err := s.Delete(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	second := mustCreate(t, s, journal.Entry{Key: id(FS1, 50000), Value: []byte("pvc-1")})
	if second.Version == first.Version {
		t.Fatalf("the entry created again has the version of its earlier life %q", first.Version)
	}
	stale := first
	stale.Value = []byte("pvc-2")
	if _, err := s.Update(t.Context(), stale); !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("Update at the version of the earlier life: %v, want ErrConflict", err)
	}
	if err := s.Delete(t.Context(), first); !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("Delete at the version of the earlier life: %v, want ErrConflict", err)
	}
	expect(t, s, second)
}

// Every write answers a version no earlier write of the key answered, even
// a write of the same value and index: a writer that read version v must
// fail once anyone wrote after v.
func versionsChange(t *testing.T, s journal.Store) {
	seen := map[string]bool{}
	e := mustCreate(t, s, journal.Entry{Key: vol(FS1, "pvc-1"), Value: value("same"), Index: "fsap-1"})
	seen[e.Version] = true
	for i := range 5 {
		prev := e
		e = mustUpdate(t, s, e) // the same value and index
		if seen[e.Version] {
			t.Fatalf("write %d answered version %q again", i+1, e.Version)
		}
		seen[e.Version] = true
		expect(t, s, e)
		if _, err := s.Update(t.Context(), prev); !errors.Is(err, journal.ErrConflict) {
			t.Fatalf("Update at the version before an unchanged write: %v, want ErrConflict", err)
		}
	}
	// A write of another key changes nothing of this one.
	mustCreate(t, s, journal.Entry{Key: vol(FS1, "pvc-2"), Value: value("other")})
	expect(t, s, e)
}

// Kind, file system and name together are the key: the same name under
// another kind or file system is another entry.
func keysAreDistinct(t *testing.T, s journal.Store) {
	var made []journal.Entry
	for _, k := range []journal.Key{
		vol(FS1, "50000"), vol(FS2, "50000"),
		{Kind: journal.KindID, FileSystem: FS1, Name: "50000"}, {Kind: journal.KindID, FileSystem: FS2, Name: "50000"},
	} {
		made = append(made, mustCreate(t, s, journal.Entry{Key: k, Value: value(k.String())}))
	}
	for _, e := range made {
		expect(t, s, e)
	}
	if err := s.Delete(t.Context(), made[0]); err != nil {
		t.Fatal(err)
	}
	expectMissing(t, s, made[0].Key)
	for _, e := range made[1:] {
		expect(t, s, e)
	}
}

// Names of any bytes are kept, apart, and answered by List as written.
func namesOfAnyBytes(t *testing.T, s journal.Store) {
	want := map[journal.Key]journal.Entry{}
	for _, fs := range []string{FS1, FS2} {
		for i, n := range Names {
			e := mustCreate(t, s, journal.Entry{Key: vol(fs, n), Value: value(fs + "/" + n), Index: "fsap-" + strconv.Itoa(i)})
			want[e.Key] = e
		}
	}
	for _, e := range want {
		expect(t, s, e)
	}
	for _, fs := range []string{FS1, FS2} {
		got := listAll(t, s, journal.KindVolume, fs, "")
		if len(got) != len(Names) {
			t.Fatalf("List of %s: %d entries, want %d: %q", fs, len(got), len(Names), names(got))
		}
		for _, e := range got {
			if w, ok := want[e.Key]; !ok || !same(e, w) {
				t.Fatalf("List answered %s, want %s", show(e), show(w))
			}
		}
	}
	// Index lookups find the one entry of each name.
	for i, n := range Names {
		got := listAll(t, s, journal.KindVolume, FS1, "fsap-"+strconv.Itoa(i))
		if len(got) != 1 || got[0].Key.Name != n {
			t.Fatalf("List by the index of %q: %q", n, names(got))
		}
	}
	// Each is updated and deleted by its own key, touching no other.
	e := want[vol(FS1, "a/b")]
	e.Value = value("changed")
	want[e.Key] = mustUpdate(t, s, e)
	gone := want[vol(FS1, "a_b")]
	if err := s.Delete(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	delete(want, gone.Key)
	for _, e := range want {
		expect(t, s, e)
	}
	expectMissing(t, s, gone.Key)
}

// Values are bytes: empty, not UTF-8, large.
func valuesOfAnyBytes(t *testing.T, s journal.Store) {
	for i, v := range [][]byte{
		nil,
		[]byte("{}"),
		{0xff, 0x00, 0xfe, 'a', '\n'},
		[]byte("pvc-0\x00tail"),
		[]byte(`{"path":"/a/b","claimName":"名前"}`),
		bytes.Repeat([]byte(`{"k":"0123456789abcdef"}`), 64<<10/24), // 64 KiB
	} {
		e := mustCreate(t, s, journal.Entry{Key: id(FS1, 50000+i), Value: v})
		expect(t, s, e)
		e.Value = slices.Concat(v, []byte("x"))
		expect(t, s, mustUpdate(t, s, e))
	}
}

// The index is stored with the entry and List finds entries by it.
func indexListed(t *testing.T, s journal.Store) {
	a := mustCreate(t, s, journal.Entry{Key: vol(FS1, "pvc-a"), Value: value("a"), Index: "fsap-0123456789abcdef0"})
	b := mustCreate(t, s, journal.Entry{Key: vol(FS1, "pvc-b"), Value: value("b"), Index: "fsap-0fedcba9876543210"})
	c := mustCreate(t, s, journal.Entry{Key: vol(FS1, "pvc-c"), Value: value("c")})
	expect(t, s, a)
	expect(t, s, c)
	if got := listAll(t, s, journal.KindVolume, FS1, a.Index); len(got) != 1 || !same(got[0], a) {
		t.Fatalf("List by %s: %q", a.Index, names(got))
	}
	// Moved to another index: found by the new one only.
	b.Index = a.Index
	b = mustUpdate(t, s, b)
	if got := listAll(t, s, journal.KindVolume, FS1, "fsap-0fedcba9876543210"); len(got) != 0 {
		t.Fatalf("List by the old index: %q", names(got))
	}
	if got := listAll(t, s, journal.KindVolume, FS1, a.Index); len(got) != 2 {
		t.Fatalf("List by %s: %q, want pvc-a and pvc-b", a.Index, names(got))
	}
}

// List answers every entry of the kind on the file system ("" = all) with
// the index ("" = any), and nothing else.
func listFilters(t *testing.T, s journal.Store) {
	type want = map[journal.Key]journal.Entry
	all := want{}
	add := func(e journal.Entry) { all[e.Key] = mustCreate(t, s, e) }
	for _, fs := range []string{FS1, FS2} {
		for i := range 3 {
			n := "pvc-" + strconv.Itoa(i)
			add(journal.Entry{Key: vol(fs, n), Value: value(n), Index: "fsap-" + strconv.Itoa(i%2)})
			add(journal.Entry{Key: id(fs, 50000+i), Value: []byte(n)})
		}
	}
	// The same access point ID on another file system too.
	add(journal.Entry{Key: vol(FS2, "pvc-9"), Value: value("x"), Index: "fsap-0"})
	for _, q := range []struct {
		kind      journal.Kind
		fs, index string
	}{
		{journal.KindVolume, FS1, ""}, {journal.KindVolume, FS2, ""}, {journal.KindVolume, "", ""},
		{journal.KindID, FS1, ""}, {journal.KindID, "", ""},
		{journal.KindVolume, FS1, "fsap-0"}, {journal.KindVolume, "", "fsap-0"}, {journal.KindVolume, FS2, "fsap-1"},
		{journal.KindVolume, FS1, "fsap-none"}, {journal.KindVolume, "fs-00000000000000000", ""},
		{journal.KindID, FS1, "fsap-0"},
	} {
		exp := want{}
		for k, e := range all {
			if k.Kind == q.kind && (q.fs == "" || k.FileSystem == q.fs) && (q.index == "" || e.Index == q.index) {
				exp[k] = e
			}
		}
		got := listAll(t, s, q.kind, q.fs, q.index)
		if len(got) != len(exp) {
			t.Fatalf("List(%s, %q, %q) = %q, want %d entries", q.kind, q.fs, q.index, names(got), len(exp))
		}
		for _, e := range got {
			if w, ok := exp[e.Key]; !ok || !same(e, w) {
				t.Fatalf("List(%s, %q, %q) answered %s", q.kind, q.fs, q.index, show(e))
			}
		}
	}
}

// List reads a store of many pages: every entry once, no page larger than
// the store's.
func listPages(t *testing.T, s journal.Store) {
	n, page := defaultListed, 0
	if p, ok := s.(Pager); ok && p.PageSize() > 0 {
		page = p.PageSize()
		n = 2*page + page/2 + 1
	}
	var made sync.Map
	var mu sync.Mutex
	var failed error
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				e := journal.Entry{Key: vol(FS1, fmt.Sprintf("pvc-%05d", i)), Value: value(strconv.Itoa(i))}
				if i%3 == 0 {
					e.Key.FileSystem = FS2
				}
				got, err := s.Create(t.Context(), e)
				if err != nil {
					mu.Lock()
					failed = errors.Join(failed, err)
					mu.Unlock()
					continue
				}
				made.Store(got.Key, got)
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	// Entries of another kind are not listed.
	mustCreate(t, s, journal.Entry{Key: id(FS1, 50000), Value: []byte("pvc-00001")})

	for _, fs := range []string{"", FS1, FS2} {
		seen := map[journal.Key]bool{}
		calls := 0
		err := s.List(t.Context(), journal.KindVolume, fs, "", func(es []journal.Entry) error {
			calls++
			if page > 0 && len(es) > page {
				return fmt.Errorf("a page of %d entries, the store's pages hold %d", len(es), page)
			}
			for _, e := range es {
				if seen[e.Key] {
					return fmt.Errorf("%s answered twice", e.Key)
				}
				seen[e.Key] = true
				w, ok := made.Load(e.Key)
				if !ok || !same(e, w.(journal.Entry)) {
					return fmt.Errorf("answered %s, not an entry made", show(e))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("List(%q): %v", fs, err)
		}
		want := 0
		made.Range(func(k, _ any) bool {
			if fs == "" || k.(journal.Key).FileSystem == fs {
				want++
			}
			return true
		})
		if len(seen) != want {
			t.Fatalf("List(%q) answered %d entries, want %d", fs, len(seen), want)
		}
		if page > 0 && fs == "" && calls < 3 {
			t.Fatalf("List of %d entries in pages of %d called fn %d times", want, page, calls)
		}
	}
}

// An error of fn ends the List: List answers it and calls fn no more.
func listStops(t *testing.T, s journal.Store) {
	n := 5
	if p, ok := s.(Pager); ok && p.PageSize() > 0 {
		n = 2*p.PageSize() + 1
	}
	for i := range n {
		mustCreate(t, s, journal.Entry{Key: vol(FS1, fmt.Sprintf("pvc-%03d", i)), Value: value("x")})
	}
	stop := errors.New("enough")
	calls := 0
	err := s.List(t.Context(), journal.KindVolume, FS1, "", func([]journal.Entry) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) {
		t.Fatalf("List answered %v, want fn's error", err)
	}
	if calls != 1 {
		t.Fatalf("fn called %d times after failing", calls)
	}
	// Nothing to list: fn may be called with no entries, and List is nil.
	err = s.List(t.Context(), journal.KindVolume, FS2, "", func(es []journal.Entry) error {
		if len(es) > 0 {
			return fmt.Errorf("answered %q on an empty file system", names(es))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// FileSystem "": refused definitively, or kept as any other entry.
func emptyFileSystem(t *testing.T, s journal.Store) {
	e, err := s.Create(t.Context(), journal.Entry{Key: vol("", "pvc-1"), Value: value("x")})
	if err != nil {
		definitive(t, `Create with FileSystem ""`, err)
		return
	}
	expect(t, s, e)
	if got := listAll(t, s, journal.KindVolume, "", ""); len(got) != 1 || !same(got[0], e) {
		t.Fatalf("List of every file system: %q", names(got))
	}
	if err := s.Delete(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	expectMissing(t, s, e.Key)
}

func listAll(t *testing.T, s journal.Store, kind journal.Kind, fs, index string) []journal.Entry {
	t.Helper()
	var out []journal.Entry
	if err := s.List(t.Context(), kind, fs, index, func(es []journal.Entry) error {
		out = append(out, es...)
		return nil
	}); err != nil {
		t.Fatalf("List(%s, %q, %q): %v", kind, fs, index, err)
	}
	return out
}

func names(es []journal.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Key.String()
	}
	return out
}
