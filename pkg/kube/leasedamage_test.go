package kube_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

// logLines keeps what a logger wrote, a line per record: level, message
// and attributes.
type logLines struct {
	mu    sync.Mutex
	lines []string
	attrs []slog.Attr
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs(as []slog.Attr) slog.Handler {
	return &logLinesWith{l, as}
}
func (l *logLines) WithGroup(string) slog.Handler { return l }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%q", a.Key, a.Value.String()); return true })
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, b.String())
	return nil
}

type logLinesWith struct {
	*logLines
	as []slog.Attr
}

func (l *logLinesWith) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(l.as...)
	return l.logLines.Handle(ctx, r)
}

// at are the lines logged at level.
func (l *logLines) at(level slog.Level) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.HasPrefix(s, level.String()+" ") {
			out = append(out, s)
		}
	}
	return out
}

// loggedStore is a Lease store of owner whose log lines are kept.
func loggedStore(t *testing.T, k *kubetest.Server, owner string) (journal.Store, *logLines) {
	t.Helper()
	c := client(t, k, "controller")
	logs := &logLines{}
	c.SetLogger(slog.New(logs))
	return c.LeaseJournalStore(journalNS, owner), logs
}

// dirVolumeInOneShard is a directory volume's entry and its id's entry
// that one root shard holds, and that shard's Lease.
func dirVolumeInOneShard(t *testing.T) (vol, id journal.Entry, lease string) {
	t.Helper()
	vk := journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: "dir-token-1"}
	lease, _ = kube.LeaseRootShardOf(driver, vk)
	for n := 50000; n < 50100; n++ {
		ik := journal.Key{Kind: journal.KindID, FileSystem: fs1, Name: fmt.Sprint(n)}
		if l, _ := kube.LeaseRootShardOf(driver, ik); l == lease {
			return journal.Entry{Key: vk, Value: []byte(`{"dir":true,"allocated":` + ik.Name + `}`), Index: journal.DirIndex},
				journal.Entry{Key: ik, Value: []byte(vk.Name)}, lease
		}
	}
	t.Fatal("no id shares the volume's shard")
	return
}

