package efsutils

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/testutil/realefs"
)

// distFiles returns dist/efs-utils.conf and dist/s3files-utils.conf of the
// release tarball the image ships (hack/versions' pin, its sha256 checked;
// skipped without it, failed under CI).
func distFiles(t *testing.T) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(realefs.Tarball(t))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{ConfFileName, S3FilesConfFileName} {
			if strings.HasSuffix(h.Name, "/dist/"+name) {
				if out[name], err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if len(out) != 2 {
		t.Fatalf("the efs-utils tarball lacks the dist configuration files: %v", out)
	}
	return out
}

type key struct{ sec, key string }

type keyState struct {
	value string
	set   bool // false: commented out
}

var commentedKey = regexp.MustCompile(`^#\s*([a-z_]+)\s*=\s*(.*)$`)

// keys parses a file's keys, commented-out ones too (a comment of the form
// "# key = value").
func keys(b []byte) map[key]keyState {
	out := map[key]keyState{}
	sec := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			sec = line[1 : len(line)-1]
		case commentedKey.MatchString(line):
			m := commentedKey.FindStringSubmatch(line)
			out[key{sec, m[1]}] = keyState{m[2], false}
		case line != "" && !strings.HasPrefix(line, "#"):
			k, v, _ := strings.Cut(line, "=")
			out[key{sec, strings.TrimSpace(k)}] = keyState{strings.TrimSpace(v), true}
		}
	}
	return out
}

// TestRenderIsEfsUtilsDistConfiguration: with upstream's default flags
// (S3 Files CloudWatch on), both files are the pinned efs-utils' own, key for
// key and value for value, plus only what upstream's templates add
// ([client-info] source) and the CA key efs-utils reads in the China
// sections (commented out). So every key of the release can be
// overridden, and no section is missing.
func TestRenderIsEfsUtilsDistConfiguration(t *testing.T) {
	dist := distFiles(t)
	c, err := Render(Settings{S3FilesCloudWatchLog: true, S3FilesCloudWatchMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	// Where the driver's file differs from the release's, and why.
	extra := map[key]keyState{
		{"client-info", "source"}:                  {ClientSource, true}, // upstream's template
		{"mount.cn-north-1", "stunnel_cafile"}:     {efsUtilsCAFile, false},
		{"mount.cn-northwest-1", "stunnel_cafile"}: {efsUtilsCAFile, false},
	}
	changed := map[string]map[key]keyState{
		// Upstream writes enabled = {{.CloudWatchLogEnabled}}: the flag's default, false.
		ConfFileName: {{"cloudwatch-log", "enabled"}: {"false", true}},
	}
	for name, got := range map[string][]byte{ConfFileName: c.EFSUtils, S3FilesConfFileName: c.S3FilesUtils} {
		want, have := keys(dist[name]), keys(got)
		for k, ks := range extra {
			want[k] = ks
		}
		for k, ks := range changed[name] {
			want[k] = ks
		}
		for k, w := range want {
			if h, ok := have[k]; !ok || h != w {
				t.Errorf("%s [%s] %s: %+v, want %+v (efs-utils' dist/%s)", name, k.sec, k.key, h, w, name)
			}
		}
		for k, h := range have {
			if _, ok := want[k]; !ok {
				t.Errorf("%s [%s] %s = %+v is not in efs-utils' dist/%s", name, k.sec, k.key, h, name)
			}
		}
	}
}
