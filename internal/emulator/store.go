package emulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The durable store: one bbolt file, DataDir/emulator.db, one bucket per kind
// of resource, JSON values keyed by ID. Everything is also held in memory
// (state.go); the store is only read at start. Writes go through a group
// committer: concurrent writers share one transaction and one fsync, and a
// lone writer never waits for a batch to fill (bbolt's Batch would add its
// MaxBatchDelay to every sequential request).

const dbFile = "emulator.db"

var (
	bucketFileSystems  = []byte("file-systems")
	bucketAccessPoints = []byte("access-points")
	bucketMountTargets = []byte("mount-targets")
)

// tag is a stored key/value pair; order is kept as given.
type tag struct {
	Key   string `json:"k"`
	Value string `json:"v"`
}

// fileSystemRec, accessPointRec and mountTargetRec are the stored records.
// Seq orders creation; listings follow it and page tokens point into it.
type fileSystemRec struct {
	ID              string    `json:"id"`
	Seq             uint64    `json:"seq"`
	CreationToken   string    `json:"token"`
	Created         time.Time `json:"created"`
	PerformanceMode string    `json:"perfMode"`
	ThroughputMode  string    `json:"tpMode"`
	ProvisionedMiBs *float64  `json:"provisioned,omitempty"`
	Encrypted       bool      `json:"encrypted,omitempty"`
	KmsKeyID        string    `json:"kms,omitempty"`
	AZName          string    `json:"az,omitempty"`
	Tags            []tag     `json:"tags,omitempty"`
	// API is the service the file system belongs to: "" for EFS,
	// svcS3Files for S3 Files. Each API sees only its own resources.
	API service `json:"api,omitempty"`
	// Bucket, Prefix and RoleARN are an S3 Files file system's source.
	Bucket  string `json:"bucket,omitempty"`
	Prefix  string `json:"prefix,omitempty"`
	RoleARN string `json:"role,omitempty"`
	// Owner is the account that owns the file system; "" is DefaultAccount.
	Owner string `json:"owner,omitempty"`
}

type accessPointRec struct {
	ID           string         `json:"id"`
	Seq          uint64         `json:"seq"`
	FileSystemID string         `json:"fs"`
	ClientToken  string         `json:"token"`
	Path         string         `json:"path"`
	CreationInfo *creationInfo  `json:"ci,omitempty"`
	PosixUser    *wirePosixUser `json:"pu,omitempty"`
	Tags         []tag          `json:"tags,omitempty"`
	// Params is the canonical form of the create request's parameters, compared
	// for a lenient ClientToken repeat (later tag changes do not alter it).
	Params  string    `json:"params"`
	Created time.Time `json:"created"`
}

type creationInfo = wireCreationInfo

type mountTargetRec struct {
	ID           string `json:"id"`
	Seq          uint64 `json:"seq"`
	FileSystemID string `json:"fs"`
	SubnetID     string `json:"subnet"`
	IPAddress    string `json:"ip"`
	AZName       string `json:"az"`
	AZID         string `json:"azId"`
}

// store persists records; safe for concurrent use.
type store struct {
	db *bolt.DB

	mu      sync.Mutex
	queue   []*commitReq
	running bool
	closed  bool
}

type commitReq struct {
	fn   func(*bolt.Tx) error
	done chan error
}

// openStore opens DataDir/emulator.db. With noSync commits are not fsynced:
// they survive the emulator's crash (the kernel holds them) but not the
// machine's.
func openStore(dir string, noSync bool) (*store, error) {
	db, err := bolt.Open(filepath.Join(dir, dbFile), 0o600, &bolt.Options{
		Timeout:      time.Second, // another emulator holds the file: fail, do not hang
		FreelistType: bolt.FreelistMapType,
		NoSync:       noSync,
		NoGrowSync:   noSync,
	})
	if err != nil {
		return nil, fmt.Errorf("open state store in %s: %w", dir, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketFileSystems, bucketAccessPoints, bucketMountTargets, bucketAccounts} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("initialise state store: %w", err)
	}
	return &store{db: db}, nil
}

var errStoreClosed = errors.New("state store closed")

// commit runs fn in a write transaction and returns once it is durable. If a
// transaction is already committing, fn joins the next one with every other
// writer that arrives meanwhile (group commit).
func (s *store) commit(fn func(*bolt.Tx) error) error {
	req := &commitReq{fn: fn, done: make(chan error, 1)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errStoreClosed
	}
	s.queue = append(s.queue, req)
	if !s.running {
		s.running = true
		go s.drain()
	}
	s.mu.Unlock()
	return <-req.done
}

// drain commits queued writers batch by batch until the queue is empty.
func (s *store) drain() {
	for {
		s.mu.Lock()
		batch := s.queue
		s.queue = nil
		if len(batch) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()

		errs := make([]error, len(batch))
		err := s.db.Update(func(tx *bolt.Tx) error {
			for i, r := range batch {
				errs[i] = r.fn(tx)
			}
			return nil
		})
		for i, r := range batch {
			if err != nil {
				errs[i] = err
			}
			r.done <- errs[i]
		}
	}
}

// close refuses new writers and closes the file once the running write
// transaction ends; writers still queued then get an error.
func (s *store) close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return s.db.Close()
}

func put(tx *bolt.Tx, bucket []byte, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return tx.Bucket(bucket).Put([]byte(id), b)
}

func del(tx *bolt.Tx, bucket []byte, id string) error {
	return tx.Bucket(bucket).Delete([]byte(id))
}

// load reads every record.
func (s *store) load() (fss []*fileSystemRec, aps []*accessPointRec, mts []*mountTargetRec, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		if err := loadBucket(tx, bucketFileSystems, &fss); err != nil {
			return err
		}
		if err := loadBucket(tx, bucketAccessPoints, &aps); err != nil {
			return err
		}
		return loadBucket(tx, bucketMountTargets, &mts)
	})
	return fss, aps, mts, err
}

func loadBucket[T any](tx *bolt.Tx, bucket []byte, out *[]*T) error {
	return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
		rec := new(T)
		if err := json.Unmarshal(v, rec); err != nil {
			return fmt.Errorf("corrupt record %s/%s: %w", bucket, k, err)
		}
		*out = append(*out, rec)
		return nil
	})
}
