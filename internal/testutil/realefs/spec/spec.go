// Package spec is what the stubs of package realefs (mount.nfs4, efs-proxy) and the tests
// that read their records share, and the files efs-utils writes that the tests read.
package spec

import (
	"encoding/hex"
	"strconv"
	"strings"
)

// EFSProxy is efs-proxy's program name.
const EFSProxy = "efs-proxy"

// CallLog is the stubs' call log in their directory: one JSON Call a line.
const CallLog = "calls.jsonl"

// ControlDir holds mount.nfs4's control files, by ControlName.
const ControlDir = "control"

// ControlName is the name of the control file of mount.nfs4 for target.
func ControlName(target string) string { return hex.EncodeToString([]byte(target)) }

// Call is one run of a stub.
type Call struct {
	Prog string   // mount.nfs4 or efs-proxy
	Args []string // os.Args[1:]
	PID  int
	// Hung: mount.nfs4 is hanging on its control FIFO (recorded before it blocks).
	Hung bool `json:",omitempty"`
	// Config is efs-proxy's configuration file as it read it.
	Config string `json:",omitempty"`
}

// TunnelConfig is the stunnel-format configuration file mount.efs writes for stunnel
// and efs-proxy (stunnel-config.<state file name>): global keys, then an [efs] section.
// A key given more than once (socket) keeps its last value in the maps and all of them
// in Lines.
type TunnelConfig struct {
	Global, EFS map[string]string
	Lines       []string
}

// ParseTunnelConfig parses a tunnel configuration file.
func ParseTunnelConfig(s string) TunnelConfig {
	c := TunnelConfig{Global: map[string]string{}, EFS: map[string]string{}}
	cur := c.Global
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		c.Lines = append(c.Lines, line)
		if line == "[efs]" {
			cur = c.EFS
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			cur[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return c
}

// State is efs-utils' state file of a mount with a tunnel (/var/run/efs/fs-X.<mount point
// with dots>.<port>), as mount.efs and mount.s3files write it (write_tunnel_state_file)
// and the watchdog rewrites it. The port is only in the file's name; the certificate
// fields are there for a TLS mount.
type State struct {
	PID         int      `json:"pid"`
	Cmd         []string `json:"cmd"`
	Files       []string `json:"files"`
	MountTime   float64  `json:"mount_time"`
	Mountpoint  string   `json:"mountpoint"`
	ServiceType string   `json:"service_type"`
	// TLS only (cert_details).
	AccessPoint             string `json:"accessPoint,omitempty"`
	AWSCredentialsMethod    string `json:"awsCredentialsMethod,omitempty"`
	MountStateDir           string `json:"mountStateDir,omitempty"`
	CommonName              string `json:"commonName,omitempty"`
	Region                  string `json:"region,omitempty"`
	CertificateCreationTime string `json:"certificateCreationTime,omitempty"`
	Certificate             string `json:"certificate,omitempty"`
	PrivateKey              string `json:"privateKey,omitempty"`
	FSID                    string `json:"fsId,omitempty"`
	// The watchdog's.
	UnmountCount int     `json:"unmount_count,omitempty"`
	UnmountTime  float64 `json:"unmount_time,omitempty"`
}

// StatePort is the port in a state file's name ("" if it has none).
func StatePort(name string) (int, bool) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return 0, false
	}
	p, err := strconv.Atoi(name[i+1:])
	return p, err == nil
}

// Unescape undoes mountinfo's octal escapes (\040 for a space...).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
