package journaltest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// PairConformance runs every clause of the journal.Pairer contract against
// stores made by open (which must be Pairers), one fresh store per subtest.
func PairConformance(t *testing.T, open func(t *testing.T) journal.Store) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, s journal.Store, p journal.Pairer)
	}{
		{"CreateBothMakesBoth", createBoth},
		{"CreateBothWritesNeitherIfEitherExists", createBothExists},
		{"CreateBothApartWritesNeither", createBothApart},
		{"CreateBothAgainstCreatesOneWins", createBothRace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			p, ok := s.(journal.Pairer)
			if !ok {
				t.Fatalf("%T is no journal.Pairer", s)
			}
			tc.run(t, s, p)
		})
	}
}

// nearID is the first id key of FS1 from n on that Near says is kept with
// k (near: true), or is not (false); ok false if none of 4096 is.
func nearID(p journal.Pairer, k journal.Key, n int, near bool) (journal.Key, bool) {
	test := p.Near(k)
	for i := n; i < n+4096; i++ {
		if id := id(FS1, i); test == nil || test(id) == near {
			return id, test != nil || near
		}
	}
	return journal.Key{}, false
}

func pairOf(t *testing.T, p journal.Pairer, name string, n int) (journal.Entry, journal.Entry) {
	t.Helper()
	a := journal.Entry{Key: vol(FS1, name), Value: value("record of " + name), Index: "fsap-" + name}
	k, ok := nearID(p, a.Key, n, true)
	if !ok {
		t.Fatalf("no id of 4096 kept with %s", a.Key)
	}
	return a, journal.Entry{Key: k, Value: []byte(name)}
}

// Both entries are made at one version, each as Create would answer it,
// and Get answers them.
func createBoth(t *testing.T, s journal.Store, p journal.Pairer) {
	a, b := pairOf(t, p, "pvc-1", 50000)
	ga, gb, err := p.CreateBoth(t.Context(), a, b)
	if err != nil {
		t.Fatalf("CreateBoth: %v", err)
	}
	for _, c := range []struct{ got, want journal.Entry }{{ga, a}, {gb, b}} {
		if c.got.Key != c.want.Key || string(c.got.Value) != string(c.want.Value) || c.got.Index != c.want.Index || c.got.Version == "" {
			t.Fatalf("CreateBoth answered %s for %s", show(c.got), show(c.want))
		}
		expect(t, s, c.got)
	}
}

// Either entry existing, CreateBoth is ErrExists and writes neither.
func createBothExists(t *testing.T, s journal.Store, p journal.Pairer) {
	for i, first := range []string{"record", "id"} {
		a, b := pairOf(t, p, "pvc-"+strconv.Itoa(i), 50000+5000*i)
		kept := a
		if first == "id" {
			kept = b
		}
		made := mustCreate(t, s, journal.Entry{Key: kept.Key, Value: value("first")})
		_, _, err := p.CreateBoth(t.Context(), a, b)
		if !errors.Is(err, journal.ErrExists) {
			t.Fatalf("CreateBoth with the %s made: %v, want ErrExists", first, err)
		}
		if errors.Is(err, journal.ErrUnavailable) {
			t.Fatalf("CreateBoth with the %s made: %v, want a definitive ErrExists", first, err)
		}
		expect(t, s, made)
		other := b.Key
		if first == "id" {
			other = a.Key
		}
		expectMissing(t, s, other)
	}
}

// Keys Near says are apart: ErrApart, and neither is written. A store
// that keeps every two keys together (Near nil) has none.
func createBothApart(t *testing.T, s journal.Store, p journal.Pairer) {
	a := journal.Entry{Key: vol(FS1, "pvc-1"), Value: value("record")}
	k, ok := nearID(p, a.Key, 50000, false)
	if !ok {
		t.Skip("every two keys are kept together")
	}
	_, _, err := p.CreateBoth(t.Context(), a, journal.Entry{Key: k, Value: []byte("pvc-1")})
	if !errors.Is(err, journal.ErrApart) {
		t.Fatalf("CreateBoth of keys apart: %v, want ErrApart", err)
	}
	definitive(t, "CreateBoth apart", err)
	expectMissing(t, s, a.Key)
	expectMissing(t, s, k)
}

// A CreateBoth and Creates of its id at once: exactly one makes the id,
// and the record exists only if CreateBoth did.
func createBothRace(t *testing.T, s journal.Store, p journal.Pairer) {
	for round := range 3 {
		a, b := pairOf(t, p, "pvc-"+strconv.Itoa(round), 50000+5000*round)
		rs := race(Contenders, func(i int) result {
			if i == 0 {
				_, e, err := p.CreateBoth(t.Context(), a, b)
				return result{e, err}
			}
			e, err := s.Create(t.Context(), journal.Entry{Key: b.Key, Value: value("contender " + strconv.Itoa(i))})
			return result{e, err}
		})
		won := 0
		for _, r := range rs {
			if r.err == nil {
				won++
			} else if !errors.Is(r.err, journal.ErrExists) {
				t.Fatalf("%s: %v, want success or ErrExists", b.Key, r.err)
			}
		}
		if won != 1 {
			t.Fatalf("%s: %d writers made it, want 1", b.Key, won)
		}
		if rs[0].err == nil {
			expect(t, s, rs[0].e)
			continue
		}
		expectMissing(t, s, a.Key)
	}
}

// Paired is a store over Memory that is a journal.Pairer, for tests of
// what the journal does with pairs: every call holds one lock, so that
// CreateBoth is atomic. Apart, when set, says which two keys are not kept
// together (nil: every two are).
type Paired struct {
	mu sync.Mutex
	*journal.Memory
	Apart func(a, b journal.Key) bool
}

func (p *Paired) Get(ctx context.Context, k journal.Key) (journal.Entry, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Memory.Get(ctx, k)
}

func (p *Paired) Create(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Memory.Create(ctx, e)
}

func (p *Paired) Update(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Memory.Update(ctx, e)
}

func (p *Paired) Delete(ctx context.Context, e journal.Entry) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Memory.Delete(ctx, e)
}

func (p *Paired) List(ctx context.Context, kind journal.Kind, fs, index string, fn func([]journal.Entry) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Memory.List(ctx, kind, fs, index, fn)
}

func (p *Paired) Near(k journal.Key) func(journal.Key) bool {
	if p.Apart == nil {
		return nil
	}
	return func(k2 journal.Key) bool { return !p.Apart(k, k2) }
}

func (p *Paired) CreateBoth(ctx context.Context, a, b journal.Entry) (journal.Entry, journal.Entry, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Apart != nil && p.Apart(a.Key, b.Key) {
		return journal.Entry{}, journal.Entry{}, fmt.Errorf("%w: %s, %s", journal.ErrApart, a.Key, b.Key)
	}
	for _, e := range []journal.Entry{a, b} {
		if _, err := p.Memory.Get(ctx, e.Key); !errors.Is(err, journal.ErrNotFound) {
			if err == nil {
				err = fmt.Errorf("%w: %s", journal.ErrExists, e.Key)
			}
			return journal.Entry{}, journal.Entry{}, err
		}
	}
	ga, err := p.Memory.Create(ctx, a)
	if err != nil {
		return journal.Entry{}, journal.Entry{}, err
	}
	gb, err := p.Memory.Create(ctx, b)
	return ga, gb, err
}
