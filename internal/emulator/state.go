package emulator

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Account facts the emulator reports in ARNs and descriptions.
const (
	region    = "us-east-1"
	accountID = "123456789012"
)

// apPhase says where an access point stands relative to the store. The
// linearization point of a create or a delete is its commit: until then a
// creating access point is invisible (but holds its token and counts against
// the limit), and a deleting one is still listed. Requests that must know the
// outcome (a repeated token, a second delete, tagging) wait on done.
type apPhase uint8

const (
	apCreating apPhase = iota
	apReady
	apDeleting
)

type accessPoint struct {
	accessPointRec
	api       service // its file system's
	account   string  // its file system's owner
	phase     apPhase
	done      chan struct{} // closed when the in-flight commit ends
	visibleAt time.Time     // Describe hides it until then (visibility fault)
	json      []byte        // describe() encoded, for listings; nil when stale
}

// encoded is ap's description in JSON, kept until ap changes (listing pages
// of up to 1,000 then cost a copy, not an encoding); call with s.mu held.
func (ap *accessPoint) encoded() []byte {
	if ap.json == nil {
		ap.json, _ = json.Marshal(ap.describe())
	}
	return ap.json
}

type fileSystem struct {
	fileSystemRec
	aps []*accessPoint // ordered by Seq
	mts []*mountTargetRec
}

// state is the in-memory model, the single source of answers; the store
// only makes it durable.
type state struct {
	store   *store
	dataDir string
	log     *slog.Logger
	rand    *lockedRand

	mu       sync.Mutex
	seq      uint64
	fss      map[string]*fileSystem
	fsList   []*fileSystem          // ordered by Seq
	fsTokens map[string]*fileSystem // by tokenKey
	aps      map[string]*accessPoint
	apTokens map[string]*accessPoint // by tokenKey
	mts      map[string]*mountTargetRec
}

func newState(st *store, dataDir string, log *slog.Logger, r *lockedRand) (*state, error) {
	s := &state{
		store: st, dataDir: dataDir, log: log, rand: r,
		fss: map[string]*fileSystem{}, fsTokens: map[string]*fileSystem{},
		aps: map[string]*accessPoint{}, apTokens: map[string]*accessPoint{},
		mts: map[string]*mountTargetRec{},
	}
	fss, aps, mts, err := st.load()
	if err != nil {
		return nil, err
	}
	sort.Slice(fss, func(i, j int) bool { return fss[i].Seq < fss[j].Seq })
	for _, r := range fss {
		s.addFileSystem(&fileSystem{fileSystemRec: *r})
	}
	sort.Slice(aps, func(i, j int) bool { return aps[i].Seq < aps[j].Seq })
	for _, r := range aps {
		fs := s.fss[r.FileSystemID]
		if fs == nil {
			log.Warn("dropping stored access point of a missing file system", "accessPoint", r.ID, "fileSystem", r.FileSystemID)
			continue
		}
		ap := &accessPoint{accessPointRec: *r, api: fs.API, account: fs.owner(), phase: apReady}
		s.aps[ap.ID], s.apTokens[tokenKey(ap.api, ap.ClientToken)] = ap, ap
		fs.aps = append(fs.aps, ap)
		s.seq = max(s.seq, ap.Seq)
	}
	sort.Slice(mts, func(i, j int) bool { return mts[i].Seq < mts[j].Seq })
	for _, mt := range mts {
		if fs := s.fss[mt.FileSystemID]; fs != nil {
			fs.mts = append(fs.mts, mt)
			s.mts[mt.ID] = mt
			s.seq = max(s.seq, mt.Seq)
		}
	}
	return s, nil
}

func (s *state) addFileSystem(fs *fileSystem) {
	s.fss[fs.ID] = fs
	s.fsTokens[tokenKey(fs.API, fs.CreationToken)] = fs
	s.fsList = append(s.fsList, fs)
	s.seq = max(s.seq, fs.Seq)
}

// service is the API a resource belongs to (fileSystemRec.API).
type service string

const (
	svcEFS     service = ""
	svcS3Files service = "s3files"
)

// tokenKey scopes a client or creation token to its API: each API has its
// own token namespace.
func tokenKey(api service, token string) string { return string(api) + "/" + token }

