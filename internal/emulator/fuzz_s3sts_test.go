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

const fuzzS3FS = "fs-0123456789abcdef012" // S3 Files IDs have 17 to 40 hex digits

// signedFor is an Authorization header of a SigV4 request for service ("" =
// unsigned), so that requests reach each API's handlers.
func signedFor(service string) string {
	if service == "" {
		return ""
	}
	return "AWS4-HMAC-SHA256 Credential=AKIDFUZZ/20260101/us-east-1/" + service + "/aws4_request, SignedHeaders=host, Signature=0"
}

var fuzzServices = []string{"", "s3files", "sts", "elasticfilesystem"}

// FuzzS3FilesAndSTSRequest sends arbitrary requests to the emulator's S3
// Files API and STS, signed for either service or for none: no panic, no
// 5xx, an error code on every error (S3 Files' header, STS's XML Code), and
// nothing touched outside the file systems' directories (an S3 Files access
// point root through a planted symlink included).
func FuzzS3FilesAndSTSRequest(f *testing.F) {
	fs := `"fileSystemId":"` + fuzzS3FS + `"`
	for _, s := range []struct {
		method, service uint8
		path, query     string
		body            string
	}{
		{3, 1, "access-points", "", `{"clientToken":"a",` + fs + `,"rootDirectory":{"path":"/abs/x","creationPermissions":{"ownerUid":1,"ownerGid":1,"permissions":"0777"}}}`},
		{3, 1, "access-points", "", `{"clientToken":"b",` + fs + `,"rootDirectory":{"path":"/../outside"},"posixUser":{"uid":1,"gid":2}}`},
		{3, 1, "access-points", "", `{"clientToken":"c",` + fs + `,"rootDirectory":{"path":"/up/outside/x"},"tags":[{"key":"k","value":"v"}]}`},
		{0, 1, "access-points", "fileSystemId=" + fuzzS3FS + "&maxResults=1&nextToken=x", ""},
		{0, 1, "access-points/fsap-0123456789abcdef0", "", ""},
		{2, 1, "access-points/..%2f..%2fetc", "", ""},
		{0, 1, "file-systems/" + fuzzS3FS, "", ""},
		{0, 1, "mount-targets", "fileSystemId=" + fuzzS3FS, ""},
		{1, 1, "resource-tags/" + fuzzS3FS, "", `{"tags":[{"key":"k","value":"v"}]}`},
		{1, 2, "", "", "Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A111122223333%3Arole%2Fr&RoleSessionName=s&DurationSeconds=900"},
		{1, 2, "", "", "Action=AssumeRole&Version=2011-06-15&RoleArn=x&RoleSessionName=&ExternalId=%00"},
		{1, 0, "", "", "Action=GetCallerIdentity&Version=2011-06-15"},
	} {
		f.Add(s.method, s.service, s.path, s.query, []byte(s.body))
	}
	w := newFuzzWorld(f, func(c *Config) { c.S3FilesFileSystems = []string{fuzzS3FS} })
	for name, target := range map[string]string{"abs": w.outside, "rel": "../../outside", "up": ".."} {
		if err := os.Symlink(target, filepath.Join(w.emu.FileSystemDir(fuzzS3FS), name)); err != nil {
			f.Fatal(err)
		}
	}
	h := w.emu.Handler()
	f.Fuzz(func(t *testing.T, method, service uint8, path, query string, body []byte) {
		svc := fuzzServices[int(service)%len(fuzzServices)]
		ctype := "application/json"
		if svc == "sts" || svc == "" {
			ctype = "application/x-www-form-urlencoded"
		}
		req := &http.Request{
			Method: fuzzMethods[int(method)%len(fuzzMethods)],
			URL:    &url.URL{Path: "/" + path, RawQuery: query},
			Header: http.Header{"Content-Type": {ctype}},
			Body:   io.NopCloser(bytes.NewReader(body)),
		}
		if a := signedFor(svc); a != "" {
			req.Header.Set("Authorization", a)
		}
		req.RequestURI = req.URL.RequestURI()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s /%s?%s (%s) %q: status %d %s", req.Method, path, query, svc, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 && rec.Header().Get("x-amzn-ErrorType") == "" && !strings.Contains(rec.Body.String(), "<Code>") {
			t.Fatalf("%s /%s (%s): error %d without an error code: %s", req.Method, path, svc, rec.Code, rec.Body)
		}
		w.checkOutside(t)
	})
}
