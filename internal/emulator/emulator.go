// Package emulator serves the Amazon EFS API (the REST-JSON protocol under
// /2015-02-01/) well enough that the unmodified AWS SDK for Go v2 and the AWS
// CLI cannot tell the difference where the CSI driver would care: file
// systems, mount targets, access points and tags, with EFS's validation,
// error codes, ClientToken semantics, limits and pagination. Each file system
// is a directory on the local disk; state survives restarts and crashes.
//
// It can also misbehave on purpose, per operation: latency, throttling (a
// token bucket, or at random), internal errors, lost answers and delayed
// visibility (see Fault), set at start through Config or at run time through
// SetFault or the control endpoint under /_emulator/ (docs/emulator.md).
package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/emulator/iam"
)

// Config configures an Emulator.
type Config struct {
	// DataDir holds the state store and one directory per file system,
	// DataDir/<fs-id>/. Required; created if missing.
	DataDir string
	// FileSystems are created at start when missing (IDs as EFS's,
	// fs- and 8 to 40 hex digits), each with one mount target at 127.0.0.1
	// in us-east-1a.
	FileSystems []string
	// OneZoneFileSystems are created at start when missing as One Zone file
	// systems (file system ID -> availability zone of us-east-1, e.g.
	// us-east-1b), each with its one mount target at 127.0.0.1 in its zone.
	// One that exists in another zone, or regional, is an error: a file
	// system's zone never changes.
	OneZoneFileSystems map[string]string
	// S3FilesFileSystems are S3 Files file systems created at start when
	// missing (fs- and 17 to 40 hex digits), each with one mount target at
	// 127.0.0.1; their data is DataDir/<fs-id> too.
	S3FilesFileSystems []string
	// S3FilesStrictClientToken: a repeated S3 Files client token with other
	// parameters is ConflictException. By default it is ignored and the
	// existing access point answered, as the S3 Files API documents.
	S3FilesStrictClientToken bool
	// AccessPointLimit is the number of access points per file system (of
	// either API);
	// 0 means 10000 (EFS's limit).
	AccessPointLimit int
	// LenientClientToken: a repeated ClientToken with the same parameters
	// returns the existing access point instead of AccessPointAlreadyExists
	// (with other parameters it still conflicts).
	LenientClientToken bool
	// Faults are the faults in force at start.
	Faults map[Op]Fault
	// NoFsync skips the fsync of each commit: the state still survives the
	// emulator's crash, but not the machine's. For benchmarks on slow disks;
	// by default every change is on disk before its answer.
	NoFsync bool
	// FileSystemOwners are file systems created at start when missing (as
	// FileSystems) and the account (12 digits) that owns each: an owner
	// other than DefaultAccount turns accounts on (accounts.go).
	FileSystemOwners map[string]string
	// Roles callers may assume through STS AssumeRole (added to the stored
	// ones); any turns accounts on.
	Roles []Role
	// AccessKeyAccounts assigns static access key IDs to accounts (added to
	// the stored ones); keys not named are DefaultAccount's. Any turns
	// accounts on.
	AccessKeyAccounts map[string]string
	// IAMPolicies are JSON identity policies (docs/emulator.md, "IAM
	// policies"): every caller is one principal with these policies, and
	// each EFS, S3 Files and STS request is evaluated under them before it
	// is applied. None: everything is allowed. A malformed one is an error
	// of New.
	IAMPolicies []string
	// Now is the clock of issued credentials' expiry; nil: time.Now. See
	// also SetClockOffset.
	Now func() time.Time
	// Seed seeds IDs, jitter and fault rates; 0 picks one at random.
	Seed int64
	// Logger receives one line per request; nil discards.
	Logger *slog.Logger
}

// DefaultAccessPointLimit is EFS's per-file-system access point limit.
const DefaultAccessPointLimit = 10000

// Phase is when a Hook runs.
type Phase int

const (
	// BeforeApply: the request passed its faults and validation and is
	// about to change or read the state.
	BeforeApply Phase = iota
	// AfterApply: the request succeeded and is durable; the answer is not
	// written yet (nor lost, if a lost-answer fault strikes).
	AfterApply
)

func (p Phase) String() string {
	if p == AfterApply {
		return "AfterApply"
	}
	return "BeforeApply"
}

// Hook observes requests; it is called synchronously in the request's
// goroutine and may block to hold it. req is the decoded input, a pointer
// to one of the *Input types of this package (CreateAccessPointInput, ...).
type Hook func(op Op, phase Phase, req any)