// fsOf is file system id if it belongs to api; call with s.mu held.
func (s *state) fsOf(api service, id string) *fileSystem {
	if fs := s.fss[id]; fs != nil && fs.API == api {
		return fs
	}
	return nil
}

// apOf is access point id if it belongs to api; call with s.mu held.
func (s *state) apOf(api service, id string) *accessPoint {
	if ap := s.aps[id]; ap != nil && ap.api == api {
		return ap
	}
	return nil
}

// newID draws an unused ID such as fsap-0123456789abcdef0 (17 hex digits, as
// EFS). Call with s.mu held.
func (s *state) newID(prefix string) string {
	for {
		id := prefix + s.rand.hex(17)
		_, a := s.fss[id]
		_, b := s.aps[id]
		_, c := s.mts[id]
		if !a && !b && !c {
			return id
		}
	}
}

func tagName(tags []tag) string {
	for _, t := range tags {
		if t.Key == "Name" {
			return t.Value
		}
	}
	return ""
}

func wireTags(tags []tag) []wireTag {
	out := make([]wireTag, len(tags))
	for i, t := range tags {
		out[i] = wireTag(t)
	}
	return out
}

// describe renders an access point; call with s.mu held (tags may change).
func (ap *accessPoint) describe() wireAccessPoint {
	return wireAccessPoint{
		AccessPointArn: fmt.Sprintf("arn:aws:elasticfilesystem:%s:%s:access-point/%s", region, ap.account, ap.ID),
		AccessPointId:  ap.ID,
		ClientToken:    ap.ClientToken,
		FileSystemId:   ap.FileSystemID,
		LifeCycleState: lifeCycleAvailable,
		Name:           tagName(ap.Tags),
		OwnerId:        ap.account,
		PosixUser:      ap.PosixUser,
		RootDirectory:  wireRootDirectory{Path: ap.Path, CreationInfo: ap.CreationInfo},
		Tags:           wireTags(ap.Tags),
	}
}

// owner is the account that owns fs.
func (fs *fileSystem) owner() string {
	if fs.Owner == "" {
		return DefaultAccount
	}
	return fs.Owner
}

// ownerField is how an account is stored as a file system's Owner.
func ownerField(account string) string {
	if account == DefaultAccount {
		return ""
	}
	return account
}

func (fs *fileSystem) describe() wireFileSystem {
	epoch := float64(fs.Created.UnixNano()) / 1e9
	azID, _ := zoneID(fs.AZName)
	return wireFileSystem{
		AvailabilityZoneId:           azID,
		AvailabilityZoneName:         fs.AZName,
		CreationTime:                 epoch,
		CreationToken:                fs.CreationToken,
		Encrypted:                    fs.Encrypted,
		FileSystemArn:                fmt.Sprintf("arn:aws:elasticfilesystem:%s:%s:file-system/%s", region, fs.owner(), fs.ID),
		FileSystemId:                 fs.ID,
		KmsKeyId:                     fs.KmsKeyID,
		LifeCycleState:               lifeCycleAvailable,
		Name:                         tagName(fs.Tags),
		NumberOfMountTargets:         len(fs.mts),
		OwnerId:                      fs.owner(),
		PerformanceMode:              fs.PerformanceMode,
		ProvisionedThroughputInMibps: fs.ProvisionedMiBs,
		SizeInBytes:                  wireSize{Value: emptyFileSystemSizeInByte, Timestamp: epoch},
		Tags:                         wireTags(fs.Tags),
		ThroughputMode:               fs.ThroughputMode,
	}
}

func describeMountTarget(mt *mountTargetRec, account string) wireMountTarget {
	return wireMountTarget{
		AvailabilityZoneId:   mt.AZID,
		AvailabilityZoneName: mt.AZName,
		FileSystemId:         mt.FileSystemID,
		IpAddress:            mt.IPAddress,
		LifeCycleState:       lifeCycleAvailable,
		MountTargetId:        mt.ID,
		NetworkInterfaceId:   "eni-" + strings.TrimPrefix(mt.ID, "fsmt-"),
		OwnerId:              account,
		SubnetId:             mt.SubnetID,
		VpcId:                "vpc-0123456789abcdef0",
	}
}

