package emulator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// The Amazon S3 Files API (service ID "S3Files", signing name "s3files"), as
// the AWS SDK for Go v2 (service/s3files) serializes it: REST-JSON at the
// root of the endpoint (/access-points, /file-systems, /mount-targets,
// /resource-tags/{id}), camelCase keys, errors as the X-Amzn-ErrorType
// header plus {"message": ...}. It is served on the EFS API's listener; a
// request is told apart by its path (EFS lives under /2015-02-01/) and, when
// signed, by the service of its SigV4 credential scope (checkSigningService).
//
// The semantics are the EFS side's, on resources of their own: an S3 Files
// file system is DataDir/<fs-id> like an EFS one (so bind mounts of access
// point roots work alike), but neither API sees the other's resources or
// tokens. What differs, as the S3 Files API documents it:
//
//   - CreateAccessPoint: the client token is optional (the SDK fills one in);
//     a repeated token is ignored and the existing access point answered,
//     without error (Config.S3FilesStrictClientToken: only with identical
//     parameters, ConflictException otherwise).
//   - IDs: fs-/fsap- and 17 to 40 hex digits; ARNs
//     arn:aws:s3files:REGION:ACCOUNT:file-system/fs-X[/access-point/fsap-Y].
//   - Errors: ValidationException 400, ResourceNotFoundException 404,
//     ConflictException 409, ServiceQuotaExceededException 402 (the access
//     point limit), ThrottlingException 429, InternalServerException 500.
//   - ListAccessPoints answers neither client tokens nor tags (GetAccessPoint
//     does), as the SDK's ListAccessPointsDescription has neither.
//   - Fault injection and counts name operations "S3Files.<Operation>".

// The S3 Files operations, named as the SDK's tracing spans name them
// (ServiceID "." operation), so that they differ from EFS's.
const (
	OpS3CreateAccessPoint   Op = "S3Files.CreateAccessPoint"
	OpS3GetAccessPoint      Op = "S3Files.GetAccessPoint"
	OpS3ListAccessPoints    Op = "S3Files.ListAccessPoints"
	OpS3DeleteAccessPoint   Op = "S3Files.DeleteAccessPoint"
	OpS3CreateFileSystem    Op = "S3Files.CreateFileSystem"
	OpS3GetFileSystem       Op = "S3Files.GetFileSystem"
	OpS3ListFileSystems     Op = "S3Files.ListFileSystems"
	OpS3DeleteFileSystem    Op = "S3Files.DeleteFileSystem"
	OpS3CreateMountTarget   Op = "S3Files.CreateMountTarget"
	OpS3GetMountTarget      Op = "S3Files.GetMountTarget"
	OpS3ListMountTargets    Op = "S3Files.ListMountTargets"
	OpS3DeleteMountTarget   Op = "S3Files.DeleteMountTarget"
	OpS3TagResource         Op = "S3Files.TagResource"
	OpS3UntagResource       Op = "S3Files.UntagResource"
	OpS3ListTagsForResource Op = "S3Files.ListTagsForResource"
)

func s3Ops() []Op {
	return []Op{
		OpS3CreateAccessPoint, OpS3GetAccessPoint, OpS3ListAccessPoints, OpS3DeleteAccessPoint,
		OpS3CreateFileSystem, OpS3GetFileSystem, OpS3ListFileSystems, OpS3DeleteFileSystem,
		OpS3CreateMountTarget, OpS3GetMountTarget, OpS3ListMountTargets, OpS3DeleteMountTarget,
		OpS3TagResource, OpS3UntagResource, OpS3ListTagsForResource,
	}
}

// s3FileSystemIDRE is the S3 Files file system ID pattern (17 to 40 hex
// digits, where EFS allows 8).
var s3FileSystemIDRE = regexp.MustCompile(`^fs-[0-9a-f]{17,40}$`)

// ValidS3FilesFileSystemID reports whether id has S3 Files' file system ID format.
func ValidS3FilesFileSystemID(id string) bool { return s3FileSystemIDRE.MatchString(id) }

