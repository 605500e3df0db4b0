package kube

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	coordinationv1api "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// The record in Leases (LeaseJournalStore): entries sharded by a hash of
// their key into Lease objects that split as they fill (extendible
// hashing), each entry an annotation.
const (
	// RootShards is the number of shards a record starts with: the Leases
	// of depth rootDepth. Few, so that concurrent operations share writes.
	RootShards = 1 << rootDepth
	rootDepth  = 3
	// maxDepth bounds splitting (2^24 shards).
	maxDepth = 24
	// SplitBytes is the size of a shard's entries over which it splits in
	// two: what one write of a shard sends is bounded by about this, however
	// large the record grows.
	SplitBytes = 64 << 10
	// annotationEntries holds a shard's entries: a JSON object whose keys
	// are the entries' hashes (32 hex digits of sha256(kind NUL fs NUL
	// name)). One annotation, not one an entry: the API server tracks
	// every annotation key in managedFields and validates each, on every
	// write.
	annotationEntries = "efs.csi.aws.com/journal-entries"
	// Annotations of a shard: the owner (the driver's name, unhashed), the
	// shard's place ("depth/prefix"), the epoch (random, drawn when the
	// Lease is made) and the sequence number of its last write. An entry's
	// version is "<epoch>.<seq>" of the write that last wrote it: unique
	// within a Lease's life (seq only grows) and across lives (a new epoch);
	// an entry moved by a split keeps its version.
	annotationLeaseOwner = "efs.csi.aws.com/journal-owner"
	annotationLeaseShard = "efs.csi.aws.com/journal-shard"
	annotationLeaseEpoch = "efs.csi.aws.com/journal-epoch"
	annotationLeaseSeq   = "efs.csi.aws.com/journal-seq"
	// annotationLeaseSplit is "frozen" on a shard being split (no write
	// but the split's own) and "done" on one whose entries are in its two
	// children (depth+1, prefix*2 and prefix*2+1), which are written from
	// then on; annotationLeaseFrom on a child names the frozen parent it
	// was made from ("name@resourceVersion").
	annotationLeaseSplit = "efs.csi.aws.com/journal-split"
	annotationLeaseFrom  = "efs.csi.aws.com/journal-from"
	splitFrozen          = "frozen"
	splitDone            = "done"
	// MaxLeaseShardBytes is what a shard's entries may take: the API
	// server refuses an object whose annotations (keys and values) exceed
	// 256 KiB; 4 KiB are left for the shard's own annotations.
	MaxLeaseShardBytes = 256<<10 - 4<<10
	// leaseListPage is the Leases one list request answers: at most about
	// 1 MiB (split shards hold at most about SplitBytes each).
	leaseListPage = 16
	// leaseCallTimeout bounds one request of a commit, which no caller's
	// context bounds (it serves many).
	leaseCallTimeout = 30 * time.Second
	// LeaseCommitsInFlight is how many shards' commits run at once; the
	// others' queues fill meanwhile. A request costs both ends about the
	// same whatever it carries (the connection and TLS, the protobuf
	// envelope, the API server's handling: BenchmarkLeaseRecordPairs, 0.2
	// ms of its 0.24 ms a request over HTTP/2), so fewer, fuller requests
	// cost less: with one
	// commit a shard and none across them, a storm's 8 root shards sent 8
	// requests at once of 3 operations each (docs/record.md, "Commits in
	// flight").
	LeaseCommitsInFlight = 2
)

// Journal client rate defaults (--journal-kube-api-qps, -burst): the
// journal's own budget, apart from the collector's reads. Each request
// carries every operation queued on its shard meanwhile (group commit), so
// a busier controller sends fuller requests, not more of them.
const (
	DefaultJournalQPS   = 300
	DefaultJournalBurst = 600
)

// LeaseJournalStore is the journal's store in Leases (coordination.k8s.io/v1)
// of namespace, shared by every replica: what upstream's RBAC grants the
// controller (leases: get, list, watch, create, update, delete), where
// ConfigMaps are only get.
//
// Layout: Leases efs-csi-journal-<8 hex digits of sha256(owner)>-<depth>-
// <prefix>, labelled LabelJournalOwner: RootShards at first, each split in
// two once its entries pass SplitBytes; an entry lives in the shard whose
// prefix its hash (sha256(kind NUL fs NUL name)) starts with, in the JSON
// object of the shard's annotation efs.csi.aws.com/journal-entries, under
// 32 hex digits of that hash: a JSON header (kind, file system, name,
// index, version) and, after a newline, the value (base64 when it is not
// UTF-8).
//
// Writes are group commits: every operation on a shard waits in the
// shard's queue; one committer per shard takes all that are queued, applies
// them in order to the shard as last read or written (each checked against
// its entry's own version: the per-key compare-and-swap), and writes the
// Lease once, with its resourceVersion as precondition. A conflict (another
// replica wrote the shard) reads it again and applies the batch again. So
// the operations of a batch all take effect at the write, or none does.
//
// Reads (Get) queue too: a batch with a write answers them from the state
// it wrote; a batch of reads is answered by one quorum GET of the Lease,
// started after each of them was queued. Both are linearizable, and
// concurrent reads of one shard share one request. List is a quorum list
// of the Leases, in pages.
//
// Limits: a shard's entries take at most MaxLeaseShardBytes; an operation
// that would exceed it fails (definitively) and names the shard.
func (c *Client) LeaseJournalStore(namespace, owner string) journal.Store {
	qps, burst := c.journalRate()
	cv1 := c.journalLeases()
	return &leaseStore{leases: cv1.Leases(namespace), writer: newLeaseWriter(cv1.RESTClient(), namespace), ns: namespace, owner: owner,
		ownerLabel: labelValueOf(owner), page: pageSize, ownerHash: ownerHash(owner), log: c.logger(),
		limiter: flowcontrol.NewTokenBucketRateLimiter(qps, burst), shards: map[shardID]*leaseShard{},
		committing: make(chan struct{}, LeaseCommitsInFlight)}
}

// LeaseShardName is the Lease of the shard of owner's record at depth
// and prefix (the top depth bits of an entry's hash).
func LeaseShardName(owner string, depth int, prefix uint64) string {
	return fmt.Sprintf("efs-csi-journal-%s-%d-%x", ownerHash(owner), depth, prefix)
}