// ---- access points ----

// newAccessPoint is a validated CreateAccessPoint request.
type newAccessPoint struct {
	api               service
	fsID, token, path string
	ci                *creationInfo
	pu                *wirePosixUser
	tags              []tag
	params            string
}

// canonicalParams is the comparable form of a create request: a lenient
// ClientToken repeat must carry the same parameters (tags in any order).
func canonicalParams(n *newAccessPoint) string {
	tags := slices.Clone(n.tags)
	slices.SortFunc(tags, func(a, b tag) int { return strings.Compare(a.Key, b.Key) })
	b, _ := json.Marshal(struct {
		FS, Path string
		CI       *creationInfo
		PU       *wirePosixUser
		Tags     []tag
	}{n.fsID, n.path, n.ci, n.pu, tags})
	return string(b)
}

type createOptions struct {
	limit   int
	lenient bool // EFS: an identical repeat returns the existing access point
	// ignoreRepeat (S3 Files): a repeated token is ignored and the existing
	// access point answered, as the API documents; with strict, only for
	// identical parameters (others: ConflictException).
	ignoreRepeat, strict bool
	visibleAt            time.Time
}

// createAccessPoint reserves the token and a slot, creates the root
// directory, commits, and only then makes the access point visible.
func (s *state) createAccessPoint(n *newAccessPoint, opt createOptions) (wireAccessPoint, *apiError) {
	var ap *accessPoint
	for ap == nil {
		s.mu.Lock()
		fs := s.fsOf(n.api, n.fsID)
		if fs == nil {
			s.mu.Unlock()
			return wireAccessPoint{}, fsNotFound(n.fsID)
		}
		if old := s.apTokens[tokenKey(n.api, n.token)]; old != nil {
			if old.phase != apReady {
				done := old.done
				s.mu.Unlock()
				<-done // its outcome decides ours: retry once it is known
				continue
			}
			defer s.mu.Unlock()
			if opt.lenient && old.Params == n.params || opt.ignoreRepeat && (!opt.strict || old.Params == n.params) {
				return old.describe(), nil
			}
			if opt.ignoreRepeat {
				e := errorf(http.StatusConflict, codeConflict,
					"Client token %q was used with other parameters by access point %s", n.token, old.ID)
				e.AccessPointId = old.ID
				return wireAccessPoint{}, e
			}
			e := errorf(http.StatusConflict, codeAPAlreadyExists,
				"Access point with client token %q already exists: %s", n.token, old.ID)
			e.AccessPointId = old.ID
			return wireAccessPoint{}, e
		}
		if len(fs.aps) >= opt.limit {
			s.mu.Unlock()
			return wireAccessPoint{}, errorf(http.StatusForbidden, codeAPLimitExceeded,
				"File system %s already has %d access points, the limit", fs.ID, opt.limit)
		}
		s.seq++
		ap = &accessPoint{
			accessPointRec: accessPointRec{
				ID: s.newID("fsap-"), Seq: s.seq, FileSystemID: fs.ID, ClientToken: n.token,
				Path: n.path, CreationInfo: n.ci, PosixUser: n.pu, Tags: n.tags,
				Params: n.params, Created: time.Now().UTC(),
			},
			api: n.api, account: fs.owner(), phase: apCreating, done: make(chan struct{}), visibleAt: opt.visibleAt,
		}
		s.aps[ap.ID], s.apTokens[tokenKey(n.api, n.token)] = ap, ap
		fs.aps = append(fs.aps, ap) // Seq grows, so the list stays ordered
		s.mu.Unlock()
	}

	s.makeRootDir(&ap.accessPointRec)
	rec := ap.accessPointRec
	err := s.store.commit(func(tx *bolt.Tx) error { return put(tx, bucketAccessPoints, rec.ID, &rec) })

	s.mu.Lock()
	defer s.mu.Unlock()
	defer close(ap.done)
	if err != nil {
		s.forgetAccessPoint(ap)
		return wireAccessPoint{}, internalError(err)
	}
	ap.phase = apReady
	return ap.describe(), nil
}