// Request shapes (the *Input types a Hook receives for S3 Files operations).

// S3FilesTag is one resource tag.
type S3FilesTag struct {
	Key   *string `json:"key"`
	Value *string `json:"value"`
}

// S3FilesPosixUser is the identity an access point imposes.
type S3FilesPosixUser struct {
	Uid           *int64  `json:"uid"`
	Gid           *int64  `json:"gid"`
	SecondaryGids []int64 `json:"secondaryGids,omitempty"`
}

// S3FilesCreationPermissions is the owner and mode of a missing root.
type S3FilesCreationPermissions struct {
	OwnerUid    *int64  `json:"ownerUid"`
	OwnerGid    *int64  `json:"ownerGid"`
	Permissions *string `json:"permissions"`
}

// S3FilesRootDirectory is an access point's root directory.
type S3FilesRootDirectory struct {
	Path                *string                     `json:"path,omitempty"`
	CreationPermissions *S3FilesCreationPermissions `json:"creationPermissions,omitempty"`
}

// S3FilesCreateAccessPointInput is the body of PUT /access-points.
type S3FilesCreateAccessPointInput struct {
	ClientToken   *string               `json:"clientToken"`
	FileSystemId  *string               `json:"fileSystemId"`
	PosixUser     *S3FilesPosixUser     `json:"posixUser"`
	RootDirectory *S3FilesRootDirectory `json:"rootDirectory"`
	Tags          []S3FilesTag          `json:"tags"`
}

// S3FilesCreateFileSystemInput is the body of PUT /file-systems.
type S3FilesCreateFileSystemInput struct {
	Bucket      *string      `json:"bucket"`
	RoleArn     *string      `json:"roleArn"`
	ClientToken *string      `json:"clientToken"`
	KmsKeyId    *string      `json:"kmsKeyId"`
	Prefix      *string      `json:"prefix"`
	Tags        []S3FilesTag `json:"tags"`
}

// S3FilesCreateMountTargetInput is the body of PUT /mount-targets.
type S3FilesCreateMountTargetInput struct {
	FileSystemId *string `json:"fileSystemId"`
	SubnetId     *string `json:"subnetId"`
	Ipv4Address  *string `json:"ipv4Address"`
}

// S3FilesTagResourceInput is POST /resource-tags/{resourceId}.
type S3FilesTagResourceInput struct {
	ResourceId string       `json:"-"`
	Tags       []S3FilesTag `json:"tags"`
}

// S3FilesRequest is what a Hook receives for the S3 Files operations
// without a body: the path's resource ID and the query.
type S3FilesRequest struct {
	ID    string
	Query url.Values
}

// Answer shapes.

type s3Tag struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type s3PosixUser struct {
	Uid           int64   `json:"uid"`
	Gid           int64   `json:"gid"`
	SecondaryGids []int64 `json:"secondaryGids,omitempty"`
}

type s3CreationPermissions struct {
	OwnerUid    int64  `json:"ownerUid"`
	OwnerGid    int64  `json:"ownerGid"`
	Permissions string `json:"permissions"`
}

type s3RootDirectory struct {
	Path                string                 `json:"path"`
	CreationPermissions *s3CreationPermissions `json:"creationPermissions,omitempty"`
}

// s3AccessPoint is GetAccessPoint's and CreateAccessPoint's answer; a
// listing leaves out ClientToken and Tags (omitempty, nil there).
type s3AccessPoint struct {
	AccessPointArn string          `json:"accessPointArn"`
	AccessPointId  string          `json:"accessPointId"`
	ClientToken    string          `json:"clientToken,omitempty"`
	FileSystemId   string          `json:"fileSystemId"`
	OwnerId        string          `json:"ownerId"`
	Status         string          `json:"status"`
	Name           string          `json:"name,omitempty"`
	PosixUser      *s3PosixUser    `json:"posixUser,omitempty"`
	RootDirectory  s3RootDirectory `json:"rootDirectory"`
	Tags           []s3Tag         `json:"tags,omitempty"`
}

