package volume

import (
	"errors"
	"strings"
	"testing"
)

const (
	fsID = "fs-0123456789abcdef0"
	apID = "fsap-0123456789abcdef0"
)

func TestParseIDAcceptsEveryUpstreamForm(t *testing.T) {
	tests := []struct {
		in   string
		want ID
	}{
		{"efs:" + fsID + "::" + apID, ID{FileSystemID: fsID, AccessPointID: apID}},
		{fsID + "::" + apID, ID{FileSystemID: fsID, AccessPointID: apID}},
		{fsID, ID{FileSystemID: fsID}},
		{fsID + ":", ID{FileSystemID: fsID}},
		{fsID + "::", ID{FileSystemID: fsID}},
		{fsID + ":/", ID{FileSystemID: fsID}},
		{fsID + ":/sub/path", ID{FileSystemID: fsID, Path: "/sub/path"}},
		{fsID + ":/sub/path:" + apID, ID{FileSystemID: fsID, Path: "/sub/path", AccessPointID: apID}},
		{"efs:" + fsID, ID{FileSystemID: fsID}},
		{"efs:" + fsID + ":/sub", ID{FileSystemID: fsID, Path: "/sub"}},
		{"efs:" + fsID + ":/sub:" + apID, ID{FileSystemID: fsID, Path: "/sub", AccessPointID: apID}},
		// Upstream does not require an absolute path; it is relative to the root.
		{fsID + ":sub/dir", ID{FileSystemID: fsID, Path: "/sub/dir"}},
		{fsID + "://a//b/./c/", ID{FileSystemID: fsID, Path: "/a/b/c"}},
		{fsID + ":/with space", ID{FileSystemID: fsID, Path: "/with space"}},
		{"fs-01234567::fsap-01234567", ID{FileSystemID: "fs-01234567", AccessPointID: "fsap-01234567"}},
		// S3 Files: the same forms behind "s3files:", as upstream.
		{"s3files:" + fsID + "::" + apID, ID{API: APIS3Files, FileSystemID: fsID, AccessPointID: apID}},
		{"s3files:" + fsID, ID{API: APIS3Files, FileSystemID: fsID}},
		{"s3files:" + fsID + ":/data/shared", ID{API: APIS3Files, FileSystemID: fsID, Path: "/data/shared"}},
		{"s3files:" + fsID + ":/data/shared:" + apID, ID{API: APIS3Files, FileSystemID: fsID, Path: "/data/shared", AccessPointID: apID}},
		{"s3files:fs-abcd1234::fsap-abcd1234", ID{API: APIS3Files, FileSystemID: "fs-abcd1234", AccessPointID: "fsap-abcd1234"}},
		// Directory volumes (efs-dir): told from the static fs-X:/path.
		{"efsdir:" + fsID + ":/dyn/pvc-1", ID{FileSystemID: fsID, Path: "/dyn/pvc-1", Dir: true}},
		{DirID(fsID, "/pvc-1"), ID{FileSystemID: fsID, Path: "/pvc-1", Dir: true}},
		{ReaderID(fsID, roxSnap, roxVol), ID{FileSystemID: fsID, Path: "/.efs-csi-snapshots/" + roxSnap + "/data", Snapshot: roxSnap, Reader: roxVol}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseID(tt.in)
			if err != nil {
				t.Fatalf("ParseID(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseID(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			again, err := ParseID(got.String())
			if err != nil || again != got {
				t.Fatalf("ParseID(String()=%q) = %+v, %v; want %+v", got.String(), again, err, got)
			}
		})
	}
}

func TestParseIDRejects(t *testing.T) {
	tests := []struct {
		name, in, wantInMsg string
	}{
		{"empty", "", "empty"},
		{"only prefix", "efs:", "file system ID"},
		{"not a file system", "vol-0123456789abcdef0", "file system ID"},
		{"short file system id", "fs-0123", "file system ID"},
		{"upper-case hex", "fs-0123456789ABCDEF", "file system ID"},
		{"file system id with suffix", fsID + "x", "file system ID"},
		{"bad access point", fsID + "::ap-0123456789", "access point ID"},
		{"access point with path chars", fsID + "::fsap-01234567/x", "access point ID"},
		{"four fields", fsID + ":/a:" + apID + ":x", "three fields"},
		{"double prefix", "efs:efs:" + fsID, "file system ID"},
		{"dot-dot", fsID + ":/a/../b", `".."`},
		{"leading dot-dot", fsID + ":../etc", `".."`},
		{"NUL", fsID + ":/a\x00b", "control character"},
		{"newline", fsID + ":/a\nb", "control character"},
		{"too long", fsID + ":/" + strings.Repeat("a", 128), "128"},
		{"s3files invalid file system", "s3files:invalid-id", "file system ID"},
		{"s3files invalid access point", "s3files:" + fsID + "::invalid-id", "access point ID"},
		{"s3files then efs prefix", "s3files:efs:" + fsID, "file system ID"},
		{"directory volume without a path", "efsdir:" + fsID, "directory volume"},
		{"read-only volume without its own key", ReaderPrefix + fsID + ":" + roxSnap, "read-only volume"},
		{"read-only volume with a short key", ReaderPrefix + fsID + ":" + roxSnap + ":abc", "read-only volume"},
		{"read-only volume with a path for a key", ReaderPrefix + fsID + ":/etc/passwd:" + roxVol, "read-only volume"},
		{"read-only volume with upper-case hex", ReaderPrefix + fsID + ":" + strings.ToUpper(roxSnap) + ":" + roxVol, "read-only volume"},
		{"directory volume at the root", "efsdir:" + fsID + ":/", "directory volume"},
		{"directory volume with an access point", "efsdir:" + fsID + ":/a:" + apID, "directory volume"},
		{"directory then efs prefix", "efsdir:efs:" + fsID + ":/a", "file system ID"},
		{"efs then s3files prefix", "efs:s3files:" + fsID, "file system ID"},
		{"other API prefix", "nfs:" + fsID + "::" + apID, "three fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseID(tt.in)
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("ParseID(%q) = %+v, %v; want ErrInvalidID", tt.in, got, err)
			}
			if !strings.Contains(err.Error(), tt.wantInMsg) {
				t.Errorf("error %q does not mention %q", err, tt.wantInMsg)
			}
		})
	}
}

