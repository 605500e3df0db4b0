package audit

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// backendKey is where a file system's access points are read, as the
// controller's backends: the API, and the role of the class's provisioner
// secret ("" = the audit's own credentials, the SDK's standard chain).
type backendKey struct {
	api  volume.API
	role string
}

func (k backendKey) credentials() string {
	if k.role == "" {
		return "own"
	}
	return "role " + k.role
}

// clients are the audit's EFS and S3 Files clients, made at first use:
// pkg/efs's, so that listings are paged and paced as the driver's are.
type clients struct {
	cfg efs.Config

	mu      sync.Mutex
	own     *efs.Client
	s3      *efs.S3Files
	roles   map[string]*efs.Client
	extIDs  map[string]string // role -> the external ID its secret names
	svcs    map[backendKey]*controller.Service
	journal journal.Store
	cluster string
}

func newClients(cfg efs.Config) *clients {
	return &clients{cfg: cfg, roles: map[string]*efs.Client{}, extIDs: map[string]string{}, svcs: map[backendKey]*controller.Service{}}
}

func (c *clients) setExternalID(role, ext string) {
	c.mu.Lock()
	c.extIDs[role] = ext
	c.mu.Unlock()
}

// efsClient is the EFS client of role ("" = own).
func (c *clients) efsClient(ctx context.Context, role string) (*efs.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.own == nil {
		own, err := efs.New(ctx, c.cfg)
		if err != nil {
			return nil, fmt.Errorf("EFS client: %w", err)
		}
		c.own = own
	}
	if role == "" {
		return c.own, nil
	}
	if r := c.roles[role]; r != nil {
		return r, nil
	}
	r, err := c.own.AsRole(role, c.extIDs[role])
	if err != nil {
		return nil, fmt.Errorf("EFS client as %s: %w", role, err)
	}
	c.roles[role] = r
	return r, nil
}

// s3Files is the S3 Files client (own credentials only, as the driver).
func (c *clients) s3Files(ctx context.Context) (*efs.S3Files, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.s3 == nil {
		s3, err := efs.NewS3Files(ctx, c.cfg)
		if err != nil {
			return nil, fmt.Errorf("S3 Files client: %w", err)
		}
		c.s3 = s3
	}
	return c.s3, nil
}

// lister is the client that reads k's file systems.
func (c *clients) lister(ctx context.Context, k backendKey) (controller.EFS, error) {
	switch {
	case k.api == volume.APIEFS:
		return c.efsClient(ctx, k.role)
	case k.api == volume.APIS3Files && k.role == "":
		return c.s3Files(ctx)
	}
	return nil, fmt.Errorf("%w: S3 Files as another account's role (%s)", controller.ErrNotSupported, k.role)
}

// service is an in-process controller whose own credentials are k's (its
// EFS client is k's role's, when k names one), on the cluster's record:
// its CollectOrphan deletes with DeleteVolume's ownership checks. Its S3
// Files backend is the audit's S3 Files client.
func (c *clients) service(ctx context.Context, k backendKey) (*controller.Service, error) {
	client, err := c.efsClient(ctx, k.role)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.journal == nil {
		return nil, errors.New("no record to act on")
	}
	k.api = volume.APIEFS // a Service serves both APIs: CollectOrphan picks by the record
	if s := c.svcs[k]; s != nil {
		return s, nil
	}
	var backends controller.Backends
	if k.role == "" {
		backends = s3Backend{c}
	}
	s, err := controller.New(controller.Config{EFS: client, Journal: c.journal, ClusterID: c.cluster, Backends: backends,
		Logger: c.cfg.Logger})
	if err != nil {
		return nil, err
	}
	c.svcs[k] = s
	return s, nil
}

// s3Backend opens the audit's S3 Files client for the controller.
type s3Backend struct{ c *clients }

func (b s3Backend) Open(ctx context.Context, be controller.Backend) (controller.EFS, controller.FileSystemMounter, error) {
	if be.API == controller.APIS3Files && be.RoleARN == "" {
		s3, err := b.c.s3Files(ctx)
		return s3, nil, err
	}
	return nil, nil, fmt.Errorf("%w: %s", controller.ErrNotSupported, be)
}