func ownerHash(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:4])
}

// LeaseJournalStats are a Lease store's requests so far, for benchmarks.
type LeaseJournalStats struct {
	Gets, Lists, Creates, Updates int64 // requests sent
	Conflicts                     int64 // writes refused for a changed resourceVersion
	Splits                        int64 // shards this store split
	Operations                    int64 // Store calls answered through the queues
	BytesWritten                  int64 // annotation bytes of the Leases written
	// WaitedToCommit counts the commits that waited for others to end
	// (LeaseCommitsInFlight).
	WaitedToCommit int64
}

// LeaseJournalStatsOf returns the counters of a store LeaseJournalStore
// made (ok false for another store).
func LeaseJournalStatsOf(s journal.Store) (LeaseJournalStats, bool) {
	ls, ok := s.(*leaseStore)
	if !ok {
		return LeaseJournalStats{}, false
	}
	return LeaseJournalStats{Gets: ls.stats.gets.Load(), Lists: ls.stats.lists.Load(), Creates: ls.stats.creates.Load(),
		Updates: ls.stats.updates.Load(), Conflicts: ls.stats.conflicts.Load(), Operations: ls.stats.ops.Load(),
		BytesWritten: ls.stats.bytes.Load(), Splits: ls.stats.splits.Load(), WaitedToCommit: ls.stats.waitedToCommit.Load()}, true
}

type leaseStore struct {
	leases     coordinationv1.LeaseInterface
	writer     leaseWriter // the same client's, for writes (writeShard)
	ns, owner  string
	ownerLabel string
	ownerHash  string
	page       int64
	limiter    flowcontrol.RateLimiter
	// committing holds a token for each commit under way, at most
	// LeaseCommitsInFlight (commitLoop).
	committing chan struct{}
	log        *slog.Logger // damage to the record (leasedamage.go)
	mu         sync.Mutex
	shards     map[shardID]*leaseShard
	stats      struct {
		gets, lists, creates, updates, conflicts, ops, bytes, splits, waitedToCommit atomic.Int64
	}
}

type shardID struct {
	depth  int
	prefix uint64
}

// shard is the shard at id, made on first use.
func (s *leaseStore) shard(id shardID) *leaseShard {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.shards[id]
	if sh == nil {
		sh = &leaseShard{id: id, name: fmt.Sprintf("efs-csi-journal-%s-%d-%x", s.ownerHash, id.depth, id.prefix)}
		s.shards[id] = sh
	}
	return sh
}

// leaseShard is one Lease: its queue and what this process last knew of it.
type leaseShard struct {
	name string
	id   shardID

	mu      sync.Mutex
	queue   []*leaseOp
	running bool // a committer is draining queue
	// known: cur is the Lease as last read or written (nil: there was
	// none). A write whose outcome is unknown forgets it.
	known bool
	cur   *coordinationv1api.Lease
	// entries: cur's entries, parsed once (nil: not yet). Shared, never
	// changed: apply changes a copy.
	entries map[string]string
	// seen: the Lease as last read or written, kept when cur is forgotten
	// (nil: none, or known absent), and its entries (nil: not parsed yet):
	// what a read is judged against for damage (leasedamage.go).
	seen        *coordinationv1api.Lease
	seenEntries map[string]string
	// seenN counts the changes of seen: a GET answered "not found" is
	// judged only if seen did not change since it was sent (a 404 carries
	// no resourceVersion to order it by).
	seenN uint64
	// restore: the entries damage lost (by hash key, as stored), which
	// the next write creates again, and the state they are restored from.
	restore     map[string]string
	restoreFrom metav1.ObjectMeta
	// frags: the entries as the shard's annotation holds them (fragment),
	// by hash key, so that a write escapes only the entries it changes,
	// not the whole shard. Only the shard's committer (running) uses it.
	frags map[string]frag
}

// frag is an entry as its shard's annotation holds it: enc is its key and
// value raw as JSON strings with a colon between, as json.Marshal of the
// entries writes them.
type frag struct{ raw, enc string }

// fragment is the entry k holding raw as the annotation holds it. It is
// kept for the next write of the shard while the entry holds raw.
func (sh *leaseShard) fragment(k, raw string) string {
	if f, ok := sh.frags[k]; ok && f.raw == raw {
		return f.enc
	}
	if sh.frags == nil {
		sh.frags = map[string]frag{}
	}
	kb, _ := json.Marshal(k) // strings only: cannot fail
	vb, _ := json.Marshal(raw)
	enc := string(kb) + ":" + string(vb)
	sh.frags[k] = frag{raw: raw, enc: enc}
	return enc
}

// setEntries is setEntries(ann, entries) with the entries' fragments
// kept from the shard's earlier writes: the same bytes (json.Marshal of a
// map sorts its keys), with only the entries changed since escaped anew.
// Fragments of entries no longer held are dropped.
func (sh *leaseShard) setEntries(ann, entries map[string]string) {
	for k := range sh.frags {
		if _, ok := entries[k]; !ok {
			delete(sh.frags, k)
		}
	}
	if len(entries) == 0 {
		delete(ann, annotationEntries)
		return
	}
	keys := slices.Sorted(maps.Keys(entries))
	n := len(keys) + 1 // the braces and the commas between
	for _, k := range keys {
		n += len(sh.fragment(k, entries[k]))
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(sh.frags[k].enc)
	}
	b.WriteByte('}')
	ann[annotationEntries] = b.String()
}

// parsed is the entries of cur, which the caller read from sh under sh.mu,
// parsed once per Lease this process knows.
func (sh *leaseShard) parsed(cur *coordinationv1api.Lease) (map[string]string, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if cur == nil || cur != sh.cur {
		return entriesOf(cur)
	}
	if sh.entries == nil {
		es, err := entriesOf(cur)
		if err != nil {
			return nil, err
		}
		sh.entries = es
	}
	return sh.entries, nil
}

type opKind int

const (
	opGet opKind = iota
	opCreate
	opUpdate
	opDelete
	// opCreateBoth creates e and both.e in one write (CreateBoth).
	opCreateBoth
)

type leaseOp struct {
	kind      opKind
	e         journal.Entry
	ann       string   // the entry's annotation
	bits      uint64   // the entry's hash, whose top bits pick its shard
	both      *leaseOp // opCreateBoth: the second entry (its e, ann, bits)
	done      chan leaseResult
	abandoned atomic.Bool // its caller is gone: skip it if not yet taken
}