// forgetAccessPoint removes ap from memory; call with s.mu held.
func (s *state) forgetAccessPoint(ap *accessPoint) {
	delete(s.aps, ap.ID)
	if k := tokenKey(ap.api, ap.ClientToken); s.apTokens[k] == ap {
		delete(s.apTokens, k)
	}
	if fs := s.fss[ap.FileSystemID]; fs != nil {
		if i, ok := slices.BinarySearchFunc(fs.aps, ap.Seq, func(a *accessPoint, seq uint64) int {
			return cmpSeq(a.Seq, seq)
		}); ok {
			fs.aps = slices.Delete(fs.aps, i, i+1)
		}
	}
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (ap *accessPoint) visible(now time.Time) bool {
	return ap.phase != apCreating && !now.Before(ap.visibleAt)
}

// lockReadyAccessPoint finds a committed access point, waiting out a delete
// in flight; it returns with s.mu held when the error is nil.
func (s *state) lockReadyAccessPoint(api service, id string) (*accessPoint, *apiError) {
	for {
		s.mu.Lock()
		ap := s.apOf(api, id)
		if ap == nil || ap.phase == apCreating {
			s.mu.Unlock()
			return nil, apNotFound(id)
		}
		if ap.phase == apReady {
			return ap, nil
		}
		done := ap.done
		s.mu.Unlock()
		<-done
	}
}

func (s *state) deleteAccessPoint(api service, id string) *apiError {
	ap, e := s.lockReadyAccessPoint(api, id)
	if e != nil {
		return e
	}
	ap.phase, ap.done = apDeleting, make(chan struct{})
	s.mu.Unlock()

	err := s.store.commit(func(tx *bolt.Tx) error { return del(tx, bucketAccessPoints, id) })

	s.mu.Lock()
	defer s.mu.Unlock()
	defer close(ap.done)
	if err != nil {
		ap.phase = apReady
		return internalError(err)
	}
	s.forgetAccessPoint(ap)
	return nil
}

func (s *state) describeAccessPoint(api service, id string, now time.Time) (wireAccessPoint, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ap := s.apOf(api, id)
	if ap == nil || !ap.visible(now) {
		return wireAccessPoint{}, apNotFound(id)
	}
	return ap.describe(), nil
}

// pageToken is an opaque NextToken/Marker: the scope (a file system ID or
// "*") and the Seq of the last item returned. It stays valid while items
// come and go, since the next page starts after that Seq, wherever it is.
func pageToken(scope string, seq uint64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(scope + "/" + strconv.FormatUint(seq, 10)))
}

func parsePageToken(field, tok, scope string) (uint64, *apiError) {
	if tok == "" {
		return 0, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	s, n, ok := strings.Cut(string(raw), "/")
	seq, err2 := strconv.ParseUint(n, 10, 64)
	if err != nil || !ok || err2 != nil || s != scope {
		return 0, badRequest("%s %q is not valid for this request", field, tok)
	}
	return seq, nil
}

// page returns up to max items of list (ordered by seq) after the one with
// Seq after that keep accepts, and the token for the next page ("" when
// nothing follows).
func page[T any](list []T, seqOf func(T) uint64, after uint64, max int, keep func(T) bool, scope string) ([]T, string) {
	i, _ := slices.BinarySearchFunc(list, after+1, func(x T, s uint64) int { return cmpSeq(seqOf(x), s) })
	var out []T
	for ; i < len(list); i++ {
		if !keep(list[i]) {
			continue
		}
		if len(out) == max {
			return out, pageToken(scope, seqOf(out[len(out)-1]))
		}
		out = append(out, list[i])
	}
	return out, ""
}

func (s *state) listAccessPoints(fsID, next string, max int, now time.Time) (rawJSON, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	aps, tok, e := s.pageAccessPoints(svcEFS, fsID, next, max, now)
	if e != nil {
		return nil, e
	}
	// The describeAccessPointsOutput shape, written by hand from the cache.
	b := bytes.NewBufferString(`{"AccessPoints":[`)
	for i, ap := range aps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(ap.encoded())
	}
	b.WriteByte(']')
	if tok != "" {
		b.WriteString(`,"NextToken":"` + tok + `"`) // base64url: nothing to escape
	}
	b.WriteByte('}')
	return rawJSON(b.Bytes()), nil
}