// recordDirVolume writes through s a directory volume's entry and its
// id's entry, which one root shard holds, and returns them and the shard's
// Lease.
func recordDirVolume(t *testing.T, s journal.Store) (vol, id journal.Entry, lease string) {
	t.Helper()
	vol, id, lease = dirVolumeInOneShard(t)
	for _, e := range []journal.Entry{vol, id} {
		if _, err := s.Create(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}
	return vol, id, lease
}

// deletedDirVolume is recordDirVolume through a store whose lines are
// kept, and the Lease then deleted by hand.
func deletedDirVolume(t *testing.T) (*kubetest.Server, journal.Store, *logLines, journal.Entry, journal.Entry, string) {
	t.Helper()
	k := kubetest.Start(t)
	a, logs := loggedStore(t, k, driver)
	vol, id, lease := recordDirVolume(t, a)
	k.DeleteLease(journalNS, lease)
	return k, a, logs, vol, id, lease
}

// mustNameLoss checks that one Error line names the Lease and both entries
// it lost.
func mustNameLoss(t *testing.T, logs *logLines, lease string, lost ...journal.Entry) {
	t.Helper()
	errs := logs.at(slog.LevelError)
	if len(errs) != 1 {
		t.Fatalf("%d Error lines, want 1: %q (all: %q)", len(errs), errs, logs.lines)
	}
	for _, want := range []string{lease} {
		if !strings.Contains(errs[0], want) {
			t.Errorf("the Error line does not name %q: %s", want, errs[0])
		}
	}
	for _, e := range lost {
		if want := fmt.Sprintf("%s %s/%s", e.Key.Kind, e.Key.FileSystem, e.Key.Name); !strings.Contains(errs[0], want) {
			t.Errorf("the Error line does not name %q: %s", want, errs[0])
		}
	}
}

// A record Lease deleted by hand (kubectl delete lease, as to reset
// elections) that held a directory volume's entry and its id's entry is
// noticed by the next write of a replica that knew it: logged at Error
// with what it held, and restored, so that the id is not given again,
// neither to that replica's create nor to another replica's that never
// read the shard before.
func TestLeaseJournalDeletedLeaseIsLoudAndRestored(t *testing.T) {
	k, a, logs, vol, id, lease := deletedDirVolume(t)
	ctx := t.Context()

	// An access point's create holding the same id, through a.
	other := journal.Entry{Key: id.Key, Value: []byte("pvc-other")}
	got, err := a.Create(ctx, other)
	if !errors.Is(err, journal.ErrExists) || string(got.Value) != string(id.Value) {
		t.Fatalf("a create of id %s after its Lease was deleted: %q, %v; want it held by %q", id.Key.Name, got.Value, err, id.Value)
	}
	mustNameLoss(t, logs, lease, vol, id)
	if warns := logs.at(slog.LevelWarn); len(warns) != 1 || !strings.Contains(warns[0], "restored") {
		t.Errorf("no line says the Lease is restored: %q", warns)
	}
	// Another replica, which never read the shard, finds both.
	b, blogs := loggedStore(t, k, driver)
	if got, err := b.Create(ctx, other); !errors.Is(err, journal.ErrExists) || string(got.Value) != string(id.Value) {
		t.Fatalf("another replica's create of id %s: %q, %v", id.Key.Name, got.Value, err)
	}
	if got, err := b.Get(ctx, vol.Key); err != nil || string(got.Value) != string(vol.Value) || got.Index != journal.DirIndex {
		t.Fatalf("the directory volume's entry after the restore: %+v, %v", got, err)
	}
	if len(blogs.lines) != 0 {
		t.Errorf("a replica that saw no damage logged %q", blogs.lines)
	}
}

// The same deletion is noticed by a listing (a replica that lists the
// record, as the allocator does each minute, with no write of the shard):
// logged and restored at once.
func TestLeaseJournalDeletedLeaseFoundByAListing(t *testing.T) {
	k, a, logs, vol, id, lease := deletedDirVolume(t)
	_ = listAll(t, a, journal.KindVolume)
	mustNameLoss(t, logs, lease, vol, id)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if l, ok := k.Lease(journalNS, lease); ok && strings.Contains(l.Annotations["efs.csi.aws.com/journal-entries"], "dir-token-1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Lease was not restored")
		}
	}
	if got := listAll(t, a, journal.KindID); got[id.Key].Key != id.Key {
		t.Fatalf("the id entry is not listed after the restore: %v", got)
	}
	if n := len(logs.at(slog.LevelError)); n != 1 {
		t.Errorf("%d Error lines for one deletion: %q", n, logs.lines)
	}
}

// A Lease rewritten by hand (an entry removed, the record's seq left as
// it was) is noticed by the next read, and the entry restored.
func TestLeaseJournalRewrittenLeaseIsLoudAndRestored(t *testing.T) {
	k := kubetest.Start(t)
	a, logs := loggedStore(t, k, driver)
	ctx := t.Context()
	_, id, lease := recordDirVolume(t, a)
	l, _ := k.Lease(journalNS, lease)
	_, ann := kube.LeaseRootShardOf(driver, id.Key)
	var entries map[string]string
	if err := json.Unmarshal([]byte(l.Annotations["efs.csi.aws.com/journal-entries"]), &entries); err != nil || entries[ann] == "" {
		t.Fatalf("the id entry is not in its Lease: %v", err)
	}
	delete(entries, ann)
	b, _ := json.Marshal(entries)
	l.Annotations["efs.csi.aws.com/journal-entries"] = string(b)
	k.SetLease(l)
	if got, err := a.Get(ctx, id.Key); err != nil || string(got.Value) != string(id.Value) {
		t.Fatalf("the id entry removed by hand: %q, %v", got.Value, err)
	}
	mustNameLoss(t, logs, lease, id)
}