// Emulator is an EFS API server. Its methods are safe for concurrent use.
type Emulator struct {
	cfg      Config
	log      *slog.Logger
	rand     *lockedRand
	state    *state
	accounts *accounts
	// accountsOn: a role, a key's account or a foreign owner was ever
	// configured (accounts.go); off, every caller is DefaultAccount.
	accountsOn  atomic.Bool
	clockOffset atomic.Int64
	faults      faults
	// policies are Config.IAMPolicies, parsed once (iam.go).
	policies []*iam.Policy
	counts   map[Op]*atomic.Int64
	hook     atomic.Pointer[Hook]
	mux      *http.ServeMux

	mu        sync.Mutex
	servers   []*http.Server
	closed    bool
	closeOnce sync.Once
	closeErr  error
}

// New opens (or creates) the state in cfg.DataDir and creates the missing
// file systems of cfg.FileSystems.
func New(cfg Config) (*Emulator, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("emulator: DataDir is required")
	}
	if cfg.AccessPointLimit < 0 {
		return nil, fmt.Errorf("emulator: AccessPointLimit %d is negative", cfg.AccessPointLimit)
	}
	if cfg.AccessPointLimit == 0 {
		cfg.AccessPointLimit = DefaultAccessPointLimit
	}
	for _, id := range cfg.FileSystems {
		if !ValidFileSystemID(id) {
			return nil, fmt.Errorf("emulator: file system ID %q does not match ^fs-[0-9a-f]{8,40}$", id)
		}
		if z, ok := cfg.OneZoneFileSystems[id]; ok {
			return nil, fmt.Errorf("emulator: file system %s is named both regional and One Zone (%s)", id, z)
		}
	}
	startFS := slices.Clone(cfg.FileSystems)
	for _, id := range slices.Sorted(maps.Keys(cfg.OneZoneFileSystems)) {
		if !ValidFileSystemID(id) {
			return nil, fmt.Errorf("emulator: file system ID %q does not match ^fs-[0-9a-f]{8,40}$", id)
		}
		if z := cfg.OneZoneFileSystems[id]; !ValidZone(z) {
			return nil, fmt.Errorf("emulator: One Zone file system %s: %q is not an availability zone of %s (%sa to %s%c)", id, z, region, region, region, maxZoneLetter)
		}
		startFS = append(startFS, id)
	}
	for id, account := range cfg.FileSystemOwners {
		if !ValidFileSystemID(id) {
			return nil, fmt.Errorf("emulator: file system ID %q does not match ^fs-[0-9a-f]{8,40}$", id)
		}
		if !accountRE.MatchString(account) {
			return nil, fmt.Errorf("emulator: owner %q of %s is not a 12-digit account", account, id)
		}
	}
	for _, r := range cfg.Roles {
		if _, _, err := parseRole(r); err != nil {
			return nil, fmt.Errorf("emulator: %w", err)
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	for _, id := range cfg.S3FilesFileSystems {
		if !ValidS3FilesFileSystemID(id) {
			return nil, fmt.Errorf("emulator: S3 Files file system ID %q does not match ^fs-[0-9a-f]{17,40}$", id)
		}
		if slices.Contains(cfg.FileSystems, id) {
			return nil, fmt.Errorf("emulator: file system ID %s is given for both EFS and S3 Files", id)
		}
	}
	if err := validateFaults(cfg.Faults); err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	policies, err := parsePolicies(cfg.IAMPolicies)
	if err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, dirPerm); err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	st, err := openStore(dataDir, cfg.NoFsync)
	if err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	e := &Emulator{cfg: cfg, log: log, rand: newLockedRand(cfg.Seed), counts: map[Op]*atomic.Int64{}, policies: policies}
	e.cfg.DataDir = dataDir
	if e.state, err = newState(st, dataDir, log, e.rand); err != nil {
		_ = st.close()
		return nil, fmt.Errorf("emulator: load state: %w", err)
	}
	for _, op := range Ops() {
		e.counts[op] = new(atomic.Int64)
	}
	e.faults.setAll(cfg.Faults)
	if err := e.seed(cfg, startFS); err != nil {
		_ = st.close()
		return nil, fmt.Errorf("emulator: %w", err)
	}
	for _, id := range cfg.S3FilesFileSystems {
		if err := e.seedS3FileSystem(id); err != nil {
			_ = st.close()
			return nil, fmt.Errorf("emulator: %w", err)
		}
	}
	e.mux = e.routes()
	return e, nil
}