type leaseResult struct {
	e, both journal.Entry // both: opCreateBoth's second entry
	err     error
}

// PageSize is the most entries one call of List's fn gets.
func (s *leaseStore) PageSize() int { return int(s.page) }

// entryAnnotation is the key of k in its shard's entries and the hash
// bits that place it.
func entryAnnotation(k journal.Key) (string, uint64) {
	h := sha256.New()
	h.Write([]byte(k.Kind))
	h.Write([]byte{0})
	h.Write([]byte(k.FileSystem))
	h.Write([]byte{0})
	h.Write([]byte(k.Name))
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:16]), binary.BigEndian.Uint64(sum[16:24])
}

func prefixOf(bits uint64, depth int) uint64 { return bits >> (64 - depth) }

// entriesOf is the entries l holds (none for nil), by hash key.
func entriesOf(l *coordinationv1api.Lease) (map[string]string, error) {
	entries := map[string]string{}
	if l == nil || l.Annotations[annotationEntries] == "" {
		return entries, nil
	}
	if err := json.Unmarshal([]byte(l.Annotations[annotationEntries]), &entries); err != nil {
		return nil, fmt.Errorf("kube: journal: Lease %s/%s: its entries are not a JSON object: %w", l.Namespace, l.Name, err)
	}
	return entries, nil
}

// setEntries stores entries in ann (drops the annotation when none).
func setEntries(ann, entries map[string]string) {
	if len(entries) == 0 {
		delete(ann, annotationEntries)
		return
	}
	b, _ := json.Marshal(entries) // strings only: cannot fail
	ann[annotationEntries] = string(b)
}

func splitState(l *coordinationv1api.Lease) string {
	if l == nil {
		return ""
	}
	return l.Annotations[annotationLeaseSplit]
}

// entryHeader is the first line of an entry's annotation. A name or value
// that is not UTF-8 (the API keeps strings only) is stored in base64.
type entryHeader struct {
	Kind       string `json:"k"`
	FileSystem string `json:"f"`
	Name       string `json:"n,omitempty"`
	NameB64    bool   `json:"nb,omitempty"`
	Index      string `json:"i,omitempty"`
	Version    string `json:"v"`
	ValueB64   bool   `json:"vb,omitempty"`
}

func encodeEntry(e journal.Entry) string {
	h := entryHeader{Kind: string(e.Key.Kind), FileSystem: e.Key.FileSystem, Name: e.Key.Name, Index: e.Index, Version: e.Version}
	if !utf8.ValidString(h.Name) {
		h.Name, h.NameB64 = base64.StdEncoding.EncodeToString([]byte(h.Name)), true
	}
	v := string(e.Value)
	if !utf8.Valid(e.Value) {
		v, h.ValueB64 = base64.StdEncoding.EncodeToString(e.Value), true
	}
	b, ok := appendHeader(make([]byte, 0, 128+len(v)), &h)
	if !ok {
		b, _ = json.Marshal(&h) // strings only: cannot fail
	}
	return string(append(append(b, '\n'), v...))
}

func decodeEntry(s string) (journal.Entry, error) {
	head, v, ok := strings.Cut(s, "\n")
	if !ok {
		return journal.Entry{}, errors.New("no header line")
	}
	var h entryHeader
	if err := parseHeader(head, &h); err != nil {
		return journal.Entry{}, err
	}
	if h.NameB64 {
		b, err := base64.StdEncoding.DecodeString(h.Name)
		if err != nil {
			return journal.Entry{}, err
		}
		h.Name = string(b)
	}
	value := []byte(v)
	if h.ValueB64 {
		var err error
		if value, err = base64.StdEncoding.DecodeString(v); err != nil {
			return journal.Entry{}, err
		}
	}
	return journal.Entry{Key: journal.Key{Kind: journal.Kind(h.Kind), FileSystem: h.FileSystem, Name: h.Name},
		Value: value, Index: h.Index, Version: h.Version}, nil
}

func (s *leaseStore) Get(ctx context.Context, k journal.Key) (journal.Entry, error) {
	return s.do(ctx, opGet, journal.Entry{Key: k})
}

func (s *leaseStore) Create(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	return s.do(ctx, opCreate, e)
}

func (s *leaseStore) Update(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	return s.do(ctx, opUpdate, e)
}

func (s *leaseStore) Delete(ctx context.Context, e journal.Entry) error {
	_, err := s.do(ctx, opDelete, e)
	return err
}

// CreateBoth creates a and b in one write of their shard (journal.Pairer):
// ErrApart if b's shard is not a's when the batch is applied.
func (s *leaseStore) CreateBoth(ctx context.Context, a, b journal.Entry) (journal.Entry, journal.Entry, error) {
	ann, bits := entryAnnotation(b.Key)
	r, err := s.send(ctx, &leaseOp{kind: opCreateBoth, e: a, both: &leaseOp{e: b, ann: ann, bits: bits}})
	return r.e, r.both, err
}

// Near is journal.Pairer's: whether k2 is in k's shard as this process
// knows the layout (k's leaf: the shard's prefix of k2's hash is the
// leaf's, so the same splits lead to it).
func (s *leaseStore) Near(k journal.Key) func(journal.Key) bool {
	_, bits := entryAnnotation(k)
	sh := s.leaf(bits)
	id := sh.id
	sh.mu.Unlock()
	return func(k2 journal.Key) bool {
		_, bits2 := entryAnnotation(k2)
		return prefixOf(bits2, id.depth) == id.prefix
	}
}

// do is send of one operation on e.
func (s *leaseStore) do(ctx context.Context, kind opKind, e journal.Entry) (journal.Entry, error) {
	r, err := s.send(ctx, &leaseOp{kind: kind, e: e})
	return r.e, err
}

// send queues op on its shard and waits for its answer. A caller whose
// context ends first gets ErrUnavailable: its operation may still be in a
// write under way.
func (s *leaseStore) send(ctx context.Context, op *leaseOp) (leaseResult, error) {
	if s.ns == "" {
		return leaseResult{}, errors.New("kube: journal: no namespace for the journal's Leases")
	}
	if err := ctx.Err(); err != nil {
		return leaseResult{}, fmt.Errorf("%w: %s: %w", journal.ErrUnavailable, op.e.Key, err)
	}
	op.ann, op.bits = entryAnnotation(op.e.Key)
	op.done = make(chan leaseResult, 1)
	s.route(op)
	select {
	case r := <-op.done:
		return r, r.err
	case <-ctx.Done():
		op.abandoned.Store(true)
		return leaseResult{}, fmt.Errorf("%w: %s: %w", journal.ErrUnavailable, op.e.Key, ctx.Err())
	}
}

