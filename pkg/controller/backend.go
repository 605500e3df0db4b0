package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// API names the service a volume's access point lives in (volume.API: an
// ID's prefix says it too).
type API = volume.API

const (
	// APIEFS is Amazon EFS (provisioningMode efs-ap): the default.
	APIEFS = volume.APIEFS
	// APIS3Files is Amazon S3 Files (provisioningMode s3files-ap).
	APIS3Files = volume.APIS3Files
)

// Backend is where one volume's calls go: which API, with whose
// credentials. The zero Backend is this controller's own account's EFS
// (Config.EFS).
type Backend struct {
	API        API
	RoleARN    string // provisioner secret awsRoleArn; "" = the controller's own credentials
	ExternalID string // provisioner secret externalId
}

func (b Backend) String() string {
	s := "efs"
	if b.API != APIEFS {
		s = string(b.API)
	}
	if b.RoleARN != "" {
		s += " as " + b.RoleARN
	}
	return s
}

// Backends opens the clients of the backends other than the zero one.
// pkg/driver implements it. Contract:
//   - Open builds clients and makes no API call: credentials are fetched,
//     and refreshed before they expire, by the clients themselves.
//   - The controller calls Open once per distinct Backend and keeps what it
//     returns for the life of the process; an error is not kept (the next
//     call opens again). A backend this driver cannot serve wraps
//     ErrNotSupported.
//   - The mounter returned reaches the backend's file systems' roots (for
//     root-directory removal); nil means the controller's own mounter.
type Backends interface {
	Open(ctx context.Context, b Backend) (EFS, FileSystemMounter, error)
}

// MountTargetLister is implemented by clients that describe a file
// system's mount targets; the volume context of a cross-account volume
// names them (mounttargetip, mounttargetipmap).
type MountTargetLister interface {
	DescribeMountTargets(ctx context.Context, fsID string) ([]efs.MountTarget, error)
}

// Provisioner secret keys (csi.storage.k8s.io/provisioner-secret-name),
// spelled as the upstream driver spells them.
const (
	SecretRoleARN      = "awsRoleArn"
	SecretExternalID   = "externalId"
	SecretCrossAccount = "crossaccount"
)

// Volume context keys this controller writes for cross-account volumes; the
// node reads them (pkg/node).
const (
	CtxCrossAccount     = "crossaccount"
	CtxMountTargetIP    = "mounttargetip"
	CtxMountTargetIPMap = "mounttargetipmap"
)

// Volume context keys of directory volumes (efs-dir): the directory's
// owner, which a pod's securityContext names (fsGroup or
// supplementalGroups: the gid). The node accepts and ignores them.
const (
	CtxUID = "uid"
	CtxGID = "gid"
)

// externalIDRe is what STS accepts as an external ID.
var externalIDRe = regexp.MustCompile(`^[\w+=,.@:/-]+$`)

// secretsBackend reads the provisioner secrets that choose a backend's
// credentials. Values are never repeated in errors.
func secretsBackend(api API, secrets map[string]string) (Backend, error) {
	b := Backend{API: api}
	role, hasRole := secrets[SecretRoleARN]
	ext, hasExt := secrets[SecretExternalID]
	switch {
	case hasRole && !efs.ValidRoleARN(role):
		return Backend{}, fmt.Errorf("%w: provisioner secret %s is not an IAM role ARN (arn:aws:iam::<account>:role/<name>)", ErrInvalidRequest, SecretRoleARN)
	case hasExt && !hasRole:
		return Backend{}, fmt.Errorf("%w: provisioner secret %s needs %s", ErrInvalidRequest, SecretExternalID, SecretRoleARN)
	case hasExt && (len(ext) < 2 || len(ext) > 1224 || !externalIDRe.MatchString(ext)):
		return Backend{}, fmt.Errorf("%w: provisioner secret %s is not a valid external ID (2-1224 characters of letters, digits and +=,.@:/-)", ErrInvalidRequest, SecretExternalID)
	}
	b.RoleARN, b.ExternalID = role, ext
	return b, nil
}

// crossAccountMode reads the crossaccount secret: true writes
// crossaccount into the volume context instead of mount target IPs.
func crossAccountMode(secrets map[string]string) (bool, error) {
	v, ok := secrets[SecretCrossAccount]
	if !ok {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: provisioner secret %s is not a boolean", ErrInvalidRequest, SecretCrossAccount)
	}
	return b, nil
}

// apiOfMode is the API a class's provisioningMode provisions through.
func apiOfMode(params map[string]string) API {
	if params[volume.ParamProvisioningMode] == volume.ProvisioningModeS3FilesAccessPoint {
		return APIS3Files
	}
	return APIEFS
}

// maxBackends bounds the backends kept at once: each holds a client (and
// a role's cached credentials), and provisioner secrets are the tenants' to
// choose. One that is dropped is opened again at its next call.
const maxBackends = 64

