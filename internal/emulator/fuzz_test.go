package emulator

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fuzz targets run their seed corpus with go test; to explore, e.g.
//
//	go test ./internal/emulator -run '^$' -fuzz FuzzAPIRequest -fuzztime 60s

// fuzzWorld is an emulator whose file system holds links that lead outside
// it, to a directory that must stay as it is.
type fuzzWorld struct {
	emu     *Emulator
	fsID    string
	fsDir   string
	outside string
}

const fuzzFS = "fs-0000000000000f022"

func newFuzzWorld(t testing.TB, mut ...func(*Config)) *fuzzWorld {
	t.Helper()
	top := t.TempDir()
	w := &fuzzWorld{fsID: fuzzFS, outside: filepath.Join(top, "outside")}
	cfg := Config{DataDir: filepath.Join(top, "data"), FileSystems: []string{fuzzFS},
		AccessPointLimit: 1 << 30, NoFsync: true, Seed: 1}
	for _, m := range mut {
		m(&cfg)
	}
	var err error
	w.emu, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.emu.Close() })
	w.fsDir = w.emu.FileSystemDir(fuzzFS)
	if err := os.Mkdir(w.outside, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"abs": w.outside, "rel": "../../outside", "up": ".."} {
		if err := os.Symlink(target, filepath.Join(w.fsDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// checkOutside fails if anything appeared outside the file system.
func (w *fuzzWorld) checkOutside(t *testing.T) {
	t.Helper()
	if entries, _ := os.ReadDir(w.outside); len(entries) != 0 {
		t.Fatalf("created outside the file system: %v", entries)
	}
	entries, _ := os.ReadDir(filepath.Dir(w.fsDir))
	for _, e := range entries {
		if e.Name() != dbFile && !ValidFileSystemID(e.Name()) {
			t.Fatalf("created in the data dir, outside any file system: %s", e.Name())
		}
	}
}

var fuzzMethods = []string{"GET", "POST", "DELETE", "PUT"}

// FuzzAPIRequest sends arbitrary requests to the API: no panic, no 500, an
// error code on every error, nothing touched outside the file system.
func FuzzAPIRequest(f *testing.F) {
	fs := `"FileSystemId":"` + fuzzFS + `"`
	for _, s := range []struct {
		method      uint8
		path, query string
		body        string
	}{
		{1, "access-points", "", `{"ClientToken":"a",` + fs + `,"RootDirectory":{"Path":"/abs/x","CreationInfo":{"OwnerUid":1,"OwnerGid":1,"Permissions":"0777"}}}`},
		{1, "access-points", "", `{"ClientToken":"b",` + fs + `,"RootDirectory":{"Path":"/rel/a/b","CreationInfo":{"OwnerUid":0,"OwnerGid":0,"Permissions":"755"}}}`},
		{1, "access-points", "", `{"ClientToken":"c",` + fs + `,"RootDirectory":{"Path":"/up/outside/x","CreationInfo":{"OwnerUid":0,"OwnerGid":0,"Permissions":"755"}}}`},
		{1, "access-points", "", `{"ClientToken":"d",` + fs + `,"RootDirectory":{"Path":"/../outside","CreationInfo":{"OwnerUid":0,"OwnerGid":0,"Permissions":"755"}}}`},
		{1, "access-points", "", `{"ClientToken":"e",` + fs + `,"PosixUser":{"Uid":1,"Gid":2,"SecondaryGids":[3]},"Tags":[{"Key":"Name","Value":"n"}]}`},
		{0, "access-points", "FileSystemId=" + fuzzFS + "&MaxResults=2&NextToken=ZnMtMDAwMDAwMDAwMDAwMGYwMjIvMQ", ""},
		{0, "access-points", "AccessPointId=fsap-0123456789abcdef0", ""},
		{2, "access-points/fsap-0123456789abcdef0", "", ""},
		{2, "access-points/..%2f..%2fetc", "", ""},
		{1, "file-systems", "", `{"CreationToken":"t","ThroughputMode":"provisioned","ProvisionedThroughputInMibps":5}`},
		{0, "file-systems", "Marker=x&MaxItems=1", ""},
		{2, "file-systems/" + fuzzFS, "", ""},
		{1, "mount-targets", "", `{` + fs + `,"SubnetId":"subnet-1","IpAddress":"10.0.0.1"}`},
		{0, "mount-targets", "AccessPointId=fsap-1", ""},
		{1, "resource-tags/" + fuzzFS, "", `{"Tags":[{"Key":"k","Value":"v"}]}`},
		{2, "resource-tags/" + fuzzFS, "tagKeys=k&tagKeys=aws:x", ""},
		{0, "resource-tags/arn:aws:elasticfilesystem:us-east-1:1:file-system%2F" + fuzzFS, "MaxResults=1&NextToken=1", ""},
	} {
		f.Add(s.method, s.path, s.query, []byte(s.body))
	}
	w := newFuzzWorld(f)
	h := w.emu.Handler()
	f.Fuzz(func(t *testing.T, method uint8, path, query string, body []byte) {
		req := &http.Request{
			Method: fuzzMethods[int(method)%len(fuzzMethods)],
			URL:    &url.URL{Path: "/2015-02-01/" + path, RawQuery: query},
			Header: http.Header{"Content-Type": {"application/json"}},
			Body:   io.NopCloser(bytes.NewReader(body)),
		}
		req.RequestURI = req.URL.RequestURI()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s?%s %q: status %d %s", req.Method, path, query, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 && rec.Header().Get("x-amzn-ErrorType") == "" {
			t.Fatalf("%s %s: error %d without x-amzn-ErrorType", req.Method, path, rec.Code)
		}
		w.checkOutside(t)
	})
}

// FuzzRootDirectory feeds arbitrary paths to the validation and, when it
// accepts one, to the directory creation: a valid path is absolute with
// no "." or ".." component, and nothing is ever made outside the file system.
func FuzzRootDirectory(f *testing.F) {
	for _, p := range []string{"/", "/a", "/a/b/c/d", "/abs/x", "/rel/x/y", "/up/outside", "/..", "/a/../../x", "//x",
		"/x\x00y", "/.", "/a/.b", strings.Repeat("/a", 50), "/é/ü", "/a b/c\td", "relative"} {
		f.Add(p, "0755")
	}
	w := newFuzzWorld(f)
	f.Fuzz(func(t *testing.T, p, perm string) {
		if validatePath(p) != nil {
			return
		}
		if p[0] != '/' {
			t.Fatalf("accepted relative path %q", p)
		}
		for _, c := range strings.Split(p[1:], "/") {
			if c == "." || c == ".." {
				t.Fatalf("accepted %q with component %q", p, c)
			}
		}
		if !permissionsRE.MatchString(perm) {
			perm = "0755"
		}
		_ = makeRootDir(w.fsDir, p, &creationInfo{Permissions: perm})
		w.checkOutside(t)
	})
}

// FuzzPageToken: any NextToken or Marker is either understood or a
// BadRequest, and a token made by the emulator reads back.
func FuzzPageToken(f *testing.F) {
	for _, s := range []string{"", "x", pageToken("fs-01234567", 42), pageToken("*", 0), "ZnMtMS8x", "====", "fs-1/2"} {
		f.Add(s, "fs-01234567", uint64(7))
	}
	f.Fuzz(func(t *testing.T, tok, scope string, seq uint64) {
		if _, e := parsePageToken("NextToken", tok, scope); e != nil && e.ErrorCode != codeBadRequest {
			t.Fatalf("token %q: %v", tok, e)
		}
		if strings.Contains(scope, "/") {
			return // scopes are IDs or "*", never with a slash
		}
		got, e := parsePageToken("NextToken", pageToken(scope, seq), scope)
		if e != nil || got != seq {
			t.Fatalf("round trip of (%q, %d): %d, %v", scope, seq, got, e)
		}
	})
}