// accessPointsOf is one page of fsID's access points in api, described.
func (s *state) accessPointsOf(api service, fsID, next string, max int, now time.Time) ([]wireAccessPoint, string, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	aps, tok, e := s.pageAccessPoints(api, fsID, next, max, now)
	out := make([]wireAccessPoint, len(aps))
	for i, ap := range aps {
		out[i] = ap.describe()
	}
	return out, tok, e
}

// pageAccessPoints is one page of the visible access points of file system
// fsID of api, and the next page's token; call with s.mu held.
func (s *state) pageAccessPoints(api service, fsID, next string, max int, now time.Time) ([]*accessPoint, string, *apiError) {
	fs := s.fsOf(api, fsID)
	if fs == nil {
		return nil, "", fsNotFound(fsID)
	}
	after, e := parsePageToken("NextToken", next, fsID)
	if e != nil {
		return nil, "", e
	}
	aps, tok := page(fs.aps, func(ap *accessPoint) uint64 { return ap.Seq }, after, max,
		func(ap *accessPoint) bool { return ap.visible(now) }, fsID)
	return aps, tok, nil
}

// ---- file systems ----

func (s *state) createFileSystem(rec fileSystemRec, withMountTarget bool) (wireFileSystem, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.fsTokens[tokenKey(rec.API, rec.CreationToken)]; old != nil {
		e := errorf(http.StatusConflict, codeFSAlreadyExists, "File system with creation token %q already exists: %s", rec.CreationToken, old.ID)
		e.FileSystemId = old.ID
		return wireFileSystem{}, e
	}
	if rec.ID == "" {
		rec.ID = s.newID("fs-")
	} else if s.fss[rec.ID] != nil {
		e := errorf(http.StatusConflict, codeFSAlreadyExists, "File system %s already exists", rec.ID)
		e.FileSystemId = rec.ID
		return wireFileSystem{}, e
	}
	s.seq++
	rec.Seq = s.seq
	rec.Created = time.Now().UTC()
	fs := &fileSystem{fileSystemRec: rec}
	var mt *mountTargetRec
	if withMountTarget {
		s.seq++
		zone := cmp.Or(rec.AZName, region+"a") // a One Zone file system's only zone
		id, _ := zoneID(zone)
		mt = &mountTargetRec{ID: s.newID("fsmt-"), Seq: s.seq, FileSystemID: rec.ID,
			SubnetID: "subnet-0123456789abcdef0", IPAddress: "127.0.0.1", AZName: zone, AZID: id}
	}
	if err := mkdirFileSystem(s.dataDir, rec.ID); err != nil {
		return wireFileSystem{}, internalError(err)
	}
	err := s.store.commit(func(tx *bolt.Tx) error {
		if mt != nil {
			if err := put(tx, bucketMountTargets, mt.ID, mt); err != nil {
				return err
			}
		}
		return put(tx, bucketFileSystems, rec.ID, &rec)
	})
	if err != nil {
		return wireFileSystem{}, internalError(err)
	}
	s.addFileSystem(fs)
	if mt != nil {
		fs.mts = append(fs.mts, mt)
		s.mts[mt.ID] = mt
	}
	return fs.describe(), nil
}

// fileSystemZone returns the zone of file system id ("" for a regional
// one), false if it does not exist.
func (s *state) fileSystemZone(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fs := s.fss[id]; fs != nil {
		return fs.AZName, true
	}
	return "", false
}

// hasFileSystem reports whether id exists in api.
func (s *state) hasFileSystem(api service, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fsOf(api, id) != nil
}

func (s *state) deleteFileSystem(api service, id string) *apiError {
	s.mu.Lock()
	defer s.mu.Unlock()
	fs := s.fsOf(api, id)
	if fs == nil {
		return fsNotFound(id)
	}
	if n, m := len(fs.aps), len(fs.mts); n > 0 || m > 0 {
		return errorf(http.StatusConflict, codeFSInUse, "File system %s is in use: %d access points and %d mount targets remain", id, n, m)
	}
	if err := s.store.commit(func(tx *bolt.Tx) error { return del(tx, bucketFileSystems, id) }); err != nil {
		return internalError(err)
	}
	delete(s.fss, id)
	delete(s.fsTokens, tokenKey(fs.API, fs.CreationToken))
	s.fsList = slices.DeleteFunc(s.fsList, func(f *fileSystem) bool { return f == fs })
	return nil
}