type s3FileSystem struct {
	Bucket        string  `json:"bucket"`
	ClientToken   string  `json:"clientToken,omitempty"`
	CreationTime  float64 `json:"creationTime"`
	FileSystemArn string  `json:"fileSystemArn"`
	FileSystemId  string  `json:"fileSystemId"`
	KmsKeyId      string  `json:"kmsKeyId,omitempty"`
	Name          string  `json:"name,omitempty"`
	OwnerId       string  `json:"ownerId"`
	Prefix        string  `json:"prefix,omitempty"`
	RoleArn       string  `json:"roleArn"`
	Status        string  `json:"status"`
	Tags          []s3Tag `json:"tags,omitempty"`
}

type s3MountTarget struct {
	AvailabilityZoneId string `json:"availabilityZoneId"`
	FileSystemId       string `json:"fileSystemId"`
	Ipv4Address        string `json:"ipv4Address"`
	MountTargetId      string `json:"mountTargetId"`
	NetworkInterfaceId string `json:"networkInterfaceId"`
	OwnerId            string `json:"ownerId"`
	Status             string `json:"status"`
	SubnetId           string `json:"subnetId"`
	VpcId              string `json:"vpcId"`
}

func s3Tags(tags []wireTag) []s3Tag {
	out := make([]s3Tag, len(tags))
	for i, t := range tags {
		out[i] = s3Tag(t)
	}
	return out
}

func s3AccessPointARN(account, fsID, apID string) string {
	return fmt.Sprintf("arn:aws:s3files:%s:%s:file-system/%s/access-point/%s", region, account, fsID, apID)
}

// toS3AccessPoint renders an access point for S3 Files; full adds the
// client token and tags (Create and Get, not List).
func toS3AccessPoint(w wireAccessPoint, full bool) s3AccessPoint {
	out := s3AccessPoint{
		AccessPointArn: s3AccessPointARN(w.OwnerId, w.FileSystemId, w.AccessPointId),
		AccessPointId:  w.AccessPointId, FileSystemId: w.FileSystemId, OwnerId: w.OwnerId,
		Status: w.LifeCycleState, Name: w.Name,
		RootDirectory: s3RootDirectory{Path: w.RootDirectory.Path},
	}
	if pu := w.PosixUser; pu != nil {
		out.PosixUser = &s3PosixUser{Uid: pu.Uid, Gid: pu.Gid, SecondaryGids: pu.SecondaryGids}
	}
	if ci := w.RootDirectory.CreationInfo; ci != nil {
		out.RootDirectory.CreationPermissions = &s3CreationPermissions{OwnerUid: ci.OwnerUid, OwnerGid: ci.OwnerGid, Permissions: ci.Permissions}
	}
	if full {
		out.ClientToken, out.Tags = w.ClientToken, s3Tags(w.Tags)
	}
	return out
}

func toS3FileSystem(fs fileSystemRec, full bool) s3FileSystem {
	owner := (&fileSystem{fileSystemRec: fs}).owner()
	out := s3FileSystem{
		Bucket: fs.Bucket, CreationTime: float64(fs.Created.UnixNano()) / 1e9,
		FileSystemArn: fmt.Sprintf("arn:aws:s3files:%s:%s:file-system/%s", region, owner, fs.ID),
		FileSystemId:  fs.ID, Name: tagName(fs.Tags), OwnerId: owner, RoleArn: fs.RoleARN,
		Status: lifeCycleAvailable,
	}
	if full {
		out.ClientToken, out.KmsKeyId, out.Prefix, out.Tags = fs.CreationToken, fs.KmsKeyID, fs.Prefix, s3Tags(wireTags(fs.Tags))
	}
	return out
}