// route queues op on the shard that holds its key: from the root, down
// through the shards known to be split.
func (s *leaseStore) route(op *leaseOp) {
	sh := s.leaf(op.bits)
	defer sh.mu.Unlock()
	sh.queue = append(sh.queue, op)
	if !sh.running {
		sh.running = true
		go s.commitLoop(sh)
	}
}

// leaf is the shard that holds the entries of route bits as far as this
// process knows (from the root down through the shards known to be
// split), returned locked: what the caller does under the lock sees it
// still the leaf.
func (s *leaseStore) leaf(bits uint64) *leaseShard {
	for d := rootDepth; ; d++ {
		sh := s.shard(shardID{d, prefixOf(bits, d)})
		sh.mu.Lock()
		if d < maxDepth && sh.known && splitState(sh.cur) == splitDone {
			sh.mu.Unlock()
			continue
		}
		return sh
	}
}

// commitLoop drains sh's queue, a batch at a time, until it is empty. It
// waits for the rate limiter before it takes a batch, so that what is
// queued meanwhile joins it: above the rate, batches grow instead of
// requests. It takes a token only when something waits: the flags count
// requests, and a token taken for an empty queue would halve the rate of
// one caller's operations in turn
// (TestLeaseStoreTakesATokenPerRequestSent). Then it waits for one of
// the LeaseCommitsInFlight, for the same reason: what queues while other
// shards are written joins the batch
// (TestLeaseStoreCommitsAtMostTwoShardsAtOnce). A commit never waits for
// another shard's (a split writes its children itself), so every commit
// under way ends and lets the next one go.
func (s *leaseStore) commitLoop(sh *leaseShard) {
	for {
		if !s.waiting(sh) {
			return
		}
		_ = s.limiter.Wait(context.Background()) // no deadline: never fails
		select {
		case s.committing <- struct{}{}:
		default:
			s.stats.waitedToCommit.Add(1)
			s.committing <- struct{}{}
		}
		sh.mu.Lock()
		var batch []*leaseOp
		for _, op := range sh.queue {
			if !op.abandoned.Load() {
				batch = append(batch, op)
			}
		}
		sh.queue = nil
		if len(batch) == 0 { // every caller went while this waited
			sh.running = false
			sh.mu.Unlock()
			<-s.committing
			return
		}
		known, cur := sh.known, sh.cur
		sh.mu.Unlock()
		s.stats.ops.Add(int64(len(batch)))
		s.commit(sh, batch, known, cur)
		<-s.committing
	}
}

// waiting says whether an operation is queued on sh whose caller waits;
// if none is, the committer stops (sh.running false) and the queue is
// emptied of abandoned operations.
func (s *leaseStore) waiting(sh *leaseShard) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, op := range sh.queue {
		if !op.abandoned.Load() {
			return true
		}
	}
	sh.queue, sh.running = nil, false
	return false
}

// commit answers every operation of batch, starting from cur (the shard as
// last known, if known). The limiter's token for the first request is
// already taken.
func (s *leaseStore) commit(sh *leaseShard, batch []*leaseOp, known bool, cur *coordinationv1api.Lease) {
	token := true
	wait := func() {
		if !token {
			_ = s.limiter.Wait(context.Background())
		}
		token = false
	}
	// fresh: cur was read by a request sent after every op of batch was
	// queued, so it answers reads and failed checks linearizably.
	fresh := false
	for {
		if !known {
			wait()
			sh.mu.Lock()
			sent := sh.seenN
			sh.mu.Unlock()
			l, err := s.getShard(sh)
			if err != nil {
				s.answerAll(batch, err)
				return
			}
			entries, _ := entriesOf(l) // unparsed: apply answers why
			if l != nil || !s.seenSince(sh, sent) {
				s.observe(sh, l, entries)
			}
			known, cur, fresh = true, l, true
		}
		switch splitState(cur) {
		case splitDone:
			// Its entries are in its children now: route the batch there.
			sh.frags = nil // never written again
			s.passRestore(sh)
			for _, op := range batch {
				s.route(op)
			}
			return
		case splitFrozen:
			// A split under way (this process's or another's, which may have
			// died): finish it, then route the batch to the children.
			wait()
			if err := s.finishSplit(sh, cur); err != nil {
				s.answerAll(batch, err)
				return
			}
			known = false
			continue
		}
		// What damage lost is created again first (leasedamage.go).
		restoring, from := s.restoreOps(sh)
		results, next, nextEntries, size, changed := s.apply(sh, cur, append(restoring, batch...), from != "")
		results, restoredResults := results[len(restoring):], results[:len(restoring)]
		if next != nil && from != "" {
			next.Annotations[annotationLeaseRestored] = from
		}
		if !changed {
			if fresh {
				s.restored(sh, restoring, restoredResults, false)
				s.answer(batch, results)
				return
			}
			known = false // read it now: what it says may be stale
			continue
		}
		if size > MaxLeaseShardBytes {
			// apply drops what does not fit, one op at a time; a batch that
			// still does not fit cannot be written.
			s.answerAll(batch, fmt.Errorf("kube: journal: Lease %s/%s would hold %d bytes of entries, over %d", s.ns, sh.name, size, MaxLeaseShardBytes))
			return
		}
		wait()
		written, err := s.writeShard(sh, cur, next)
		switch {
		case err == nil:
			s.rememberParsed(sh, true, written, nextEntries)
			s.restored(sh, restoring, restoredResults, true)
			s.answer(batch, results)
			if size > SplitBytes && sh.id.depth < maxDepth {
				// After answering (the batch is written; a split is the
				// shard's business), before the next batch of the shard,
				// which then goes to the children.
				wait()
				s.split(sh, written)
			}
			return
		case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err), apierrors.IsNotFound(err) && cur != nil:
			s.stats.conflicts.Add(1)
			known = false // another replica wrote it: read it and apply again
		default:
			// The outcome is unknown (or the write was refused): forget
			// the shard, so that the next batch reads it first.
			s.remember(sh, false, nil)
			s.answerAll(batch, s.failed("write", sh.name, err))
			return
		}
	}
}

