package emulator

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// The request and answer shapes of the EFS REST-JSON protocol, as the AWS SDK
// for Go v2 (service/efs) serializes and deserializes them. Field names are
// the JSON keys. The *Input types are also what a Hook receives as req.

// Tag is one resource tag.
type Tag struct {
	Key   *string `json:"Key"`
	Value *string `json:"Value"`
}

// CreationInfo is the owner and mode of a missing access point root.
type CreationInfo struct {
	OwnerUid    *int64  `json:"OwnerUid"`
	OwnerGid    *int64  `json:"OwnerGid"`
	Permissions *string `json:"Permissions"`
}

// PosixUser is the identity an access point imposes.
type PosixUser struct {
	Uid           *int64  `json:"Uid"`
	Gid           *int64  `json:"Gid"`
	SecondaryGids []int64 `json:"SecondaryGids,omitempty"`
}

// RootDirectory is an access point's root directory.
type RootDirectory struct {
	Path         *string       `json:"Path,omitempty"`
	CreationInfo *CreationInfo `json:"CreationInfo,omitempty"`
}

// CreateAccessPointInput is the body of POST /2015-02-01/access-points.
type CreateAccessPointInput struct {
	ClientToken   *string        `json:"ClientToken"`
	FileSystemId  *string        `json:"FileSystemId"`
	PosixUser     *PosixUser     `json:"PosixUser"`
	RootDirectory *RootDirectory `json:"RootDirectory"`
	Tags          []Tag          `json:"Tags"`
}

// DescribeAccessPointsInput is the query of GET /2015-02-01/access-points.
type DescribeAccessPointsInput struct {
	AccessPointId string
	FileSystemId  string
	MaxResults    int // 0: default
	NextToken     string
}

// DeleteAccessPointInput is DELETE /2015-02-01/access-points/{AccessPointId}.
type DeleteAccessPointInput struct {
	AccessPointId string
}

// CreateFileSystemInput is the body of POST /2015-02-01/file-systems.
type CreateFileSystemInput struct {
	CreationToken                *string  `json:"CreationToken"`
	PerformanceMode              *string  `json:"PerformanceMode"`
	ThroughputMode               *string  `json:"ThroughputMode"`
	ProvisionedThroughputInMibps *float64 `json:"ProvisionedThroughputInMibps"`
	Encrypted                    *bool    `json:"Encrypted"`
	KmsKeyId                     *string  `json:"KmsKeyId"`
	AvailabilityZoneName         *string  `json:"AvailabilityZoneName"`
	Backup                       *bool    `json:"Backup"`
	Tags                         []Tag    `json:"Tags"`
}

// DescribeFileSystemsInput is the query of GET /2015-02-01/file-systems.
type DescribeFileSystemsInput struct {
	FileSystemId  string
	CreationToken string
	Marker        string
	MaxItems      int // 0: default
}

// DeleteFileSystemInput is DELETE /2015-02-01/file-systems/{FileSystemId}.
type DeleteFileSystemInput struct {
	FileSystemId string
}

// CreateMountTargetInput is the body of POST /2015-02-01/mount-targets.
type CreateMountTargetInput struct {
	FileSystemId   *string  `json:"FileSystemId"`
	SubnetId       *string  `json:"SubnetId"`
	IpAddress      *string  `json:"IpAddress"`
	SecurityGroups []string `json:"SecurityGroups"`
}

// DescribeMountTargetsInput is the query of GET /2015-02-01/mount-targets.
type DescribeMountTargetsInput struct {
	FileSystemId  string
	MountTargetId string
	AccessPointId string
	Marker        string
	MaxItems      int // 0: default
}

// DeleteMountTargetInput is DELETE /2015-02-01/mount-targets/{MountTargetId}.
type DeleteMountTargetInput struct {
	MountTargetId string
}

