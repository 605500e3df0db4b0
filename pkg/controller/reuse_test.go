package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// reuseClass is a reuseAccessPoint class for claim `data` in namespace ns.
func reuseClass(ns string, extra ...string) map[string]string {
	return params(append([]string{"reuseAccessPoint", "true", "subPathPattern", "${.PVC.namespace}/${.PVC.name}",
		"csi.storage.k8s.io/pvc/name", "data", "csi.storage.k8s.io/pvc/namespace", ns}, extra...)...)
}

// A claim `data` re-created in its namespace gets its access point back; a
// claim `data` in another namespace or cluster, or of another size, does not get it:
// it is ALREADY_EXISTS, never a shared access point.
func TestReuseAccessPointStaysInItsNamespace(t *testing.T) {
	// Another cluster's claim of the name is told by the cluster-ID tag.
	b := newBed(t, descriptive, func(c *Config) { c.ClusterID = "this-cluster" })
	first, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-1", 1<<30, reuseClass("prod")))
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-2", 1<<30, reuseClass("prod")))
	if err != nil || again.Volume.VolumeId != first.Volume.VolumeId {
		t.Fatalf("re-created claim in its namespace: %v, %v; want %s", again, err, first.Volume.VolumeId)
	}
	for _, tt := range []struct {
		name string
		req  func() error
	}{
		{"another namespace", func() error {
			_, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-3", 1<<30, reuseClass("evil")))
			return err
		}},
		{"another capacity", func() error {
			_, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-4", 2<<30, reuseClass("prod")))
			return err
		}},
		{"another cluster", func() error {
			other := newBedOn(t, b.url, b.emu, descriptive, func(c *Config) { c.ClusterID = "other-cluster" })
			_, err := other.svc.CreateVolume(other.ctx(), createReq("pvc-6", 1<<30, reuseClass("prod")))
			return err
		}},
		{"another base path", func() error {
			_, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-5", 1<<30, reuseClass("prod", "basePath", "/elsewhere")))
			return err
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.req(); !errors.Is(err, ErrIncompatible) {
				t.Fatalf("err = %v, want ErrIncompatible (ALREADY_EXISTS)", err)
			}
		})
	}
	b.wantAccessPoints(1)
}

// An access point the upstream driver made for claim `data` (its token, no
// tags of ours) is reused only if its root directory is one this class makes.
func TestReuseOfUpstreamAccessPointNeedsItsDirectory(t *testing.T) {
	sum := sha256.Sum256([]byte("data"))
	token := hex.EncodeToString(sum[:])
	for _, tt := range []struct {
		name, path string
		ok         bool
	}{
		{"this class's directory", "/prod/data-0b5d7f4e-3a2c-8d1e-9f6a-7c4b2e1d0a93", true},
		{"another namespace's directory", "/evil/data-0b5d7f4e-3a2c-8d1e-9f6a-7c4b2e1d0a93", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBed(t)
			if _, err := b.client.CreateAccessPoint(b.ctx(), efs.CreateAccessPointInput{FileSystemID: testFS, ClientToken: token,
				Path: tt.path, PosixUser: &efs.PosixUser{UID: 50001, GID: 50001},
				Tags: map[string]string{TagCluster: "true"}}); err != nil {
				t.Fatal(err)
			}
			_, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-1", 1<<30, reuseClass("prod")))
			if tt.ok && err != nil || !tt.ok && !errors.Is(err, ErrIncompatible) {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}