func (s *leaseStore) remember(sh *leaseShard, known bool, l *coordinationv1api.Lease) {
	s.rememberParsed(sh, known, l, nil)
}

// rememberParsed is remember with l's entries already parsed (nil: not).
func (s *leaseStore) rememberParsed(sh *leaseShard, known bool, l *coordinationv1api.Lease, entries map[string]string) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !known || !sh.known || sh.cur == nil || l == nil || newer(l.ResourceVersion, sh.cur.ResourceVersion) {
		sh.known, sh.cur, sh.entries = known, l, entries
		if l != nil {
			sh.seen, sh.seenEntries = l, entries
			sh.seenN++
		}
	}
}

// Hint is the entry at k in the shard as this process last read or wrote
// it (journal.Hinter), without a request: false when it knows no shard
// holding k, or the shard holds no entry at k (absence is never hinted).
func (s *leaseStore) Hint(k journal.Key) (journal.Entry, bool) {
	ann, bits := entryAnnotation(k)
	sh := s.leaf(bits)
	known, cur := sh.known, sh.cur
	sh.mu.Unlock()
	if !known || cur == nil {
		return journal.Entry{}, false
	}
	entries, err := sh.parsed(cur)
	if err != nil {
		return journal.Entry{}, false
	}
	raw, ok := entries[ann]
	if !ok {
		return journal.Entry{}, false
	}
	e, err := decodeEntry(raw)
	if err != nil || e.Key != k {
		return journal.Entry{}, false
	}
	return e, true
}

// newer reports whether resourceVersion a is later than b. They are etcd's
// revisions (integers); if either is not, a is taken as later (a stale
// Lease only costs a conflict: writes compare resourceVersions).
func newer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA != nil || errB != nil || x >= y
}

// apply applies batch to cur (nil: no Lease yet) in order, each op checked
// against its entry's version. It returns each op's answer (versions of
// writes still to be set), the Lease to write if any op changed it (or if
// force), and the size its entries would take.
func (s *leaseStore) apply(sh *leaseShard, cur *coordinationv1api.Lease, batch []*leaseOp, force bool) ([]leaseResult, *coordinationv1api.Lease, map[string]string, int, bool) {
	epoch, seq := "", uint64(0)
	results := make([]leaseResult, len(batch))
	next, err := sh.parsed(cur)
	next = maps.Clone(next)
	if err != nil {
		for i := range results {
			results[i].err = err
		}
		return results, nil, nil, 0, false
	}
	size := 2
	if cur != nil {
		epoch = cur.Annotations[annotationLeaseEpoch]
		seq, _ = strconv.ParseUint(cur.Annotations[annotationLeaseSeq], 10, 64)
		size = max(len(cur.Annotations[annotationEntries]), 2)
	}
	if epoch == "" {
		epoch = rand.Text()[:8]
	}
	version := epoch + "." + strconv.FormatUint(seq+1, 10)
	changed := false
	for i, op := range batch {
		if op.kind == opCreateBoth {
			var grew bool
			results[i], size, grew = s.applyBoth(sh, next, op, version, size)
			changed = changed || grew
			continue
		}
		var found journal.Entry
		raw, exists := next[op.ann]
		if exists {
			var err error
			if found, err = decodeEntry(raw); err != nil || found.Key != op.e.Key {
				results[i].err = fmt.Errorf("kube: journal: %s: entry %s of Lease %s/%s holds another key (a hash collision?)", op.e.Key, op.ann, s.ns, sh.name)
				continue
			}
		}
		switch op.kind {
		case opGet:
			if !exists {
				results[i].err = fmt.Errorf("%w: %s", journal.ErrNotFound, op.e.Key)
				continue
			}
			results[i].e = found
			continue
		case opCreate:
			if exists {
				results[i] = leaseResult{e: found, err: fmt.Errorf("%w: %s", journal.ErrExists, op.e.Key)}
				continue
			}
		case opUpdate:
			if !exists {
				results[i].err = fmt.Errorf("%w: %s", journal.ErrNotFound, op.e.Key)
				continue
			}
			if op.e.Version != found.Version {
				results[i].err = fmt.Errorf("%w: %s: version %q, now %q", journal.ErrConflict, op.e.Key, op.e.Version, found.Version)
				continue
			}
		case opDelete:
			if !exists {
				continue // gone already
			}
			if op.e.Version != found.Version {
				results[i].err = fmt.Errorf("%w: %s: version %q, now %q", journal.ErrConflict, op.e.Key, op.e.Version, found.Version)
				continue
			}
			size -= len(sh.fragment(op.ann, raw)) + 1
			delete(next, op.ann)
			changed = true
			continue
		}
		e := journal.Entry{Key: op.e.Key, Value: op.e.Value, Index: op.e.Index, Version: version}
		v := encodeEntry(e)
		old := 0
		if exists {
			old = len(sh.fragment(op.ann, raw)) + 1
		}
		adds := len(sh.fragment(op.ann, v)) + 1 // and a comma
		grown := size + adds - old
		if grown > MaxLeaseShardBytes {
			results[i].err = fmt.Errorf("kube: journal: %s: Lease %s/%s holds %d bytes of entries: no room for %d more (at most %d; docs/design.md, The record)",
				op.e.Key, s.ns, sh.name, size, adds, MaxLeaseShardBytes)
			continue
		}
		size = grown
		next[op.ann] = v
		results[i].e = e
		changed = true
	}
	if !changed && !force {
		return results, nil, nil, size, false
	}
	ann := map[string]string{}
	if cur != nil {
		ann = maps.Clone(cur.Annotations)
	}
	sh.setEntries(ann, next)
	ann[annotationLeaseOwner] = s.owner
	ann[annotationLeaseShard] = fmt.Sprintf("%d/%x", sh.id.depth, sh.id.prefix)
	ann[annotationLeaseEpoch] = epoch
	ann[annotationLeaseSeq] = strconv.FormatUint(seq+1, 10)
	l := &coordinationv1api.Lease{ObjectMeta: metav1.ObjectMeta{Name: sh.name, Namespace: s.ns,
		Labels: map[string]string{LabelJournalOwner: s.ownerLabel}, Annotations: ann}}
	if cur != nil {
		l.ResourceVersion = cur.ResourceVersion
		l.Spec = cur.Spec
		l.Labels = maps.Clone(cur.Labels)
		if l.Labels == nil {
			l.Labels = map[string]string{}
		}
		l.Labels[LabelJournalOwner] = s.ownerLabel
	}
	return results, l, next, size, true
}

