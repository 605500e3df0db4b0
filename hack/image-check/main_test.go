package main

import (
	"strings"
	"testing"
)

// The repository's own files pass, and each kind of drift from them is caught: the check
// is only worth its place in CI if it fails on these.
func TestImageCheckCatchesEachDrift(t *testing.T) {
	driverDefaults := map[string]string{
		"efs-utils-config-dir-path":   "/var/amazon/efs",
		"efs-utils-static-files-path": "/etc/amazon/efs-static-files/",
	}
	cases := []struct {
		name   string
		edit   func(in *input)
		expect string // a problem containing this; "" = none
	}{
		{"the repository as committed", func(*input) {}, ""},
		{"an unpinned base image", func(in *input) {
			replaceIn(t, in, "ARG BASE_IMAGE=debian:13.2-slim", "ARG BASE_IMAGE=debian:trixie-slim")
			in.versions["BASE_IMAGE"] = "debian:trixie-slim"
		}, "is not pinned"},
		{"a FROM that bypasses the ARGs", func(in *input) {
			replaceIn(t, in, "FROM ${RUST_IMAGE} AS efs-proxy", "FROM rust:latest AS efs-proxy")
		}, "FROM rust:latest"},
		{"a digest-pinned image is pinned", func(in *input) {
			d := "golang:1.26.8-trixie@sha256:" + strings.Repeat("ab", 32)
			replaceIn(t, in, "ARG GO_IMAGE=golang:1.26.8-trixie", "ARG GO_IMAGE="+d)
			in.versions["GO_IMAGE"] = d
		}, ""},
		{"a checksum changed in the Dockerfile only", func(in *input) {
			replaceIn(t, in, "ARG EFS_UTILS_SHA256=cef35d2e", "ARG EFS_UTILS_SHA256=0ef35d2e")
		}, "ARG EFS_UTILS_SHA256="},
		{"a version changed in hack/versions only", func(in *input) { in.versions["EFS_UTILS_VERSION"] = "3.3.2" }, "EFS_UTILS_VERSION"},
		{"a version changed in the Dockerfile only", func(in *input) {
			replaceIn(t, in, "ARG EFS_UTILS_VERSION=3.2.0", "ARG EFS_UTILS_VERSION=2.3.1")
		}, "ARG EFS_UTILS_VERSION=2.3.1 in the Dockerfile, 3.2.0 in hack/versions"},
		{"a checksum that is not one", func(in *input) {
			replaceIn(t, in, "ARG EFS_UTILS_SHA256=cef35d2e5051262c45ef0288ee51be164c35c87a2ea722c00ac02824e570a79c", "ARG EFS_UTILS_SHA256=TODO")
			in.versions["EFS_UTILS_SHA256"] = "TODO"
		}, "is not a sha256"},
		{"the tarball no longer verified by the install script", func(in *input) {
			replaceInScript(t, in, " | sha256sum -c -", "")
		}, "sha256sum -c"},
		{"the install script no longer checks --version", func(in *input) {
			replaceInScript(t, in, "sbin/mount.efs sbin/mount.s3files usr/bin/amazon-efs-mount-watchdog", "sbin/mount.efs")
		}, "mount.s3files"},
		{"efs-utils installed without the install script", func(in *input) {
			replaceIn(t, in, " && /hack/install-efs-utils.sh /out /tmp/efs-utils.tar.gz \\\n", " && mkdir /out \\\n")
		}, "RUNs it on /tmp/efs-utils.tar.gz"},
		{"the install script not copied into its stage", func(in *input) {
			replaceIn(t, in, "COPY hack/versions hack/install-efs-utils.sh /hack/", "COPY hack/versions /hack/")
		}, "COPYs hack/install-efs-utils.sh"},
		{"the image no longer checks mount.s3files' version", func(in *input) {
			replaceIn(t, in, "for helper in /sbin/mount.efs /sbin/mount.s3files; do", "for helper in /sbin/mount.efs; do")
		}, "mount.s3files --version"},
		{"a cgo driver binary", func(in *input) { replaceIn(t, in, "CGO_ENABLED=0 ", "") }, "CGO_ENABLED=0"},
		{"a BuildKit lint rule (FROM ... as casing)", func(in *input) {
			replaceIn(t, in, "AS efs-proxy", "as efs-proxy")
		}, "FromAsCasing"},
		{"an undefined build argument", func(in *input) {
			replaceIn(t, in, "COPY --from=build /out/efs-csi-driver", "COPY --from=build /out/${OUT_NAME}")
		}, "UndefinedVar"},
		{"the image's file check removed", func(in *input) {
			replaceIn(t, in, "COPY hack/image-files.txt /usr/share/efs-csi-driver/image-files.txt\n", "")
		}, "must COPY hack/image-files.txt"},
		{"a driver directory missing from the file list", func(in *input) {
			in.defaults["efs-utils-config-dir-path"] = "/var/lib/efs"
		}, "--efs-utils-config-dir-path defaults to /var/lib/efs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, err := load("../..", "")
			if err != nil {
				t.Fatal(err)
			}
			in.defaults = map[string]string{}
			for k, v := range driverDefaults {
				in.defaults[k] = v
			}
			tc.edit(in)
			problems := check(in)
			if tc.expect == "" {
				if len(problems) > 0 {
					t.Fatalf("problems: %q", problems)
				}
				return
			}
			for _, p := range problems {
				if strings.Contains(p, tc.expect) {
					return
				}
			}
			t.Fatalf("no problem mentions %q; got %q", tc.expect, problems)
		})
	}
}

func replaceIn(t *testing.T, in *input, old, new string) {
	t.Helper()
	s := string(in.dockerfile)
	if !strings.Contains(s, old) {
		t.Fatalf("the Dockerfile has no %q", old)
	}
	in.dockerfile = []byte(strings.Replace(s, old, new, 1))
}

func replaceInScript(t *testing.T, in *input, old, new string) {
	t.Helper()
	s := string(in.install)
	if !strings.Contains(s, old) {
		t.Fatalf("%s has no %q", installScript, old)
	}
	in.install = []byte(strings.Replace(s, old, new, 1))
}

func TestFlagDefaultsParsesGoUsage(t *testing.T) {
	usage := "Usage of x:\n  -efs-utils-config-dir-path string\n    \taccepted (default \"/var/amazon/efs\")\n" +
		"  -local-root string\n    \temulator data directory\n  -v value\n    \tlog level\n" +
		"  -efs-utils-static-files-path string\n    \tstatic\n    \tfiles (default \"/etc/amazon/efs-static-files/\")\n"
	got := flagDefaults(usage)
	want := map[string]string{"efs-utils-config-dir-path": "/var/amazon/efs", "efs-utils-static-files-path": "/etc/amazon/efs-static-files/"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
}