func TestProvisionedS3FilesIDRoundTripsWithItsAPI(t *testing.T) {
	s3fs := "fs-0123456789abcdef01"
	id := ProvisionedS3FilesID(s3fs, apID)
	got, err := ParseID(id)
	if err != nil || got != (ID{API: APIS3Files, FileSystemID: s3fs, AccessPointID: apID}) || got.String() != "s3files:"+s3fs+"::"+apID {
		t.Fatalf("ParseID(%q) = %+v (%q), %v", id, got, got.String(), err)
	}
}

func TestProvisionedIDRoundTrips(t *testing.T) {
	id := ProvisionedID(fsID, apID)
	if id != "efs:"+fsID+"::"+apID {
		t.Fatalf("ProvisionedID = %q", id)
	}
	got, err := ParseID(id)
	if err != nil || got != (ID{FileSystemID: fsID, AccessPointID: apID}) {
		t.Fatalf("ParseID(ProvisionedID) = %+v, %v", got, err)
	}
	// The longest IDs EFS hands out still fit CSI's 128 bytes.
	long := ProvisionedID("fs-"+strings.Repeat("f", 40), "fsap-"+strings.Repeat("f", 40))
	if len(long) > MaxIDLength {
		t.Fatalf("longest provisioned ID is %d bytes", len(long))
	}
	if _, err := ParseID(long); err != nil {
		t.Fatalf("ParseID(longest) = %v", err)
	}
}

const (
	roxSnap = "0123456789abcdef0123456789abcdef"
	roxVol  = "fedcba9876543210fedcba9876543210"
)