func toS3MountTarget(w wireMountTarget) s3MountTarget {
	return s3MountTarget{
		AvailabilityZoneId: w.AvailabilityZoneId, FileSystemId: w.FileSystemId, Ipv4Address: w.IpAddress,
		MountTargetId: w.MountTargetId, NetworkInterfaceId: w.NetworkInterfaceId, OwnerId: w.OwnerId,
		Status: w.LifeCycleState, SubnetId: w.SubnetId, VpcId: w.VpcId,
	}
}

// s3ErrorBody is the JSON of an S3 Files error answer.
type s3ErrorBody struct {
	Message      string `json:"message"`
	ResourceId   string `json:"resourceId,omitempty"`
	ResourceType string `json:"resourceType,omitempty"`
}

// writeS3Error answers e in S3 Files' terms: the EFS code becomes the S3
// Files exception the SDK types, with its status.
func writeS3Error(w http.ResponseWriter, e *apiError) {
	status, code := e.Status, e.ErrorCode
	body := s3ErrorBody{Message: e.Message}
	switch e.ErrorCode {
	case codeBadRequest:
		status, code = http.StatusBadRequest, "ValidationException"
	case codeAPNotFound, codeFSNotFound, codeMTNotFound:
		status, code = http.StatusNotFound, "ResourceNotFoundException"
	case codeAPLimitExceeded:
		status, code = http.StatusPaymentRequired, "ServiceQuotaExceededException"
	case codeConflict, codeAPAlreadyExists, codeFSAlreadyExists, codeFSInUse, codeMTConflict, codeIncorrectFSLifeCycle:
		status, code = http.StatusConflict, codeConflict
		body.ResourceId, body.ResourceType = e.AccessPointId, "AccessPoint"
		if e.AccessPointId == "" {
			body.ResourceId, body.ResourceType = e.FileSystemId, "FileSystem"
		}
	case codeInternal:
		code = "InternalServerException"
	}
	h := w.Header()
	h.Set("X-Amzn-ErrorType", code)
	h.Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// s3filesProtocol writes S3 Files' answers: JSON, and its errors.
var s3filesProtocol = protocol{writeError: writeS3Error, writeOK: writeJSON}

// s3Routes registers the S3 Files API on mux.
func (e *Emulator) s3Routes(mux *http.ServeMux) {
	api := func(pattern string, op Op, d decoder) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) { e.serveOp(w, r, op, s3filesProtocol, d) })
	}
	api("PUT /access-points", OpS3CreateAccessPoint, e.decodeS3CreateAccessPoint)
	api("GET /access-points/{id}", OpS3GetAccessPoint, byS3ID("accessPointId", "fsap", func(id string, _ url.Values) (int, any, *apiError) {
		ap, aerr := e.state.describeAccessPoint(svcS3Files, id, time.Now())
		return http.StatusOK, toS3AccessPoint(ap, true), aerr
	}))
	api("GET /access-points", OpS3ListAccessPoints, e.decodeS3ListAccessPoints)
	api("DELETE /access-points/{id}", OpS3DeleteAccessPoint, byS3ID("accessPointId", "fsap", func(id string, _ url.Values) (int, any, *apiError) {
		return http.StatusNoContent, nil, e.state.deleteAccessPoint(svcS3Files, id)
	}))
	api("PUT /file-systems", OpS3CreateFileSystem, e.decodeS3CreateFileSystem)
	api("GET /file-systems/{id}", OpS3GetFileSystem, byS3ID("fileSystemId", "fs", func(id string, _ url.Values) (int, any, *apiError) {
		fs, aerr := e.state.fileSystemsOf(svcS3Files, id, "", 1)
		if aerr != nil {
			return 0, nil, aerr
		}
		return http.StatusOK, toS3FileSystem(fs.list[0], true), nil
	}))
	api("GET /file-systems", OpS3ListFileSystems, e.decodeS3ListFileSystems)
	api("DELETE /file-systems/{id}", OpS3DeleteFileSystem, byS3ID("fileSystemId", "fs", func(id string, _ url.Values) (int, any, *apiError) {
		return http.StatusNoContent, nil, e.state.deleteFileSystem(svcS3Files, id)
	}))
	api("PUT /mount-targets", OpS3CreateMountTarget, e.decodeS3CreateMountTarget)
	api("GET /mount-targets/{id}", OpS3GetMountTarget, byS3ID("mountTargetId", "fsmt", func(id string, _ url.Values) (int, any, *apiError) {
		out, aerr := e.state.describeMountTargets(svcS3Files, &DescribeMountTargetsInput{MountTargetId: id}, 1, time.Now())
		if aerr != nil {
			return 0, nil, aerr
		}
		return http.StatusOK, toS3MountTarget(out.MountTargets[0]), nil
	}))
	api("GET /mount-targets", OpS3ListMountTargets, e.decodeS3ListMountTargets)
	api("DELETE /mount-targets/{id}", OpS3DeleteMountTarget, byS3ID("mountTargetId", "fsmt", func(id string, _ url.Values) (int, any, *apiError) {
		return http.StatusNoContent, nil, e.state.deleteMountTarget(svcS3Files, id)
	}))
	api("POST /resource-tags/{id}", OpS3TagResource, e.decodeS3TagResource)
	api("DELETE /resource-tags/{id}", OpS3UntagResource, byS3ID("resourceId", "fs", func(id string, q url.Values) (int, any, *apiError) {
		keys := q["tagKeys"]
		if len(keys) == 0 || len(keys) > maxTags {
			return 0, nil, badRequest("tagKeys: give 1 to %d keys", maxTags)
		}
		drop := map[string]bool{}
		for _, k := range keys {
			if aerr := validateTagKey(k); aerr != nil {
				return 0, nil, aerr
			}
			drop[k] = true
		}
		return http.StatusOK, struct{}{}, e.state.updateTags(svcS3Files, id, func(old []tag) ([]tag, *apiError) { return dropTags(old, drop), nil })
	}, "fsap"))
	api("GET /resource-tags/{id}", OpS3ListTagsForResource, byS3ID("resourceId", "fs", func(id string, q url.Values) (int, any, *apiError) {
		n, aerr := queryInt(q, "MaxResults", maxDescribeItems)
		if aerr != nil {
			return 0, nil, aerr
		}
		tags, next, aerr := e.state.listTags(svcS3Files, id, q.Get("NextToken"), orDefault(n), time.Now())
		return http.StatusOK, struct {
			Tags      []s3Tag `json:"tags"`
			NextToken string  `json:"nextToken,omitempty"`
		}{s3Tags(wireTags(tags)), next}, aerr
	}, "fsap"))
}