// seed loads the accounts and creates what cfg names (the file systems
// of startFS, One Zone ones in their zone).
func (e *Emulator) seed(cfg Config, startFS []string) error {
	var err error
	if e.accounts, err = loadAccounts(e.state.store, e.Now()); err != nil {
		return fmt.Errorf("load accounts: %w", err)
	}
	for _, id := range startFS {
		if err := e.ensureFileSystem(id, cfg.OneZoneFileSystems[id]); err != nil {
			return err
		}
	}
	for id, account := range cfg.FileSystemOwners {
		if err := e.SetFileSystemOwner(id, account); err != nil {
			return err
		}
	}
	for _, r := range cfg.Roles {
		if err := e.PutRole(r); err != nil {
			return err
		}
	}
	for key, account := range cfg.AccessKeyAccounts {
		if err := e.SetAccessKeyAccount(key, account); err != nil {
			return err
		}
	}
	_, foreign := e.state.owners()
	if foreign || e.accounts.configured() {
		e.accountsOn.Store(true)
	}
	return nil
}

// ensureFileSystem creates file system id (One Zone in zone, "" for
// regional) if missing; an existing one must be in that zone.
func (e *Emulator) ensureFileSystem(id, zone string) error {
	if have, ok := e.state.fileSystemZone(id); ok && have != zone {
		return fmt.Errorf("file system %s exists in zone %q, not %q: a file system's zone never changes", id, have, zone)
	}
	if e.state.hasFileSystem(svcEFS, id) {
		return mkdirFileSystem(e.cfg.DataDir, id) // its directory may have been removed
	}
	rec := fileSystemRec{ID: id, CreationToken: id, PerformanceMode: defaultPerformanceMode, ThroughputMode: defaultThroughputMode, AZName: zone}
	if _, aerr := e.state.createFileSystem(rec, true); aerr != nil {
		return fmt.Errorf("create file system %s: %v", id, aerr)
	}
	e.log.Info("created file system", "fileSystem", id)
	return nil
}

// ValidZone reports whether name is an availability zone of the
// emulator's region (us-east-1a to us-east-1f).
func ValidZone(name string) bool {
	_, ok := zoneID(name)
	return ok
}

// Handler serves the EFS API, the S3 Files API and the control endpoint
// under /_emulator/.
func (e *Emulator) Handler() http.Handler { return e.mux }

