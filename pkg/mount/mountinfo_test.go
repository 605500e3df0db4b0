package mount

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseMountInfoLine(t *testing.T) {
	tests := []struct {
		name string
		line string
		want mountInfo
	}{
		{
			name: "proc(5) example with an optional field",
			line: "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue",
			want: mountInfo{ID: 36, Parent: 35, Root: "/mnt1", MountPoint: "/mnt2", Options: []string{"rw", "noatime"},
				FSType: "ext3", Source: "/dev/root"},
		},
		{
			name: "no optional fields",
			line: "45 27 254:0 /tmp/a /tmp/b ro,relatime - ext4 /dev/vda rw",
			want: mountInfo{ID: 45, Parent: 27, Root: "/tmp/a", MountPoint: "/tmp/b", Options: []string{"ro", "relatime"},
				FSType: "ext4", Source: "/dev/vda"},
		},
		{
			name: "several optional fields",
			line: "1 2 0:1 / /x rw shared:3 master:4 propagate_from:5 - nfs4 127.0.0.1:/ rw,port=20049",
			want: mountInfo{ID: 1, Parent: 2, Root: "/", MountPoint: "/x", Options: []string{"rw"},
				FSType: "nfs4", Source: "127.0.0.1:/"},
		},
		{
			name: "escaped space, tab, newline and backslash",
			line: `7 8 0:1 /a\040b /m\011n\012o\134p rw - tmpfs x\040y rw`,
			want: mountInfo{ID: 7, Parent: 8, Root: "/a b", MountPoint: "/m\tn\no\\p", Options: []string{"rw"},
				FSType: "tmpfs", Source: "x y"},
		},
		{
			name: "deleted source",
			line: `9 1 254:0 /data/fs-1//deleted /t rw - ext4 /dev/vda rw`,
			want: mountInfo{ID: 9, Parent: 1, Root: "/data/fs-1//deleted", MountPoint: "/t", Options: []string{"rw"},
				FSType: "ext4", Source: "/dev/vda"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMountInfoLine(tt.line)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseMountInfoRejectsMalformedLines(t *testing.T) {
	for _, line := range []string{
		"36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 ext3 /dev/root rw", // no separator
		"36 35 98:0 /mnt1 /mnt2 rw - ext3",                             // no source
		"x 35 98:0 /mnt1 /mnt2 rw - ext3 /dev/root rw",                 // bad ID
		"36 35",
	} {
		if _, err := parseMountInfo(strings.NewReader(line + "\n")); err == nil {
			t.Errorf("%q: parsed without error", line)
		}
	}
}

func TestMountInfoFlags(t *testing.T) {
	tests := []struct {
		m                 mountInfo
		readOnly, deleted bool
	}{
		{mountInfo{Options: []string{"rw", "relatime"}, Root: "/a"}, false, false},
		{mountInfo{Options: []string{"ro", "relatime"}, Root: "/a"}, true, false},
		{mountInfo{Options: []string{"rw"}, Root: "/a//deleted"}, false, true},
		{mountInfo{Options: []string{"nosuid", "ro"}, Root: "/a/deleted"}, true, false},
	}
	for _, tt := range tests {
		if got := tt.m.readOnly(); got != tt.readOnly {
			t.Errorf("%+v: readOnly %v, want %v", tt.m, got, tt.readOnly)
		}
		if got := tt.m.deleted(); got != tt.deleted {
			t.Errorf("%+v: deleted %v, want %v", tt.m, got, tt.deleted)
		}
	}
}

// escapeOctal is what the kernel does to mountinfo fields (show_path).
func escapeOctal(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\\':
			b.WriteByte('\\')
			b.WriteByte('0' + c>>6)
			b.WriteByte('0' + c>>3&7)
			b.WriteByte('0' + c&7)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// FuzzParseMountInfo: parsing never panics, and a mount point escaped as the
// kernel escapes it comes back unchanged.
func FuzzParseMountInfo(f *testing.F) {
	f.Add("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw", "/a b")
	f.Add(`7 8 0:1 /a\040b /m rw - tmpfs x rw`, "/x\\040y")
	f.Add("- - - - - - -", "\n")
	f.Fuzz(func(t *testing.T, line, mountPoint string) {
		_, _ = parseMountInfo(strings.NewReader(line))
		if mountPoint == "" {
			return
		}
		m, err := parseMountInfoLine("1 2 0:1 / " + escapeOctal(mountPoint) + " rw - tmpfs src rw")
		if err != nil {
			t.Fatalf("escaped %q: %v", mountPoint, err)
		}
		if m.MountPoint != mountPoint {
			t.Fatalf("round trip: %q became %q", mountPoint, m.MountPoint)
		}
	})
}