// A read of a shard answered before another that the store observed
// first (a commit's Get beside a List: reads of a shard run side by side)
// is older, not damage: nothing is logged, nothing restored.
func TestLeaseJournalAnOlderReadIsNoDamage(t *testing.T) {
	k := kubetest.Start(t)
	a, logs := loggedStore(t, k, driver)
	ctx := t.Context()
	vol, id, lease := dirVolumeInOneShard(t)
	if _, err := a.Create(ctx, vol); err != nil {
		t.Fatal(err)
	}
	older, ok := k.Lease(journalNS, lease)
	if !ok {
		t.Fatal("no Lease")
	}
	if _, err := a.Create(ctx, id); err != nil { // observed at a later seq, with the id entry
		t.Fatal(err)
	}
	kube.ObserveLeaseRead(a, &older) // lacks the id entry, its seq one back
	if got := listAll(t, a, journal.KindID); got[id.Key].Key != id.Key {
		t.Fatalf("the id entry is not listed: %v", got)
	}
	if len(logs.lines) != 0 {
		t.Errorf("logged for an older read: %q", logs.lines)
	}
}

// Replicas writing, deleting and splitting one record's shards are no
// damage: nothing is logged.
func TestLeaseJournalReplicasWritesAreNoDamage(t *testing.T) {
	k := kubetest.Start(t)
	a, alogs := loggedStore(t, k, driver)
	b, blogs := loggedStore(t, k, driver)
	ctx := t.Context()
	value := []byte(strings.Repeat("v", 1000))
	var wg sync.WaitGroup
	for w, s := range []journal.Store{a, b, a, b} {
		wg.Go(func() {
			for i := range 100 {
				key := journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: fmt.Sprint("pvc-", w, "-", i)}
				e, err := s.Create(ctx, journal.Entry{Key: key, Value: value})
				if err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					if err := []journal.Store{a, b}[i%2].Delete(ctx, e); err != nil {
						t.Error(err)
					}
				}
				if i%10 == 0 {
					_ = listAll(t, s, journal.KindVolume)
				}
			}
		})
	}
	wg.Wait()
	_ = listAll(t, a, journal.KindVolume)
	_ = listAll(t, b, journal.KindVolume)
	if len(alogs.lines)+len(blogs.lines) != 0 {
		t.Errorf("logged with no damage: %q %q", alogs.lines, blogs.lines)
	}
}

// Two replicas saw a Lease before it was deleted; the one that saw it
// later restores it first. The other, whose state is earlier (it still
// holds an entry the first deleted), restores nothing: a deleted entry
// does not come back.
func TestLeaseJournalAnEarlierStateRestoresNothing(t *testing.T) {
	k := kubetest.Start(t)
	a, alogs := loggedStore(t, k, driver)
	b, blogs := loggedStore(t, k, driver)
	ctx := t.Context()
	vol, id, lease := dirVolumeInOneShard(t)
	var made []journal.Entry
	for _, e := range []journal.Entry{vol, id} {
		e, err := a.Create(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, e)
	}
	if _, err := b.Get(ctx, id.Key); err != nil { // b knows the shard with both
		t.Fatal(err)
	}
	if err := a.Delete(ctx, made[1]); err != nil { // the volume's id released, b unaware
		t.Fatal(err)
	}
	k.DeleteLease(journalNS, lease)
	if _, err := a.Get(ctx, vol.Key); err != nil {
		t.Fatalf("the volume entry after a's restore: %v", err)
	}
	if _, err := b.Get(ctx, id.Key); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("b brought back the id entry a deleted: %v", err)
	}
	mustNameLoss(t, alogs, lease, vol)
	if errs := blogs.at(slog.LevelError); len(errs) != 1 || !strings.Contains(errs[0], "restored by another replica") {
		t.Errorf("b's Error lines: %q", errs)
	}
}