// Serve answers requests on l until Close or Shutdown; it then returns nil.
func (e *Emulator) Serve(l net.Listener) error {
	srv := &http.Server{
		Handler:           e.mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(e.log.Handler(), slog.LevelWarn),
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return l.Close()
	}
	e.servers = append(e.servers, srv)
	e.mu.Unlock()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops serving gracefully: it waits, until ctx ends, for requests in
// flight, then closes the store. Close is still safe to call afterwards.
func (e *Emulator) Shutdown(ctx context.Context) error {
	var errs []error
	for _, srv := range e.stopServing() {
		errs = append(errs, srv.Shutdown(ctx))
	}
	errs = append(errs, e.closeStore())
	return errors.Join(errs...)
}

// Close stops serving at once (connections are closed) and closes the
// store. It is idempotent.
func (e *Emulator) Close() error {
	var errs []error
	for _, srv := range e.stopServing() {
		errs = append(errs, srv.Close())
	}
	errs = append(errs, e.closeStore())
	return errors.Join(errs...)
}

func (e *Emulator) stopServing() []*http.Server {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	srvs := e.servers
	e.servers = nil
	return srvs
}

func (e *Emulator) closeStore() error {
	e.closeOnce.Do(func() { e.closeErr = e.state.store.close() })
	return e.closeErr
}

// FileSystemDir is the directory that holds file system fsID's data.
func (e *Emulator) FileSystemDir(fsID string) string { return filepath.Join(e.cfg.DataDir, fsID) }

// SetFault replaces the fault of op (AllOps: of every operation); the zero
// Fault clears it. An invalid fault is ignored and logged (see
// Fault.Validate).
func (e *Emulator) SetFault(op Op, f Fault) {
	if err := f.Validate(); err != nil {
		e.log.Error("fault ignored", "op", op, "err", err)
		return
	}
	e.faults.set(op, f)
}

// Faults returns the faults in force.
func (e *Emulator) Faults() map[Op]Fault { return e.faults.snapshot() }

// ResetFaults clears every fault.
func (e *Emulator) ResetFaults() { e.faults.reset() }

// Counts returns the number of requests per operation since start (or the
// last ResetCounts), faulted ones included.
func (e *Emulator) Counts() map[Op]int64 {
	out := make(map[Op]int64, len(e.counts))
	for op, c := range e.counts {
		out[op] = c.Load()
	}
	return out
}

// ResetCounts sets every request counter to zero.
func (e *Emulator) ResetCounts() {
	for _, c := range e.counts {
		c.Store(0)
	}
}

// SetHook installs h (nil removes it).
func (e *Emulator) SetHook(h Hook) {
	if h == nil {
		e.hook.Store(nil)
		return
	}
	e.hook.Store(&h)
}

func (e *Emulator) callHook(op Op, p Phase, req any) {
	if h := e.hook.Load(); h != nil {
		(*h)(op, p, req)
	}
}

// Now is the emulator's clock: Config.Now plus the offset of SetClockOffset.
// Issued credentials expire by it.
func (e *Emulator) Now() time.Time {
	return e.cfg.Now().Add(time.Duration(e.clockOffset.Load()))
}

// SetClockOffset moves the emulator's clock by d from Config.Now: a test
// makes issued credentials expire (or be issued as if long ago).
func (e *Emulator) SetClockOffset(d time.Duration) { e.clockOffset.Store(int64(d)) }

// PutRole adds or replaces a role callers may assume; accounts turn on.
func (e *Emulator) PutRole(r Role) error {
	if err := e.accounts.putRole(r); err != nil {
		return err
	}
	e.accountsOn.Store(true)
	e.log.Info("role set", "role", r.ARN, "externalIdRequired", r.ExternalID != "")
	return nil
}

// SetAccessKeyAccount makes static access key ID key one of account's;
// accounts turn on.
func (e *Emulator) SetAccessKeyAccount(key, account string) error {
	if err := e.accounts.setKeyAccount(key, account); err != nil {
		return err
	}
	e.accountsOn.Store(true)
	e.log.Info("access key account set", "accessKeyId", key, "account", account)
	return nil
}

// SetFileSystemOwner makes account the owner of file system id, creating
// it (with one mount target) if missing. An owner other than DefaultAccount
// turns accounts on.
func (e *Emulator) SetFileSystemOwner(id, account string) error {
	if !ValidFileSystemID(id) {
		return fmt.Errorf("file system ID %q does not match ^fs-[0-9a-f]{8,40}$", id)
	}
	if !accountRE.MatchString(account) {
		return fmt.Errorf("owner %q of %s is not a 12-digit account", account, id)
	}
	zone, _ := e.state.fileSystemZone(id) // kept; a new one is regional
	if err := e.ensureFileSystem(id, zone); err != nil {
		return err
	}
	if err := e.state.setOwner(id, account); err != nil {
		return err
	}
	if account != DefaultAccount {
		e.accountsOn.Store(true)
	}
	e.log.Info("file system owner set", "fileSystem", id, "account", account)
	return nil
}

// AccountsConfig is the accounts' configuration: what GET and PUT
// /_emulator/accounts carry.
type AccountsConfig struct {
	Roles []Role `json:"roles,omitempty"`
	// AccessKeys: static access key ID to account.
	AccessKeys map[string]string `json:"accessKeys,omitempty"`
	// FileSystems: file system ID to owning account.
	FileSystems map[string]string `json:"fileSystems,omitempty"`
}

// Accounts returns the roles, access key accounts and every file system's
// owner.
func (e *Emulator) Accounts() AccountsConfig {
	roles, keys := e.accounts.snapshot()
	owners, _ := e.state.owners()
	return AccountsConfig{Roles: roles, AccessKeys: keys, FileSystems: owners}
}

// Configure applies c: roles are added or replaced, access keys assigned,
// file systems created if missing and given their owners.
func (e *Emulator) Configure(c AccountsConfig) error {
	for _, r := range c.Roles {
		if err := e.PutRole(r); err != nil {
			return err
		}
	}
	for k, a := range c.AccessKeys {
		if err := e.SetAccessKeyAccount(k, a); err != nil {
			return err
		}
	}
	for id, a := range c.FileSystems {
		if err := e.SetFileSystemOwner(id, a); err != nil {
			return err
		}
	}
	return nil
}

type callerKey struct{}

func withCaller(ctx context.Context, c caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// callerFrom is the request's caller (DefaultAccount's when accounts are off).
func callerFrom(ctx context.Context) caller {
	if c, ok := ctx.Value(callerKey{}).(caller); ok {
		return c
	}
	return defaultCaller
}

var defaultCaller = caller{account: DefaultAccount, arn: "arn:aws:iam::" + DefaultAccount + ":root"}

// identify names r's caller; with accounts off, DefaultAccount.
func (e *Emulator) identify(r *http.Request) (caller, *apiError) {
	if !e.accountsOn.Load() {
		return defaultCaller, nil
	}
	return e.accounts.identify(r, e.Now())
}

// authorize refuses op on resource (an ID; "" for none) when its owner is
// another account than who's.
func (e *Emulator) authorize(who caller, op Op, resource string) *apiError {
	if resource == "" || !e.accountsOn.Load() {
		return nil
	}
	if owner, ok := e.state.ownerOf(resource); ok && owner != who.account {
		return accessDenied(who, op)
	}
	return nil
}