// applyBoth applies an opCreateBoth to next, the shard's entries of size
// bytes, at version: both entries, or neither (journal.Pairer).
func (s *leaseStore) applyBoth(sh *leaseShard, next map[string]string, op *leaseOp, version string, size int) (leaseResult, int, bool) {
	if prefixOf(op.both.bits, sh.id.depth) != sh.id.prefix {
		return leaseResult{err: fmt.Errorf("%w: %s is not in Lease %s/%s with %s", journal.ErrApart, op.both.e.Key, s.ns, sh.name, op.e.Key)}, size, false
	}
	grown := size
	var made [2]journal.Entry
	var raws [2]string
	for i, o := range []*leaseOp{op, op.both} {
		if raw, exists := next[o.ann]; exists {
			found, err := decodeEntry(raw)
			if err != nil || found.Key != o.e.Key {
				return leaseResult{err: fmt.Errorf("kube: journal: %s: entry %s of Lease %s/%s holds another key (a hash collision?)", o.e.Key, o.ann, s.ns, sh.name)}, size, false
			}
			return leaseResult{err: fmt.Errorf("%w: %s", journal.ErrExists, o.e.Key)}, size, false
		}
		made[i] = journal.Entry{Key: o.e.Key, Value: o.e.Value, Index: o.e.Index, Version: version}
		raws[i] = encodeEntry(made[i])
		grown += len(sh.fragment(o.ann, raws[i])) + 1
	}
	if grown > MaxLeaseShardBytes {
		return leaseResult{err: fmt.Errorf("kube: journal: %s: Lease %s/%s holds %d bytes of entries: no room for %d more (at most %d; docs/design.md, The record)",
			op.e.Key, s.ns, sh.name, size, grown-size, MaxLeaseShardBytes)}, size, false
	}
	next[op.ann], next[op.both.ann] = raws[0], raws[1]
	return leaseResult{e: made[0], both: made[1]}, grown, true
}

func (s *leaseStore) answer(batch []*leaseOp, results []leaseResult) {
	for i, op := range batch {
		op.done <- results[i]
	}
}

func (s *leaseStore) answerAll(batch []*leaseOp, err error) {
	for _, op := range batch {
		op.done <- leaseResult{err: fmt.Errorf("%s: %w", op.e.Key, err)}
	}
}

// getShard reads the shard's Lease (nil: none) from etcd (a quorum read).
func (s *leaseStore) getShard(sh *leaseShard) (*coordinationv1api.Lease, error) {
	ctx, cancel := context.WithTimeout(context.Background(), leaseCallTimeout)
	defer cancel()
	s.stats.gets.Add(1)
	l, err := s.leases.Get(ctx, sh.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, s.failed("get", sh.name, err)
	}
	if err := s.ours(l); err != nil {
		return nil, err
	}
	return l, nil
}

// ours checks that l is a shard of this store's owner.
func (s *leaseStore) ours(l *coordinationv1api.Lease) error {
	if o, ok := l.Annotations[annotationLeaseOwner]; ok && o != s.owner {
		return fmt.Errorf("kube: journal: Lease %s/%s is a shard of %q's record, not %q's", s.ns, l.Name, o, s.owner)
	}
	return nil
}

// writeShard creates the Lease (cur nil) or updates it with cur's
// resourceVersion as precondition.
func (s *leaseStore) writeShard(sh *leaseShard, cur, next *coordinationv1api.Lease) (*coordinationv1api.Lease, error) {
	ctx, cancel := context.WithTimeout(context.Background(), leaseCallTimeout)
	defer cancel()
	n := 0
	for k, v := range next.Annotations {
		n += len(k) + len(v)
	}
	s.stats.bytes.Add(int64(n))
	if cur == nil {
		s.stats.creates.Add(1)
	} else {
		s.stats.updates.Add(1)
	}
	// The request is encoded as the client would (protobuf, the same
	// bytes), into a buffer kept for the next write, and sent as it is
	// (leaseWriter); the answer is read into another and only for its
	// resourceVersion (resourceVersionOf): the rest is what was sent, and
	// decoding a shard's entries back would cost as much as encoding them.
	bufs := writeBuffers.Get().(*leaseWriteBuffers)
	defer writeBuffers.Put(bufs)
	next.TypeMeta = metav1.TypeMeta{APIVersion: coordinationv1api.SchemeGroupVersion.String(), Kind: "Lease"}
	var body oneWrite
	err := leaseSerializer.EncodeWithAllocator(next, &body, &bufs.request)
	next.TypeMeta = metav1.TypeMeta{}
	if err != nil {
		return nil, fmt.Errorf("kube: journal: encode Lease %s/%s: %w", s.ns, next.Name, err)
	}
	if err := s.writer.send(ctx, cur == nil, next.Name, body.b, &bufs.answer); err != nil {
		return nil, err
	}
	next.ResourceVersion, err = resourceVersionOf(bufs.answer.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%w: kube: journal: the answer to the write of Lease %s/%s: %w", journal.ErrUnavailable, s.ns, next.Name, err)
	}
	return next, nil
}

// leaseSerializer encodes a Lease as the client does for protobuf.
var leaseSerializer = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)

// leaseWriteBuffers are a write's request and answer, kept between
// writes (writeBuffers): a shard is sent and answered whole, up to about
// SplitBytes, on every write.
type leaseWriteBuffers struct {
	request runtime.Allocator
	answer  bytes.Buffer
}

var writeBuffers = sync.Pool{New: func() any { return new(leaseWriteBuffers) }}

// oneWrite keeps what is written to it without copying: the serializer
// writes an object in one Write, from its allocator.
type oneWrite struct{ b []byte }

func (w *oneWrite) Write(p []byte) (int, error) {
	if w.b != nil {
		w.b = append(w.b[:len(w.b):len(w.b)], p...)
	} else {
		w.b = p
	}
	return len(p), nil
}