// byS3ID decodes a request naming one resource in its path; run applies it.
func byS3ID(field, kind string, run func(id string, q url.Values) (int, any, *apiError), more ...string) decoder {
	return func(r *http.Request) (request, *apiError) {
		id, aerr := resourceID(field, r.PathValue("id"), append([]string{kind}, more...)...)
		if aerr != nil {
			return request{}, aerr
		}
		q, aerr := parseQuery(r)
		if aerr != nil {
			return request{}, aerr
		}
		// tagKeys is UntagResource's (aws:TagKeys); no other such request has it.
		return request{in: &S3FilesRequest{ID: id, Query: q}, resource: id, iam: iamFacts{untagKeys: q["tagKeys"]},
			run: func() (int, any, *apiError) { return run(id, q) }}, nil
	}
}

func fromS3Tags(in []S3FilesTag) []Tag {
	out := make([]Tag, len(in))
	for i, t := range in {
		out[i] = Tag{Key: t.Key, Value: t.Value}
	}
	return out
}

func (e *Emulator) decodeS3CreateAccessPoint(r *http.Request) (request, *apiError) {
	in := new(S3FilesCreateAccessPointInput)
	if aerr := decodeBody(r, in); aerr != nil {
		return request{}, aerr
	}
	efsIn := &CreateAccessPointInput{ClientToken: in.ClientToken, FileSystemId: in.FileSystemId, Tags: fromS3Tags(in.Tags)}
	if efsIn.ClientToken == nil { // optional here: the SDK fills one in, other clients may not
		efsIn.ClientToken = new(string)
		*efsIn.ClientToken = e.rand.hex(32)
	}
	if pu := in.PosixUser; pu != nil {
		efsIn.PosixUser = &PosixUser{Uid: pu.Uid, Gid: pu.Gid, SecondaryGids: pu.SecondaryGids}
	}
	if rd := in.RootDirectory; rd != nil {
		efsIn.RootDirectory = &RootDirectory{Path: rd.Path}
		if cp := rd.CreationPermissions; cp != nil {
			efsIn.RootDirectory.CreationInfo = &CreationInfo{OwnerUid: cp.OwnerUid, OwnerGid: cp.OwnerGid, Permissions: cp.Permissions}
		}
	}
	n, aerr := validateCreateAccessPoint(efsIn)
	if aerr != nil {
		return request{}, aerr
	}
	n.api = svcS3Files
	return request{in: in, resource: n.fsID, iam: iamFacts{tags: n.tags, createAction: "CreateAccessPoint"}, run: func() (int, any, *apiError) {
		opt := createOptions{limit: e.cfg.AccessPointLimit, ignoreRepeat: true, strict: e.cfg.S3FilesStrictClientToken}
		if f := e.faults.get(OpS3CreateAccessPoint); f != nil && f.VisibilityDelay > 0 {
			opt.visibleAt = time.Now().Add(f.VisibilityDelay)
		}
		ap, aerr := e.state.createAccessPoint(n, opt)
		return http.StatusOK, toS3AccessPoint(ap, true), aerr
	}}, nil
}

