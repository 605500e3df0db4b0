package release

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/version"
)

var semver = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// field is the value of the first line "key: value" of s, unquoted.
func field(t *testing.T, s, key, file string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `:[ \t]*(.*?)[ \t]*$`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("%s: no %q", file, strings.TrimSpace(key))
	}
	return strings.Trim(m[1], `"'`)
}

// One version, in one convention: VERSION has no v (the git tag does: v0.1.0), the image
// tag, the chart's version and appVersion are VERSION, the Makefile stamps VERSION, the
// docs install it and CHANGELOG.md has its section (docs/release.md).
func TestVersionsAgree(t *testing.T) {
	want := strings.TrimSpace(read(t, "VERSION"))
	if !semver.MatchString(want) {
		t.Fatalf("VERSION %q: want MAJOR.MINOR.PATCH without a v", want)
	}

	chart := read(t, "charts/efs-csi-driver/Chart.yaml")
	if v := field(t, chart, "version", "Chart.yaml"); v != want {
		t.Errorf("charts/efs-csi-driver/Chart.yaml version %q, VERSION %q", v, want)
	}
	if v := field(t, chart, "appVersion", "Chart.yaml"); v != want {
		t.Errorf("charts/efs-csi-driver/Chart.yaml appVersion %q, VERSION %q", v, want)
	}

	// values.yaml's image.tag: empty (the appVersion, by _helpers' efs-csi.image) or VERSION.
	values := read(t, "charts/efs-csi-driver/values.yaml")
	block := regexp.MustCompile(`(?m)^image:\n((?:[ \t]+.*\n|[ \t]*\n)*)`).FindStringSubmatch(values)
	if block == nil {
		t.Fatal("charts/efs-csi-driver/values.yaml: no top-level image:")
	}
	if tag := field(t, block[1], "  tag", "values.yaml image"); tag != "" && tag != want {
		t.Errorf("charts/efs-csi-driver/values.yaml image.tag %q, VERSION %q", tag, want)
	}
	helpers := read(t, "charts/efs-csi-driver/templates/_helpers.tpl")
	if !strings.Contains(helpers, "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}") {
		t.Error("charts/efs-csi-driver/templates/_helpers.tpl: efs-csi.image no longer defaults the tag to the appVersion")
	}
	// The rendered manifests (hack/generate-manifests.sh) carry the same tag.
	base := read(t, "deploy/kubernetes/base/efs-csi-driver.yaml")
	images := regexp.MustCompile(`image: \S*/efs-csi-driver:(\S+)`).FindAllStringSubmatch(base, -1)
	if len(images) == 0 {
		t.Error("deploy/kubernetes/base/efs-csi-driver.yaml: no efs-csi-driver image")
	}
	for _, m := range images {
		if m[1] != want {
			t.Errorf("deploy/kubernetes/base/efs-csi-driver.yaml image tag %q, VERSION %q", m[1], want)
		}
	}

	// The Makefile reads VERSION and stamps it; it names no version of its own.
	makefile := read(t, "Makefile")
	if !regexp.MustCompile(`(?m)^VERSION \?= \$\(shell cat \$\(CURDIR\)/VERSION\)$`).MatchString(makefile) {
		t.Error("Makefile: VERSION is not read from the VERSION file (VERSION ?= $(shell cat $(CURDIR)/VERSION))")
	}
	if !strings.Contains(makefile, "-X github.com/efs-csi/efs-csi-driver/pkg/version.Version=$(VERSION)") {
		t.Error("Makefile: LDFLAGS do not stamp pkg/version.Version with $(VERSION)")
	}
	if m := regexp.MustCompile(`\bv?[0-9]+\.[0-9]+\.[0-9]+\b`).FindString(makefile); m != "" {
		t.Errorf("Makefile names a version of its own, %q: VERSION is the one source", m)
	}

	// The docs' and the Dockerfile's commands install or build this version, with no v.
	mention := regexp.MustCompile(`ghcr\.io/efs-csi/(?:charts/)?efs-csi-driver:(v?[0-9]+\.[0-9]+\.[0-9]+)|--version (v?[0-9]+\.[0-9]+\.[0-9]+)|\bVERSION=(v?[0-9]+\.[0-9]+\.[0-9]+)`)
	for _, f := range []string{"README.md", "docs/install.md", "docs/release.md", "Dockerfile", "charts/efs-csi-driver/README.md"} {
		if _, err := os.Stat(filepath.Join("..", "..", f)); err != nil {
			continue
		}
		for _, m := range mention.FindAllStringSubmatch(read(t, f), -1) {
			if got := m[1] + m[2] + m[3]; got != want {
				t.Errorf("%s: %q names %s, VERSION is %s", f, m[0], got, want)
			}
		}
	}
	// The release's notes are CHANGELOG.md's section of the version.
	if !strings.Contains(read(t, "CHANGELOG.md"), "\n## ["+want+"] - ") {
		t.Errorf("CHANGELOG.md: no section \"## [%s] - DATE\"", want)
	}

	// Unstamped (go build, go test) the driver says VERSION-dev.
	if version.Version != want+"-dev" {
		t.Errorf("pkg/version.Version %q unstamped, want %q", version.Version, want+"-dev")
	}
}
