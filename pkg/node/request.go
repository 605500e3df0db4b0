package node

import (
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Volume context keys NodePublishVolume reads, compared case-insensitively
// as upstream does. Anything else is INVALID_ARGUMENT.
const (
	ctxEncryptInTransit = "encryptintransit"
	ctxMountTargetIP    = "mounttargetip"
	ctxCrossAccount     = "crossaccount"
	// ctxPath is upstream's deprecated sub path, used when the volume ID
	// has none; static PVs still carry it.
	ctxPath = "path"
	// ctxProvisionerIdentity is added by the external-provisioner to every
	// PV it creates.
	ctxProvisionerIdentity = "storage.kubernetes.io/csiprovisioneridentity"
)

func invalid(key, format string, args ...any) error {
	return &volume.ParamError{Key: key, Reason: fmt.Sprintf(format, args...)}
}

// checkTarget validates a target path from the CO: absolute, no ".."
// component, no NUL, not "/". It returns the cleaned path.
func checkTarget(key, p string) (string, error) {
	if p == "" {
		return "", invalid(key, "is required")
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: %s %q is not absolute", volume.ErrUnsafePath, key, p)
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: %s contains NUL", volume.ErrUnsafePath, key)
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", fmt.Errorf("%w: %s %q has a \"..\" component", volume.ErrUnsafePath, key, p)
		}
	}
	p = filepath.Clean(p)
	if p == "/" {
		return "", fmt.Errorf("%w: %s is \"/\"", volume.ErrUnsafePath, key)
	}
	return p, nil
}

// publishRequest turns a NodePublishVolumeRequest into what to mount where.
func (s *Service) publishRequest(req *csi.NodePublishVolumeRequest) (mount.Volume, string, error) {
	id, err := volume.ParseID(req.GetVolumeId())
	if err != nil {
		return mount.Volume{}, "", err
	}
	target, err := checkTarget("target path", req.GetTargetPath())
	if err != nil {
		return mount.Volume{}, "", err
	}
	c := req.GetVolumeCapability()
	if c == nil {
		return mount.Volume{}, "", invalid("volume capability", "is required")
	}
	if err := volume.ValidateCapabilities([]*csi.VolumeCapability{c}); err != nil {
		return mount.Volume{}, "", err
	}
	vol := mount.Volume{
		FileSystemID:  id.FileSystemID,
		Path:          id.Path,
		AccessPointID: id.AccessPointID,
		ReadOnly:      req.GetReadonly(),
	}
	if err := s.applyContext(&vol, req.GetVolumeContext()); err != nil {
		return mount.Volume{}, "", err
	}
	if err := s.applyFlags(&vol, c.GetMount().GetMountFlags()); err != nil {
		return mount.Volume{}, "", err
	}
	if vol.NoTLS && vol.AccessPointID != "" {
		// Upstream mounts access points with TLS whatever encryptInTransit
		// says (efs-utils refuses otherwise); existing PVs rely on it.
		s.log.Warn("encryptInTransit=false ignored: access point mounts use TLS",
			slog.String("volume", req.GetVolumeId()))
	}
	return vol, target, nil
}

// applyContext reads the volume context keys into vol.
func (s *Service) applyContext(vol *mount.Volume, vc map[string]string) error {
	for k, v := range vc {
		switch strings.ToLower(k) {
		case ctxEncryptInTransit:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return invalid(k, "%q is not a boolean", v)
			}
			vol.NoTLS = !b
		case ctxCrossAccount:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return invalid(k, "%q is not a boolean", v)
			}
			vol.CrossAccount = b
		case ctxMountTargetIP:
			ip, err := s.mountTargetIP(v)
			if err != nil {
				return invalid(k, "%v", err)
			}
			vol.MountTargetIP = ip
		case ctxPath:
			p, err := contextPath(v)
			if err != nil {
				return invalid(k, "%v", err)
			}
			if vol.Path == "" { // the volume ID's path wins, as upstream
				vol.Path = p
			}
		case ctxProvisionerIdentity:
		default:
			return invalid(k, "volume context key is not supported (want %s, %s or %s)",
				"encryptInTransit", ctxMountTargetIP, ctxCrossAccount)
		}
	}
	return nil
}