// s3Page reads maxResults (1..maxAccessPointsPage, default defaultPageSize)
// and nextToken.
func s3Page(q url.Values) (int, string, *apiError) {
	n, aerr := queryInt(q, "maxResults", maxAccessPointsPage)
	return orDefault(n), q.Get("nextToken"), aerr
}

func (e *Emulator) decodeS3ListAccessPoints(r *http.Request) (request, *apiError) {
	q, aerr := parseQuery(r)
	if aerr != nil {
		return request{}, aerr
	}
	max, next, aerr := s3Page(q)
	if aerr != nil {
		return request{}, aerr
	}
	fsID, aerr := resourceID("fileSystemId", q.Get("fileSystemId"), "fs")
	if aerr != nil {
		return request{}, aerr
	}
	return request{in: &S3FilesRequest{ID: fsID, Query: q}, resource: fsID, run: func() (int, any, *apiError) {
		aps, tok, aerr := e.state.accessPointsOf(svcS3Files, fsID, next, max, time.Now())
		out := struct {
			AccessPoints []s3AccessPoint `json:"accessPoints"`
			NextToken    string          `json:"nextToken,omitempty"`
		}{AccessPoints: make([]s3AccessPoint, len(aps)), NextToken: tok}
		for i, ap := range aps {
			out.AccessPoints[i] = toS3AccessPoint(ap, false)
		}
		return http.StatusOK, out, aerr
	}}, nil
}