// TagResourceInput is POST /2015-02-01/resource-tags/{ResourceId}.
type TagResourceInput struct {
	ResourceId string `json:"-"`
	Tags       []Tag  `json:"Tags"`
}

// UntagResourceInput is DELETE /2015-02-01/resource-tags/{ResourceId}?tagKeys=.
type UntagResourceInput struct {
	ResourceId string
	TagKeys    []string
}

// ListTagsForResourceInput is GET /2015-02-01/resource-tags/{ResourceId}.
type ListTagsForResourceInput struct {
	ResourceId string
	MaxResults int // 0: default
	NextToken  string
}

// Answer shapes. Every list the SDK models as required is always present.

type wireTag struct {
	Key   string `json:"Key"`
	Value string `json:"Value"`
}

type wireCreationInfo struct {
	OwnerUid    int64  `json:"OwnerUid"`
	OwnerGid    int64  `json:"OwnerGid"`
	Permissions string `json:"Permissions"`
}

type wirePosixUser struct {
	Uid           int64   `json:"Uid"`
	Gid           int64   `json:"Gid"`
	SecondaryGids []int64 `json:"SecondaryGids,omitempty"`
}

type wireRootDirectory struct {
	Path         string            `json:"Path"`
	CreationInfo *wireCreationInfo `json:"CreationInfo,omitempty"`
}

type wireAccessPoint struct {
	AccessPointArn string            `json:"AccessPointArn"`
	AccessPointId  string            `json:"AccessPointId"`
	ClientToken    string            `json:"ClientToken"`
	FileSystemId   string            `json:"FileSystemId"`
	LifeCycleState string            `json:"LifeCycleState"`
	Name           string            `json:"Name,omitempty"`
	OwnerId        string            `json:"OwnerId"`
	PosixUser      *wirePosixUser    `json:"PosixUser,omitempty"`
	RootDirectory  wireRootDirectory `json:"RootDirectory"`
	Tags           []wireTag         `json:"Tags"`
}

type wireSize struct {
	Value     int64   `json:"Value"`
	Timestamp float64 `json:"Timestamp"`
}

type wireFileSystem struct {
	AvailabilityZoneId           string    `json:"AvailabilityZoneId,omitempty"`
	AvailabilityZoneName         string    `json:"AvailabilityZoneName,omitempty"`
	CreationTime                 float64   `json:"CreationTime"`
	CreationToken                string    `json:"CreationToken"`
	Encrypted                    bool      `json:"Encrypted"`
	FileSystemArn                string    `json:"FileSystemArn"`
	FileSystemId                 string    `json:"FileSystemId"`
	KmsKeyId                     string    `json:"KmsKeyId,omitempty"`
	LifeCycleState               string    `json:"LifeCycleState"`
	Name                         string    `json:"Name,omitempty"`
	NumberOfMountTargets         int       `json:"NumberOfMountTargets"`
	OwnerId                      string    `json:"OwnerId"`
	PerformanceMode              string    `json:"PerformanceMode"`
	ProvisionedThroughputInMibps *float64  `json:"ProvisionedThroughputInMibps,omitempty"`
	SizeInBytes                  wireSize  `json:"SizeInBytes"`
	Tags                         []wireTag `json:"Tags"`
	ThroughputMode               string    `json:"ThroughputMode"`
}

type wireMountTarget struct {
	AvailabilityZoneId   string `json:"AvailabilityZoneId"`
	AvailabilityZoneName string `json:"AvailabilityZoneName"`
	FileSystemId         string `json:"FileSystemId"`
	IpAddress            string `json:"IpAddress"`
	LifeCycleState       string `json:"LifeCycleState"`
	MountTargetId        string `json:"MountTargetId"`
	NetworkInterfaceId   string `json:"NetworkInterfaceId"`
	OwnerId              string `json:"OwnerId"`
	SubnetId             string `json:"SubnetId"`
	VpcId                string `json:"VpcId"`
}