// backend returns the Service that serves b: s itself for the zero
// backend, else a copy of s over b's client, mounter and logger, made at
// first use. Every copy shares s's state (shared: the lock table, the GID
// allocator, the record, the answers, root-directory removal), so one file
// system has one view whichever credentials or API reach it, and a create
// and a delete of one volume exclude each other whichever backend each
// names.
func (s *Service) backend(ctx context.Context, b Backend) (*Service, error) {
	if b == (Backend{}) {
		return s, nil
	}
	s.bmu.Lock()
	defer s.bmu.Unlock()
	if svc, ok := s.others[b]; ok {
		return svc, nil
	}
	if s.backends == nil {
		return nil, fmt.Errorf("%w: %s (no client for it is configured)", ErrNotSupported, b)
	}
	client, mounter, err := s.backends.Open(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", b, err)
	}
	svc := &Service{efs: client, mounter: s.mounter, log: s.log.With(slog.String("backend", b.String())), api: b.API,
		made: newMadeAPs(), shared: s.shared}
	if d, ok := client.(FileSystemDescriber); ok {
		svc.describer = d // the backend's file systems are described as its own
	}
	if mounter != nil {
		svc.mounter = mounter
	}
	if len(s.others) >= maxBackends {
		for k := range s.others {
			if k != (Backend{API: APIS3Files}) {
				delete(s.others, k)
				break
			}
		}
	}
	s.others[b] = svc
	return svc, nil
}

// dropBackend forgets b's Service after its credentials were refused: a
// role that does not trust this controller keeps nothing.
func (s *Service) dropBackend(b Backend) {
	s.bmu.Lock()
	delete(s.others, b)
	s.bmu.Unlock()
}

// services is s and every backend's Service made so far.
func (s *Service) services() []*Service {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	all := []*Service{s}
	for _, svc := range s.others {
		all = append(all, svc)
	}
	return all
}

// volumeID is the ID CreateVolume answers for an access point of this
// Service's API.
func (s *Service) volumeID(ap *efs.AccessPoint) string {
	if s.api == APIS3Files {
		return volume.ProvisionedS3FilesID(ap.FileSystemID, ap.ID)
	}
	return volume.ProvisionedID(ap.FileSystemID, ap.ID)
}

// volumeContext is what a volume of backend b tells the node about its
// mount target. Volumes in the controller's own account need nothing: the
// node resolves the file system's DNS name. A volume in another account's
// file system is reached by mount target IP, which the node cannot look up
// with its own credentials: crossaccount "true" leaves it to efs-utils
// (crossaccount mount option); the class's az picks that zone's mount
// target (another one at random if the zone has none); otherwise every
// zone's, from which each node picks its own (pkg/node).
func (s *Service) volumeContext(ctx context.Context, b Backend, crossAccount bool, az, fsID string) (map[string]string, error) {
	switch {
	case crossAccount:
		return map[string]string{CtxCrossAccount: "true"}, nil
	case b.RoleARN == "":
		return nil, nil
	}
	mtl, ok := s.efs.(MountTargetLister)
	if !ok {
		return nil, nil
	}
	mts, err := mtl.DescribeMountTargets(ctx, fsID)
	if err != nil {
		return nil, fmt.Errorf("mount targets of %s: %w", fsID, err)
	}
	mts = slices.DeleteFunc(mts, func(mt efs.MountTarget) bool {
		return mt.IPAddress == "" || (mt.LifeCycleState != "" && mt.LifeCycleState != "available")
	})
	if len(mts) == 0 {
		return nil, fmt.Errorf("%w: file system %s has no available mount target", efs.ErrIncorrectState, fsID)
	}
	if az != "" {
		var inZone []efs.MountTarget
		for _, mt := range mts {
			if mt.AvailabilityZoneName == az || mt.AvailabilityZoneID == az {
				inZone = append(inZone, mt)
			}
		}
		if len(inZone) == 0 {
			s.log.Warn("no mount target in the class's zone: using another zone's", slog.String("fileSystem", fsID), slog.String("az", az))
			inZone = mts
		}
		return map[string]string{CtxMountTargetIP: inZone[rand.IntN(len(inZone))].IPAddress}, nil
	}
	byZone := map[string]string{}
	for _, mt := range mts {
		if _, ok := byZone[mt.AvailabilityZoneName]; !ok && mt.AvailabilityZoneName != "" {
			byZone[mt.AvailabilityZoneName] = mt.IPAddress
		}
	}
	if len(byZone) == 0 {
		return nil, fmt.Errorf("%w: mount targets of %s name no zone", efs.ErrIncorrectState, fsID)
	}
	js, err := json.Marshal(byZone)
	if err != nil {
		return nil, err
	}
	return map[string]string{CtxMountTargetIPMap: string(js)}, nil
}

// backendOfID is the backend a DeleteVolume (or another call on an
// existing volume) acts through: the API its ID names, with the
// credentials of its secrets. The ID without its API prefix is returned
// for parsing.
func backendOfID(volumeID string, secrets map[string]string) (Backend, string, error) {
	api, rest := APIEFS, volumeID
	if r, ok := strings.CutPrefix(volumeID, volume.S3FilesPrefix); ok {
		api, rest = APIS3Files, r
	}
	b, err := secretsBackend(api, secrets)
	return b, rest, err
}