func (e *Emulator) decodeS3CreateFileSystem(r *http.Request) (request, *apiError) {
	in := new(S3FilesCreateFileSystemInput)
	if aerr := decodeBody(r, in); aerr != nil {
		return request{}, aerr
	}
	bucket, role := str(in.Bucket), str(in.RoleArn)
	if !bucketARNRE.MatchString(bucket) {
		return request{}, badRequest("bucket %q is not an S3 bucket ARN (arn:aws:s3:::NAME)", bucket)
	}
	if !s3RoleARNRE.MatchString(role) {
		return request{}, badRequest("roleArn %q is not an IAM role ARN", role)
	}
	token := str(in.ClientToken)
	if in.ClientToken == nil {
		token = e.rand.hex(32)
	}
	if aerr := validateToken("clientToken", token); aerr != nil {
		return request{}, aerr
	}
	tags, aerr := validateTags(fromS3Tags(in.Tags))
	if aerr != nil {
		return request{}, aerr
	}
	rec := fileSystemRec{API: svcS3Files, CreationToken: token, Bucket: bucket, RoleARN: role, Prefix: str(in.Prefix),
		KmsKeyID: str(in.KmsKeyId), Encrypted: true, Tags: tags, PerformanceMode: defaultPerformanceMode, ThroughputMode: defaultThroughputMode}
	return request{in: in, iam: iamFacts{tags: tags, createAction: "CreateFileSystem"}, run: func() (int, any, *apiError) {
		_, aerr := e.state.createFileSystem(rec, false)
		id := rec.ID
		if aerr != nil {
			if aerr.ErrorCode != codeFSAlreadyExists || aerr.FileSystemId == "" {
				return 0, nil, aerr
			}
			id = aerr.FileSystemId // an idempotency token: the existing file system
		}
		page, aerr := e.state.fileSystemsOf(svcS3Files, id, "", 1)
		if aerr == nil && page.list[0].CreationToken != token {
			aerr = internalError(fmt.Errorf("file system %s changed hands", id))
		}
		if aerr != nil {
			return 0, nil, aerr
		}
		return http.StatusOK, toS3FileSystem(page.list[0], true), nil
	}}, nil
}

var (
	bucketARNRE = regexp.MustCompile(`^arn:aws[-a-z]*:s3:::[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$`)
	s3RoleARNRE = regexp.MustCompile(`^arn:aws[-a-z]*:iam::[0-9]{12}:role/[\w+=,.@/\-]{1,512}$`)
)

func (e *Emulator) decodeS3ListFileSystems(r *http.Request) (request, *apiError) {
	q, aerr := parseQuery(r)
	if aerr != nil {
		return request{}, aerr
	}
	max, next, aerr := s3Page(q)
	if aerr != nil {
		return request{}, aerr
	}
	bucket := q.Get("bucket")
	return request{in: &S3FilesRequest{Query: q}, run: func() (int, any, *apiError) {
		page, aerr := e.state.fileSystemsOf(svcS3Files, "", next, max)
		out := struct {
			FileSystems []s3FileSystem `json:"fileSystems"`
			NextToken   string         `json:"nextToken,omitempty"`
		}{FileSystems: []s3FileSystem{}, NextToken: page.next}
		for _, fs := range page.list {
			if bucket == "" || fs.Bucket == bucket {
				out.FileSystems = append(out.FileSystems, toS3FileSystem(fs, false))
			}
		}
		return http.StatusOK, out, aerr
	}}, nil
}

func (e *Emulator) decodeS3CreateMountTarget(r *http.Request) (request, *apiError) {
	in := new(S3FilesCreateMountTargetInput)
	if aerr := decodeBody(r, in); aerr != nil {
		return request{}, aerr
	}
	efsIn := &CreateMountTargetInput{FileSystemId: in.FileSystemId, SubnetId: in.SubnetId, IpAddress: in.Ipv4Address}
	fsID, subnet, ip, aerr := validateCreateMountTarget(efsIn)
	if aerr != nil {
		return request{}, aerr
	}
	return request{in: in, resource: fsID, run: func() (int, any, *apiError) {
		mt, aerr := e.state.createMountTarget(svcS3Files, fsID, subnet, ip)
		return http.StatusOK, toS3MountTarget(mt), aerr
	}}, nil
}