// resourceVersionOf is metadata.resourceVersion of an object as the API
// server answers it, in protobuf (the client asks for it first) or JSON,
// read without decoding the rest.
func resourceVersionOf(body []byte) (string, error) {
	if raw, ok := bytes.CutPrefix(body, protobufMagic); ok {
		return protobufResourceVersion(raw)
	}
	if rv, ok := tableResourceVersion(body); ok {
		return rv, nil
	}
	return jsonResourceVersion(body)
}

// tableStart starts a Table as kube-apiserver (encoding/json) writes the
// answer to a write (writeAccept), up to its resourceVersion's value.
var tableStart = []byte(`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"`)

// tableResourceVersion is the resourceVersion of a Table that starts as
// tableStart, when its digits end in a quote: what jsonResourceVersion
// reads, without decoding JSON token by token.
func tableResourceVersion(body []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(body, tableStart)
	if !ok {
		return "", false
	}
	i := bytes.IndexByte(rest, '"')
	if i <= 0 || bytes.ContainsFunc(rest[:i], func(r rune) bool { return r < '0' || r > '9' }) {
		return "", false
	}
	return string(rest[:i]), true
}

// protobufMagic starts the API server's protobuf envelope
// (k8s.io/apimachinery/pkg/runtime/serializer/protobuf).
var protobufMagic = []byte("k8s\x00")

// protobufResourceVersion reads runtime.Unknown's raw object (field 2),
// its metadata (field 1), and that ObjectMeta's resourceVersion (field 6),
// skipping every other field.
func protobufResourceVersion(b []byte) (string, error) {
	for _, field := range []protowire.Number{2, 1, 6} {
		var found bool
		for len(b) > 0 && !found {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				return "", protowire.ParseError(n)
			}
			b = b[n:]
			if num == field && typ == protowire.BytesType {
				v, n := protowire.ConsumeBytes(b)
				if n < 0 {
					return "", protowire.ParseError(n)
				}
				b, found = v, true
				continue
			}
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return "", protowire.ParseError(n)
			}
			b = b[n:]
		}
		if !found {
			return "", fmt.Errorf("no field %d in the protobuf answer", field)
		}
	}
	if len(b) == 0 {
		return "", errors.New("an empty resourceVersion")
	}
	return string(b), nil
}

// jsonResourceVersion is metadata.resourceVersion of an object in JSON,
// read without decoding what follows it (the API server writes it before
// the annotations).
func jsonResourceVersion(body []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	inObject := func() error {
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return fmt.Errorf("not a JSON object (%v)", err)
		}
		return nil
	}
	if err := inObject(); err != nil {
		return "", err
	}
	for metadata := false; dec.More(); {
		t, err := dec.Token()
		if err != nil {
			return "", err
		}
		switch key, _ := t.(string); {
		case !metadata && key == "metadata":
			if err := inObject(); err != nil {
				return "", err
			}
			metadata = true
		case metadata && key == "resourceVersion":
			var rv string
			if err := dec.Decode(&rv); err != nil || rv == "" {
				return "", fmt.Errorf("resourceVersion %q (%v)", rv, err)
			}
			return rv, nil
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", err
			}
		}
	}
	return "", errors.New("no metadata.resourceVersion")
}

func (s *leaseStore) List(ctx context.Context, kind journal.Kind, fs, index string, fn func([]journal.Entry) error) error {
	if s.ns == "" {
		return errors.New("kube: journal: no namespace for the journal's Leases")
	}
	sel := labels.SelectorFromValidatedSet(labels.Set{LabelJournalOwner: s.ownerLabel}).String()
	opts := metav1.ListOptions{LabelSelector: sel, Limit: leaseListPage}
	// A Lease answered once, an entry listed once: while a shard is
	// frozen, its entries may be in its children too (the same ones:
	// children are written only once the parent is done).
	seen, listed := map[string]bool{}, map[string]bool{}
	restarts, listRV := 0, ""
	page := make([]journal.Entry, 0, s.page)
	flush := func() error {
		if len(page) == 0 {
			return nil
		}
		err := fn(page)
		page = make([]journal.Entry, 0, s.page)
		return err
	}
	for {
		if err := s.limiter.Wait(ctx); err != nil {
			return fmt.Errorf("%w: kube: journal: list Leases in %s: %w", journal.ErrUnavailable, s.ns, err)
		}
		s.stats.lists.Add(1)
		l, err := s.leases.List(ctx, opts)
		if listExpired(err, &opts, &restarts) {
			continue
		}
		if err != nil {
			return s.failed("list", "", err)
		}
		for i := range l.Items {
			lease := &l.Items[i]
			if seen[lease.Name] || !strings.HasPrefix(lease.Name, "efs-csi-journal-"+s.ownerHash+"-") || s.ours(lease) != nil {
				continue
			}
			seen[lease.Name] = true
			entries, err := entriesOf(lease)
			if err != nil {
				continue // not a shard of this store
			}
			s.warm(lease, entries)
			for k, v := range entries {
				e, err := decodeEntry(v)
				if err != nil || e.Key.Kind != kind || fs != "" && e.Key.FileSystem != fs || index != "" && e.Index != index {
					continue
				}
				if a, _ := entryAnnotation(e.Key); a != k || listed[k] {
					continue // not where its key puts it (not an entry of this store), or listed already
				}
				listed[k] = true
				page = append(page, e)
				if len(page) == int(s.page) {
					if err := flush(); err != nil {
						return err
					}
				}
			}
		}
		if opts.Continue == "" {
			listRV = l.ResourceVersion // the first page's: the listing's revision
		}
		if l.Continue == "" {
			if restarts == 0 {
				s.listedAll(listRV, seen)
			}
			return flush()
		}
		opts.Continue = l.Continue
	}
}

// split splits sh, whose entries outgrew SplitBytes, in two: it freezes
// it (a write with its resourceVersion as precondition: no other write
// can then land), makes its children from the frozen entries and marks it
// done (finishSplit). Best effort: a split that fails is left for the next
// commit of the shard, which finishes a frozen one before anything else.
func (s *leaseStore) split(sh *leaseShard, cur *coordinationv1api.Lease) {
	frozen := cur.DeepCopy()
	frozen.Annotations[annotationLeaseSplit] = splitFrozen
	ctx, cancel := context.WithTimeout(context.Background(), leaseCallTimeout)
	defer cancel()
	s.stats.updates.Add(1)
	got, err := s.leases.Update(ctx, frozen, metav1.UpdateOptions{})
	if err != nil {
		s.remember(sh, false, nil)
		return
	}
	s.remember(sh, true, got)
	_ = s.limiter.Wait(context.Background())
	if s.finishSplit(sh, got) == nil {
		s.stats.splits.Add(1)
	}
}