// describeFileSystems answers for account: a listing shows its file
// systems only (a file system of another account named by ID was refused
// before).
func (s *state) describeFileSystems(in *DescribeFileSystemsInput, max int, account string) (describeFileSystemsOutput, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := describeFileSystemsOutput{FileSystems: []wireFileSystem{}, Marker: in.Marker}
	if in.FileSystemId != "" {
		fs := s.fsOf(svcEFS, in.FileSystemId)
		if fs == nil || (in.CreationToken != "" && fs.CreationToken != in.CreationToken) {
			return out, fsNotFound(in.FileSystemId)
		}
		out.FileSystems = append(out.FileSystems, fs.describe())
		return out, nil
	}
	if in.CreationToken != "" {
		if fs := s.fsTokens[tokenKey(svcEFS, in.CreationToken)]; fs != nil && fs.owner() == account {
			out.FileSystems = append(out.FileSystems, fs.describe())
		}
		return out, nil
	}
	after, e := parsePageToken("Marker", in.Marker, "*")
	if e != nil {
		return out, e
	}
	fss, next := page(s.fsList, func(fs *fileSystem) uint64 { return fs.Seq }, after, max,
		func(fs *fileSystem) bool { return fs.API == svcEFS && fs.owner() == account }, "*")
	for _, fs := range fss {
		out.FileSystems = append(out.FileSystems, fs.describe())
	}
	out.NextMarker = next
	return out, nil
}

// fsPage is a page of file system records and the next page's token.
type fsPage struct {
	list []fileSystemRec
	next string
}

// zoneID is the availability zone ID of a zone of the emulator's region
// (us-east-1a is use1-az1, ...); false for any other name.
func zoneID(name string) (string, bool) {
	letter, ok := strings.CutPrefix(name, region)
	if !ok || len(letter) != 1 || letter[0] < 'a' || letter[0] > maxZoneLetter {
		return "", false
	}
	return fmt.Sprintf("use1-az%d", letter[0]-'a'+1), true
}

// maxZoneLetter is the last zone of the region (us-east-1 has six).
const maxZoneLetter = 'f'

// fileSystemsOf is file system id of api (a page of one), or with id "" a
// page of api's file systems after the token next.
func (s *state) fileSystemsOf(api service, id, next string, max int) (fsPage, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id != "" {
		fs := s.fsOf(api, id)
		if fs == nil {
			return fsPage{}, fsNotFound(id)
		}
		return fsPage{list: []fileSystemRec{fs.fileSystemRec}}, nil
	}
	after, e := parsePageToken("nextToken", next, "*")
	if e != nil {
		return fsPage{}, e
	}
	fss, tok := page(s.fsList, func(fs *fileSystem) uint64 { return fs.Seq }, after, max,
		func(fs *fileSystem) bool { return fs.API == api }, "*")
	out := fsPage{next: tok}
	for _, fs := range fss {
		out.list = append(out.list, fs.fileSystemRec)
	}
	return out, nil
}

// ---- mount targets ----

func (s *state) createMountTarget(api service, fsID, subnet, ip string) (wireMountTarget, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fs := s.fsOf(api, fsID)
	if fs == nil {
		return wireMountTarget{}, fsNotFound(fsID)
	}
	// One mount target per availability zone, as EFS: each subnet stands for
	// the next free zone, a repeated subnet conflicts. A One Zone file system
	// has its zone only: a subnet standing for another is a mismatch.
	used := map[string]bool{}
	for _, mt := range fs.mts {
		if mt.SubnetID == subnet {
			return wireMountTarget{}, errorf(http.StatusConflict, codeMTConflict,
				"File system %s already has mount target %s in the availability zone of subnet %s", fsID, mt.ID, subnet)
		}
		used[mt.AZName] = true
	}
	zone := fs.AZName
	if zone == "" {
		letter := byte('a')
		for used[region+string(letter)] {
			letter++
		}
		zone = region + string(letter)
	} else if used[zone] {
		return wireMountTarget{}, errorf(http.StatusBadRequest, codeAZMismatch,
			"File system %s is One Zone in %s and has its mount target there; subnet %s is in another availability zone", fsID, zone, subnet)
	}
	if ip == "" {
		ip = "127.0.0.1"
	}
	azID, _ := zoneID(zone)
	s.seq++
	mt := &mountTargetRec{ID: s.newID("fsmt-"), Seq: s.seq, FileSystemID: fsID, SubnetID: subnet, IPAddress: ip,
		AZName: zone, AZID: azID}
	if err := s.store.commit(func(tx *bolt.Tx) error { return put(tx, bucketMountTargets, mt.ID, mt) }); err != nil {
		return wireMountTarget{}, internalError(err)
	}
	fs.mts = append(fs.mts, mt)
	s.mts[mt.ID] = mt
	return describeMountTarget(mt, fs.owner()), nil
}