func (e *Emulator) decodeS3ListMountTargets(r *http.Request) (request, *apiError) {
	q, aerr := parseQuery(r)
	if aerr != nil {
		return request{}, aerr
	}
	max, next, aerr := s3Page(q)
	if aerr != nil {
		return request{}, aerr
	}
	in := &DescribeMountTargetsInput{FileSystemId: q.Get("fileSystemId"), AccessPointId: q.Get("accessPointId"), Marker: next}
	if in.FileSystemId != "" && in.AccessPointId != "" {
		return request{}, badRequest("give at most one of fileSystemId and accessPointId")
	}
	if in.FileSystemId != "" {
		if in.FileSystemId, aerr = resourceID("fileSystemId", in.FileSystemId, "fs"); aerr != nil {
			return request{}, aerr
		}
	}
	if in.AccessPointId != "" {
		if in.AccessPointId, aerr = resourceID("accessPointId", in.AccessPointId, "fsap"); aerr != nil {
			return request{}, aerr
		}
	}
	return request{in: &S3FilesRequest{Query: q}, resource: in.FileSystemId + in.AccessPointId, run: func() (int, any, *apiError) {
		out, aerr := e.state.describeMountTargets(svcS3Files, in, max, time.Now())
		res := struct {
			MountTargets []s3MountTarget `json:"mountTargets"`
			NextToken    string          `json:"nextToken,omitempty"`
		}{MountTargets: make([]s3MountTarget, len(out.MountTargets)), NextToken: out.NextMarker}
		for i, mt := range out.MountTargets {
			res.MountTargets[i] = toS3MountTarget(mt)
		}
		return http.StatusOK, res, aerr
	}}, nil
}

func (e *Emulator) decodeS3TagResource(r *http.Request) (request, *apiError) {
	id, aerr := resourceID("resourceId", r.PathValue("id"), "fs", "fsap")
	if aerr != nil {
		return request{}, aerr
	}
	in := &S3FilesTagResourceInput{ResourceId: id}
	if aerr := decodeBody(r, in); aerr != nil {
		return request{}, aerr
	}
	if len(in.Tags) == 0 {
		return request{}, badRequest("tags is required")
	}
	add, aerr := validateTags(fromS3Tags(in.Tags))
	if aerr != nil {
		return request{}, aerr
	}
	return request{in: in, resource: id, iam: iamFacts{tags: add}, run: func() (int, any, *apiError) {
		return http.StatusOK, struct{}{}, e.state.updateTags(svcS3Files, id, func(old []tag) ([]tag, *apiError) { return mergeTags(old, add) })
	}}, nil
}

// seedS3FileSystem creates S3 Files file system id at start, with a
// loopback mount target, unless it exists.
func (e *Emulator) seedS3FileSystem(id string) error {
	if e.state.hasFileSystem(svcS3Files, id) {
		return mkdirFileSystem(e.cfg.DataDir, id) // its directory may have been removed
	}
	rec := fileSystemRec{ID: id, API: svcS3Files, CreationToken: id, Encrypted: true,
		Bucket: "arn:aws:s3:::emulator-" + id, RoleARN: "arn:aws:iam::" + accountID + ":role/emulator",
		PerformanceMode: defaultPerformanceMode, ThroughputMode: defaultThroughputMode}
	if _, aerr := e.state.createFileSystem(rec, true); aerr != nil {
		return fmt.Errorf("create S3 Files file system %s: %v", id, aerr)
	}
	e.log.Info("created S3 Files file system", "fileSystem", id)
	return nil
}

// signingServiceOf is the service of a SigV4 Authorization header's
// credential scope (Credential=AKID/DATE/REGION/SERVICE/aws4_request), ""
// when the request is unsigned or signed otherwise.
func signingServiceOf(r *http.Request) string {
	_, cred, ok := strings.Cut(r.Header.Get("Authorization"), "Credential=")
	if !ok {
		return ""
	}
	cred, _, _ = strings.Cut(cred, ",")
	parts := strings.Split(strings.TrimSpace(cred), "/")
	if len(parts) != 5 {
		return ""
	}
	return parts[3]
}

// signingService is the SigV4 service name op's requests carry ("": not
// checked).
func signingService(op Op) string {
	switch {
	case isS3Op(op):
		return "s3files"
	case op == OpAssumeRole:
		return ""
	}
	return "elasticfilesystem"
}

func isS3Op(op Op) bool { return strings.HasPrefix(string(op), "S3Files.") }
