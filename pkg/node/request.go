package node

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
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
	// ctxMountTargetIPMap is upstream's cross-account map, JSON zone -> IP,
	// written when the class names no zone: each node picks its own.
	ctxMountTargetIPMap = "mounttargetipmap"
	ctxCrossAccount     = "crossaccount"
	// ctxPath is upstream's deprecated sub path, used when the volume ID
	// has none; static PVs still carry it.
	ctxPath = "path"
	// ctxProvisionerIdentity is added by the external-provisioner to every
	// PV it creates.
	ctxProvisionerIdentity = "storage.kubernetes.io/csiprovisioneridentity"
	// ctxUID and ctxGID are a directory volume's owner (efs-dir), written
	// by the controller for the pod's securityContext; the mount does not
	// use them.
	ctxUID = "uid"
	ctxGID = "gid"
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
		API:           id.API,
		FileSystemID:  id.FileSystemID,
		Path:          id.Path,
		AccessPointID: id.AccessPointID,
		// A reader-only access mode, and a volume served from a
		// snapshot's copy, are mounted read-only whatever the CO says.
		ReadOnly: req.GetReadonly() || id.Reader != "" || volume.ReaderOnly([]*csi.VolumeCapability{c}),
	}
	if err := s.applyContext(&vol, req.GetVolumeContext()); err != nil {
		return mount.Volume{}, "", err
	}
	if err := s.applyFlags(&vol, c.GetMount().GetMountFlags()); err != nil {
		return mount.Volume{}, "", err
	}
	if vol.API == volume.APIS3Files {
		if err := s.checkS3Files(&vol); err != nil {
			return mount.Volume{}, "", err
		}
		return vol, target, nil
	}
	if s.fips && slices.Contains(vol.Options, "stunnel") {
		return mount.Volume{}, "", invalid("mountOptions", "the stunnel mount option is refused on this node: efs-utils runs in FIPS mode "+
			"(useFIPS, FIPS_ENABLED or AWS_USE_FIPS_ENDPOINT) and stunnel needs an OpenSSL FIPS provider the driver's image does not have; "+
			"remove stunnel: efs-proxy, the default tunnel, is FIPS-validated (AWS-LC)")
	}
	if vol.NoTLS && vol.AccessPointID != "" {
		// Upstream mounts access points with TLS whatever encryptInTransit
		// says (efs-utils refuses otherwise); existing PVs rely on it.
		s.log.Warn("encryptInTransit=false ignored: access point mounts use TLS",
			slog.String("volume", req.GetVolumeId()))
	}
	return vol, target, nil
}

// checkS3Files refuses what an S3 Files mount cannot do, as upstream does:
// encryption in transit cannot be turned off, the stunnel option and
// cross-account mounts are not supported. It turns the proxy's read cache
// off when the node plugin's memory is low or unknown
// (S3FilesReadCacheMinMemory), as upstream.
func (s *Service) checkS3Files(vol *mount.Volume) error {
	switch {
	case vol.NoTLS:
		return invalid("encryptInTransit", "encryption in transit cannot be disabled for an S3 Files file system: remove encryptInTransit: false")
	case vol.CrossAccount:
		return invalid(ctxCrossAccount, "cross-account mounting is not supported for an S3 Files file system")
	case slices.Contains(vol.Options, "stunnel"):
		return invalid("mountOptions", "the stunnel mount option is not supported by an S3 Files file system")
	}
	vol.NoS3ReadCache = s.memoryLimit < S3FilesReadCacheMinMemory
	return nil
}

// applyContext reads the volume context keys into vol.
func (s *Service) applyContext(vol *mount.Volume, vc map[string]string) error {
	var ipMap, ipMapKey string
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
		case ctxMountTargetIPMap:
			ipMap, ipMapKey = v, k
		case ctxPath:
			p, err := contextPath(v)
			if err != nil {
				return invalid(k, "%v", err)
			}
			if vol.Path == "" { // the volume ID's path wins, as upstream
				vol.Path = p
			}
		case ctxProvisionerIdentity:
		case ctxUID, ctxGID:
			if _, err := strconv.ParseUint(v, 10, 32); err != nil {
				return invalid(k, "%q is not a uid or gid", v)
			}
		default:
			return invalid(k, "volume context key is not supported (want %s, %s, %s or %s)",
				"encryptInTransit", ctxMountTargetIP, "mountTargetIpMap", ctxCrossAccount)
		}
	}
	if ipMapKey == "" {
		return nil
	}
	// After the loop: the map is validated whatever else is there, and an
	// explicit mounttargetip, the more specific of the two, wins.
	ip, err := s.mountTargetFromMap(ipMap)
	if err != nil {
		return invalid(ipMapKey, "%v", err)
	}
	if vol.MountTargetIP == "" {
		vol.MountTargetIP = ip
	}
	return nil
}

// mountTargetFromMap reads upstream's mounttargetipmap, a JSON object from
// zone to mount target IP, and picks this node's zone. Every value must be
// an IP address, also those of other zones, so a tampered map is refused on
// every node alike. A node whose zone is missing (or unknown) mounts from
// any IP of the map, as upstream does: a cross-zone mount is better than
// none, and the warning says why it is slower and costs cross-zone traffic.
// The pick is random, as upstream's, so a retry can reach another mount
// target when one does not answer; the mount is recognised by its path, not
// its IP, so a retry that picks another still finds an earlier mount.
func (s *Service) mountTargetFromMap(v string) (string, error) {
	var byZone map[string]string
	// A decoder, not json.Unmarshal: Unmarshal leaves a half-filled map on
	// a type error, and More rejects trailing data after the object.
	dec := json.NewDecoder(strings.NewReader(v))
	if err := dec.Decode(&byZone); err != nil || dec.More() {
		return "", fmt.Errorf("%q is not a JSON object of zone to IP address", v)
	}
	if len(byZone) == 0 { // {} or null
		return "", fmt.Errorf("%q has no mount target", v)
	}
	zones := slices.Sorted(maps.Keys(byZone))
	for _, zone := range zones {
		if net.ParseIP(byZone[zone]) == nil {
			return "", fmt.Errorf("has an invalid IP address %q for availability zone %q", byZone[zone], zone)
		}
	}
	if ip, ok := byZone[s.zone]; ok && s.zone != "" {
		return ip, nil
	}
	zone := zones[rand.IntN(len(zones))]
	s.log.Warn("mounttargetipmap has no mount target in this node's zone: mounting across zones",
		slog.String("nodeZone", s.zone), slog.String("zone", zone), slog.String("ip", byZone[zone]))
	return byZone[zone], nil
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