type describeAccessPointsOutput struct {
	AccessPoints []wireAccessPoint `json:"AccessPoints"`
	NextToken    string            `json:"NextToken,omitempty"`
}

type describeFileSystemsOutput struct {
	FileSystems []wireFileSystem `json:"FileSystems"`
	Marker      string           `json:"Marker,omitempty"`
	NextMarker  string           `json:"NextMarker,omitempty"`
}

type describeMountTargetsOutput struct {
	MountTargets []wireMountTarget `json:"MountTargets"`
	Marker       string            `json:"Marker,omitempty"`
	NextMarker   string            `json:"NextMarker,omitempty"`
}

type listTagsOutput struct {
	Tags      []wireTag `json:"Tags"`
	NextToken string    `json:"NextToken,omitempty"`
}

// apiError is an EFS error answer: a status, the code the SDK maps to a typed
// error (sent in x-amzn-ErrorType and in the body), a message, and for the
// AlreadyExists errors the existing resource's ID.
type apiError struct {
	Status        int    `json:"-"`
	ErrorCode     string `json:"ErrorCode"`
	Message       string `json:"Message"`
	AccessPointId string `json:"AccessPointId,omitempty"`
	FileSystemId  string `json:"FileSystemId,omitempty"`
}

func (e *apiError) Error() string { return e.ErrorCode + ": " + e.Message }

// Error codes the emulator answers.
const (
	codeBadRequest            = "BadRequest"
	codeAPAlreadyExists       = "AccessPointAlreadyExists"
	codeAPLimitExceeded       = "AccessPointLimitExceeded"
	codeAPNotFound            = "AccessPointNotFound"
	codeFSNotFound            = "FileSystemNotFound"
	codeFSAlreadyExists       = "FileSystemAlreadyExists"
	codeFSInUse               = "FileSystemInUse"
	codeMTNotFound            = "MountTargetNotFound"
	codeMTConflict            = "MountTargetConflict"
	codeAZMismatch            = "AvailabilityZonesMismatch"
	codeIncorrectFSLifeCycle  = "IncorrectFileSystemLifeCycleState"
	codeThrottling            = "ThrottlingException"
	codeInternal              = "InternalServerError"
	codeUnknownOperation      = "UnknownOperationException"
	codeConflict              = "ConflictException" // S3 Files only
	lifeCycleAvailable        = "available"
	defaultPerformanceMode    = "generalPurpose"
	defaultThroughputMode     = "bursting"
	emptyFileSystemSizeInByte = 6144
)

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, ErrorCode: code, Message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *apiError {
	return errorf(http.StatusBadRequest, codeBadRequest, format, args...)
}

func apNotFound(id string) *apiError {
	return errorf(http.StatusNotFound, codeAPNotFound, "Access point '%s' does not exist.", id)
}

func fsNotFound(id string) *apiError {
	return errorf(http.StatusNotFound, codeFSNotFound, "File system '%s' does not exist.", id)
}

func mtNotFound(id string) *apiError {
	return errorf(http.StatusNotFound, codeMTNotFound, "Mount target '%s' does not exist.", id)
}

func internalError(err error) *apiError {
	return errorf(http.StatusInternalServerError, codeInternal, "internal error: %v", err)
}

// writeError answers e: the x-amzn-ErrorType header must be set before the
// status, since the SDK picks the typed error from it.
func writeError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	h.Set("x-amzn-ErrorType", e.ErrorCode)
	h.Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(e)
}

// rawJSON is an answer body encoded already.
type rawJSON []byte

// writeJSON answers a success with a JSON body, or none when body is nil.
func writeJSON(w http.ResponseWriter, status int, body any) {
	if body == nil {
		w.WriteHeader(status)
		return
	}
	b, ok := body.(rawJSON)
	if !ok {
		var err error
		if b, err = json.Marshal(body); err != nil {
			writeError(w, internalError(err))
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