func (s *state) deleteMountTarget(api service, id string) *apiError {
	s.mu.Lock()
	defer s.mu.Unlock()
	mt := s.mts[id]
	if mt == nil || s.fsOf(api, mt.FileSystemID) == nil {
		return mtNotFound(id)
	}
	if err := s.store.commit(func(tx *bolt.Tx) error { return del(tx, bucketMountTargets, id) }); err != nil {
		return internalError(err)
	}
	delete(s.mts, id)
	if fs := s.fss[mt.FileSystemID]; fs != nil {
		fs.mts = slices.DeleteFunc(fs.mts, func(m *mountTargetRec) bool { return m == mt })
	}
	return nil
}

func (s *state) describeMountTargets(api service, in *DescribeMountTargetsInput, max int, now time.Time) (describeMountTargetsOutput, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := describeMountTargetsOutput{MountTargets: []wireMountTarget{}, Marker: in.Marker}
	var fs *fileSystem
	switch {
	case in.MountTargetId != "":
		mt := s.mts[in.MountTargetId]
		if mt == nil || s.fsOf(api, mt.FileSystemID) == nil {
			return out, mtNotFound(in.MountTargetId)
		}
		out.MountTargets = append(out.MountTargets, describeMountTarget(mt, s.fss[mt.FileSystemID].owner()))
		return out, nil
	case in.AccessPointId != "":
		ap := s.apOf(api, in.AccessPointId)
		if ap == nil || !ap.visible(now) {
			return out, apNotFound(in.AccessPointId)
		}
		fs = s.fss[ap.FileSystemID]
	case in.FileSystemId == "": // S3 Files: every mount target of the API
		var all []*mountTargetRec
		for _, f := range s.fsList {
			if f.API == api {
				all = append(all, f.mts...)
			}
		}
		slices.SortFunc(all, func(a, b *mountTargetRec) int { return cmpSeq(a.Seq, b.Seq) })
		after, e := parsePageToken("Marker", in.Marker, "*")
		if e != nil {
			return out, e
		}
		mts, next := page(all, func(mt *mountTargetRec) uint64 { return mt.Seq }, after, max,
			func(*mountTargetRec) bool { return true }, "*")
		for _, mt := range mts {
			out.MountTargets = append(out.MountTargets, describeMountTarget(mt, s.fss[mt.FileSystemID].owner()))
		}
		out.NextMarker = next
		return out, nil
	default:
		if fs = s.fsOf(api, in.FileSystemId); fs == nil {
			return out, fsNotFound(in.FileSystemId)
		}
	}
	after, e := parsePageToken("Marker", in.Marker, fs.ID)
	if e != nil {
		return out, e
	}
	mts, next := page(fs.mts, func(mt *mountTargetRec) uint64 { return mt.Seq }, after, max,
		func(*mountTargetRec) bool { return true }, fs.ID)
	for _, mt := range mts {
		out.MountTargets = append(out.MountTargets, describeMountTarget(mt, fs.owner()))
	}
	out.NextMarker = next
	return out, nil
}

// ---- tags ----