// finishSplit makes the two children of frozen (the Lease of sh, frozen)
// from its entries, unless made already from this frozen state, and marks
// it done. Children are written only once their parent is done, so a
// child that exists with this parent's marker holds exactly its entries
// or later writes, and is left as it is.
func (s *leaseStore) finishSplit(sh *leaseShard, frozen *coordinationv1api.Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), leaseCallTimeout)
	defer cancel()
	from := frozen.Name + "@" + frozen.ResourceVersion
	d := sh.id.depth + 1
	children := [2]*coordinationv1api.Lease{}
	epoch := rand.Text()[:8]
	for i := range children {
		id := shardID{d, sh.id.prefix<<1 | uint64(i)}
		children[i] = &coordinationv1api.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns,
			Name:   s.shard(id).name,
			Labels: map[string]string{LabelJournalOwner: s.ownerLabel},
			Annotations: map[string]string{annotationLeaseOwner: s.owner, annotationLeaseShard: fmt.Sprintf("%d/%x", id.depth, id.prefix),
				annotationLeaseEpoch: epoch, annotationLeaseSeq: "0", annotationLeaseFrom: from}}}
	}
	entries, err := entriesOf(frozen)
	if err != nil {
		return err
	}
	halves := [2]map[string]string{{}, {}}
	for k, v := range entries {
		e, err := decodeEntry(v)
		if err != nil {
			continue // not an entry: dropped
		}
		_, bits := entryAnnotation(e.Key)
		halves[prefixOf(bits, d)&1][k] = v
	}
	for i := range children {
		setEntries(children[i].Annotations, halves[i])
	}
	for i, child := range children {
		s.stats.creates.Add(1)
		made, err := s.leases.Create(ctx, child, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			s.stats.gets.Add(1)
			made, err = s.leases.Get(ctx, child.Name, metav1.GetOptions{})
			if err == nil && made.Annotations[annotationLeaseFrom] != from {
				return fmt.Errorf("kube: journal: Lease %s/%s, a child of %s, was made from %q: not from this split (made by hand?)",
					s.ns, child.Name, from, made.Annotations[annotationLeaseFrom])
			}
		}
		if err != nil {
			return s.failed("create", child.Name, err)
		}
		s.remember(s.shard(shardID{d, sh.id.prefix<<1 | uint64(i)}), true, made)
	}
	done := &coordinationv1api.Lease{ObjectMeta: *frozen.ObjectMeta.DeepCopy(), Spec: frozen.Spec}
	delete(done.Annotations, annotationEntries)
	done.Annotations[annotationLeaseSplit] = splitDone
	s.stats.updates.Add(1)
	got, err := s.leases.Update(ctx, done, metav1.UpdateOptions{})
	switch {
	case err == nil:
		s.remember(sh, true, got)
	case apierrors.IsConflict(err):
		s.remember(sh, false, nil) // another process finished it
	default:
		s.remember(sh, false, nil)
		return s.failed("update", sh.name, err)
	}
	return nil
}

// failed is the error of a request (verb on Lease name, "" for the
// collection) the API server did not serve.
func (s *leaseStore) failed(verb, name string, err error) error {
	what := fmt.Sprintf("kube: journal: %s Lease %s/%s", verb, s.ns, name)
	if name == "" {
		what = fmt.Sprintf("kube: journal: %s Leases in %s", verb, s.ns)
	}
	if verb == "write" {
		verb = "create and update"
	}
	switch {
	case unavailable(err):
		return fmt.Errorf("%w: %s: %w", journal.ErrUnavailable, what, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s: the controller's service account may not %s leases (coordination.k8s.io) in namespace %s: grant them (the chart's Role efs-csi-external-provisioner-leases, or upstream's ClusterRole efs-csi-external-provisioner-role do): %w",
			what, verb, s.ns, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s: the API server did not accept the controller's credentials: %w", what, err)
	case apierrors.IsInvalid(err):
		return fmt.Errorf("%s: the API server refused the shard: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// journalRate is the journal's client-side rate (SetJournalRate).
func (c *Client) journalRate() (float32, int) {
	c.rateMu.Lock()
	defer c.rateMu.Unlock()
	return cmp.Or(c.qps, DefaultJournalQPS), cmp.Or(c.burst, DefaultJournalBurst)
}

// journalCore is CoreV1 for the ConfigMaps store, limited by client-go at
// the journal's rate.
func (c *Client) journalCore() corev1.CoreV1Interface {
	jc := rest.CopyConfig(c.journalConfig)
	qps, burst := c.journalRate()
	jc.QPS, jc.Burst = qps, burst
	cs, err := corev1.NewForConfig(jc)
	if err != nil {
		panic(fmt.Sprintf("kube: a configuration NewForConfig accepted: %v", err)) // validated in NewForConfig
	}
	return cs
}

// journalLeases is CoordinationV1 for the Lease store, which paces itself
// (a batch waits for its token before it is taken): client-go's limiter
// would only delay requests already built.
func (c *Client) journalLeases() coordinationv1.CoordinationV1Interface {
	jc := rest.CopyConfig(c.journalConfig)
	jc.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	// Protobuf: a shard is up to about 64 KiB of annotations holding JSON,
	// which JSON escapes again; protobuf keeps them as bytes and costs both
	// ends less to encode and decode, on every write.
	jc.ContentType = "application/vnd.kubernetes.protobuf"
	jc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	// HTTP/1.1: over HTTP/2, Go's client and server each spawn a goroutine
	// a request and send a body in flow-controlled frames of 16 KiB, and a
	// write sends the whole shard. The store has at most
	// LeaseCommitsInFlight writes under way (and its reads and Lists), so
	// it keeps a few connections, each reused (docs/record.md).
	jc.TLSClientConfig.NextProtos = []string{"http/1.1"}
	cs, err := coordinationv1.NewForConfig(jc)
	if err != nil {
		panic(fmt.Sprintf("kube: a configuration NewForConfig accepted: %v", err))
	}
	return cs
}