// mountTargetIP reads "IP" or upstream's multi-zone "zone:IP,zone:IP", which
// picks the node's zone.
func (s *Service) mountTargetIP(v string) (string, error) {
	if !strings.Contains(v, ",") && net.ParseIP(v) != nil {
		return v, nil
	}
	if !strings.Contains(v, ":") || net.ParseIP(v) != nil {
		return "", fmt.Errorf("%q is not an IP address", v)
	}
	for _, pair := range strings.Split(v, ",") {
		zone, ip, ok := strings.Cut(strings.TrimSpace(pair), ":")
		if !ok || net.ParseIP(ip) == nil {
			return "", fmt.Errorf("%q is not zone:IP", pair)
		}
		if zone == s.zone && s.zone != "" {
			return ip, nil
		}
	}
	return "", fmt.Errorf("no mount target IP for this node's zone %q in %q", s.zone, v)
}

// contextPath validates the deprecated "path" key: absolute, no "..".
func contextPath(v string) (string, error) {
	if !strings.HasPrefix(v, "/") {
		return "", fmt.Errorf("%q is not absolute", v)
	}
	for _, c := range strings.Split(v, "/") {
		if c == ".." {
			return "", fmt.Errorf("%q has a \"..\" component", v)
		}
	}
	if strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return "", fmt.Errorf("%q has a control character", v)
	}
	p := filepath.Clean(v)
	if p == "/" {
		return "", nil
	}
	return p, nil
}

// applyFlags sorts the capability's mount flags: the ones this driver sets
// itself (tls, accesspoint=, ro) are folded into vol, awscredsuri is dropped
// as upstream does (it would let a PV pick the node's credentials source),
// and the rest is passed to the mount helper. A flag may hold several
// comma-separated options, as mountOptions often do.
func (s *Service) applyFlags(vol *mount.Volume, flags []string) error {
	const key = "mountOptions"
	for _, f := range flags {
		for _, o := range strings.Split(f, ",") {
			o = strings.TrimSpace(o)
			if o == "" {
				continue
			}
			if strings.IndexFunc(o, func(r rune) bool { return r < 0x20 || r == 0x7f || r == ' ' }) >= 0 {
				return invalid(key, "%q has a space or control character", o)
			}
			name, val, _ := strings.Cut(o, "=")
			switch strings.ToLower(name) {
			case "tls":
				if vol.NoTLS {
					return invalid(key, "tls is set but encryptInTransit is false")
				}
			case "accesspoint":
				if !volume.ValidAccessPointID(val) {
					return invalid(key, "accesspoint=%q is not an access point ID", val)
				}
				if vol.AccessPointID != "" && vol.AccessPointID != val {
					return invalid(key, "accesspoint=%s conflicts with the volume ID's %s", val, vol.AccessPointID)
				}
				vol.AccessPointID = val
			case "ro":
				vol.ReadOnly = true
			case "rw":
				if !vol.ReadOnly {
					vol.Options = appendNew(vol.Options, o)
				}
			case "awscredsuri":
				s.log.Warn("mount option awscredsuri is not supported and was dropped")
			default:
				vol.Options = appendNew(vol.Options, o)
			}
		}
	}
	if vol.ReadOnly { // "rw" before a later "ro"
		vol.Options = remove(vol.Options, "rw")
	}
	return nil
}

func appendNew(list []string, s string) []string {
	for _, e := range list {
		if e == s {
			return list
		}
	}
	return append(list, s)
}

func remove(list []string, s string) []string {
	out := list[:0]
	for _, e := range list {
		if e != s {
			out = append(out, e)
		}
	}
	return out
}
