// Package efs is the driver's view of the Amazon EFS API: plain value types,
// sentinel errors that classify every failure, and (in sdk.go) the AWS SDK v2
// implementation with retries inside the caller's deadline and adaptive
// per-operation pacing.
//
// Consumers own the interfaces they need (pkg/controller declares the subset
// it calls); this package only promises how the values and errors look.
package efs

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by the SDK client wraps exactly one of
// them, so callers classify with errors.Is and never parse messages.
var (
	// ErrAccessPointNotFound: the access point does not exist (HTTP 404).
	ErrAccessPointNotFound = errors.New("access point not found")
	// ErrFileSystemNotFound: the file system does not exist (HTTP 404).
	ErrFileSystemNotFound = errors.New("file system not found")
	// ErrAlreadyExists: the ClientToken was used before. The error is an
	// *AlreadyExistsError carrying the existing access point's ID.
	ErrAlreadyExists = errors.New("access point already exists")
	// ErrLimitExceeded: the file system holds the maximum number of access points.
	ErrLimitExceeded = errors.New("access point limit exceeded")
	// ErrThrottled: EFS answered with a throttle (HTTP 429, or a throttling
	// error code) and retries ran out within the caller's deadline.
	ErrThrottled = errors.New("EFS answered ThrottlingException")
	// ErrPaced: the request was not sent: client-side pacing (a rate token
	// or a request slot) would not come in time for the caller's deadline.
	ErrPaced = errors.New("not sent: client-side pacing")
	// ErrUnavailable: a 5xx answer, a lost connection or a timeout: the outcome
	// of a mutating call is unknown, and the caller must retry idempotently.
	ErrUnavailable = errors.New("EFS API unavailable")
	// ErrAccessDenied: the credentials may not perform the call.
	ErrAccessDenied = errors.New("access denied by EFS API")
	// ErrBadRequest: the API rejected the parameters (HTTP 400).
	ErrBadRequest = errors.New("bad request to EFS API")
	// ErrIncorrectState: the resource is in a lifecycle state that forbids the call.
	ErrIncorrectState = errors.New("incorrect lifecycle state")
)

// AlreadyExistsError is returned by CreateAccessPoint when the ClientToken
// has been used before; AccessPointID names the access point that owns it.
type AlreadyExistsError struct {
	AccessPointID string
}

func (e *AlreadyExistsError) Error() string {
	return fmt.Sprintf("%v: %s", ErrAlreadyExists, e.AccessPointID)
}

// Is makes errors.Is(err, ErrAlreadyExists) true.
func (e *AlreadyExistsError) Is(target error) bool { return target == ErrAlreadyExists }

// PosixUser is the identity an access point imposes on every NFS operation.
type PosixUser struct {
	UID, GID      int64
	SecondaryGIDs []int64
}

// CreationInfo is applied when EFS creates a missing root directory.
type CreationInfo struct {
	OwnerUID, OwnerGID int64
	Permissions        string // octal, e.g. "700"
}

// AccessPoint describes one access point.
type AccessPoint struct {
	ID             string
	FileSystemID   string
	ClientToken    string
	Path           string        // root directory, absolute
	CreationInfo   *CreationInfo // nil when the root directory pre-existed
	PosixUser      *PosixUser
	Tags           map[string]string
	LifeCycleState string // "available", "creating", "deleting", ...
}

// CreateAccessPointInput is what the driver sends to create an access point.
// Retries of one CreateVolume must send an identical input.
type CreateAccessPointInput struct {
	FileSystemID string
	ClientToken  string // at most 64 characters
	Path         string
	CreationInfo *CreationInfo
	PosixUser    *PosixUser
	Tags         map[string]string
}

// FileSystem describes one file system.
type FileSystem struct {
	ID             string
	LifeCycleState string
	Tags           map[string]string
	// AvailabilityZoneName and AvailabilityZoneID name the zone of a One
	// Zone file system; both are "" for a regional one. A file system's
	// zone never changes.
	AvailabilityZoneName string
	AvailabilityZoneID   string
}

// MountTarget describes one mount target of a file system.
type MountTarget struct {
	ID                   string
	FileSystemID         string
	IPAddress            string
	AvailabilityZoneName string
	AvailabilityZoneID   string
	LifeCycleState       string
}

// Collect gathers every page a paged listing yields, such as
// Client.ListAccessPoints for one file system.
func Collect(ctx context.Context, list func(context.Context, string, func([]AccessPoint) error) error, fsID string) ([]AccessPoint, error) {
	var all []AccessPoint
	err := list(ctx, fsID, func(page []AccessPoint) error {
		all = append(all, page...)
		return nil
	})
	return all, err
}