// updateTags applies change to the tags of a file system or an access point
// and stores the result. change returns the new list or an error.
func (s *state) updateTags(api service, id string, change func([]tag) ([]tag, *apiError)) *apiError {
	if strings.HasPrefix(id, "fsap-") {
		ap, e := s.lockReadyAccessPoint(api, id)
		if e != nil {
			return e
		}
		defer s.mu.Unlock()
		tags, e := change(ap.Tags)
		if e != nil {
			return e
		}
		rec := ap.accessPointRec
		rec.Tags = tags
		if err := s.store.commit(func(tx *bolt.Tx) error { return put(tx, bucketAccessPoints, id, &rec) }); err != nil {
			return internalError(err)
		}
		ap.Tags, ap.json = tags, nil
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fs := s.fsOf(api, id)
	if fs == nil {
		return fsNotFound(id)
	}
	tags, e := change(fs.Tags)
	if e != nil {
		return e
	}
	rec := fs.fileSystemRec
	rec.Tags = tags
	if err := s.store.commit(func(tx *bolt.Tx) error { return put(tx, bucketFileSystems, id, &rec) }); err != nil {
		return internalError(err)
	}
	fs.Tags = tags
	return nil
}

// dropTags is old without the keys in drop.
func dropTags(old []tag, drop map[string]bool) []tag {
	var out []tag
	for _, t := range old {
		if !drop[t.Key] {
			out = append(out, t)
		}
	}
	return out
}

// mergeTags sets add over old (a key already present takes the new value).
func mergeTags(old, add []tag) ([]tag, *apiError) {
	out := slices.Clone(old)
	for _, t := range add {
		if i := slices.IndexFunc(out, func(o tag) bool { return o.Key == t.Key }); i >= 0 {
			out[i].Value = t.Value
		} else {
			out = append(out, t)
		}
	}
	if len(out) > maxTags {
		return nil, badRequest("a resource may carry at most %d tags; this would make %d", maxTags, len(out))
	}
	return out, nil
}

func (s *state) listTags(api service, id string, next string, max int, now time.Time) ([]tag, string, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var tags []tag
	if strings.HasPrefix(id, "fsap-") {
		ap := s.apOf(api, id)
		if ap == nil || !ap.visible(now) {
			return nil, "", apNotFound(id)
		}
		tags = ap.Tags
	} else {
		fs := s.fsOf(api, id)
		if fs == nil {
			return nil, "", fsNotFound(id)
		}
		tags = fs.Tags
	}
	start := 0
	if next != "" {
		n, err := strconv.Atoi(next)
		if err != nil || n < 0 || n > len(tags) {
			return nil, "", badRequest("NextToken %q is not valid for this request", next)
		}
		start = n
	}
	end := min(start+max, len(tags))
	nextToken := ""
	if end < len(tags) {
		nextToken = strconv.Itoa(end)
	}
	return slices.Clone(tags[start:end]), nextToken, nil
}

// ---- accounts ----

// ownerOf is the account that owns resource id (a file system, or the file
// system of an access point or a mount target); false when id names nothing
// (the operation then answers its NotFound).
func (s *state) ownerOf(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fsID := id
	switch {
	case strings.HasPrefix(id, "fsap-"):
		ap := s.aps[id]
		if ap == nil {
			return "", false
		}
		fsID = ap.FileSystemID
	case strings.HasPrefix(id, "fsmt-"):
		mt := s.mts[id]
		if mt == nil {
			return "", false
		}
		fsID = mt.FileSystemID
	}
	fs := s.fss[fsID]
	if fs == nil {
		return "", false
	}
	return fs.owner(), true
}

// setOwner makes account the owner of file system id.
func (s *state) setOwner(id, account string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fs := s.fss[id]
	if fs == nil {
		return fmt.Errorf("file system %s does not exist", id)
	}
	rec := fs.fileSystemRec
	rec.Owner = ownerField(account)
	if err := s.store.commit(func(tx *bolt.Tx) error { return put(tx, bucketFileSystems, id, &rec) }); err != nil {
		return err
	}
	fs.Owner = rec.Owner
	for _, ap := range fs.aps {
		ap.account, ap.json = account, nil
	}
	return nil
}

// owners maps every file system to its owner; foreign reports whether any
// belongs to another account than the default.
func (s *state) owners() (owners map[string]string, foreign bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	owners = make(map[string]string, len(s.fss))
	for id, fs := range s.fss {
		owners[id] = fs.owner()
		foreign = foreign || fs.Owner != ""
	}
	return owners, foreign
}
