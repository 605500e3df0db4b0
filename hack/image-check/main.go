// Command image-check checks the Dockerfile where no container engine runs: BuildKit's own
// parser and lint rules (the checks `docker build --check` runs, without a daemon or a
// registry), every base image pinned, the versions equal to hack/versions, efs-utils
// installed by hack/install-efs-utils.sh (which verifies the pin) from the tarball of the
// pinned tag, and the list of files the node plugin needs (hack/image-files.txt) checked by
// the build and agreeing with the driver's flag defaults.
//
//	go run . -repo ../.. -driver ../../bin/efs-csi-driver
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	digest "github.com/opencontainers/go-digest"
)

func main() {
	repo := flag.String("repo", ".", "repository root (Dockerfile, hack/versions, hack/image-files.txt)")
	driver := flag.String("driver", "", "built efs-csi-driver binary, whose flag defaults the file list must match (empty: skip that check)")
	flag.Parse()
	in, err := load(*repo, *driver)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image-check:", err)
		os.Exit(2)
	}
	problems := check(in)
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "image-check:", p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
	fmt.Printf("image-check OK: %d stages, %d base images pinned, efs-utils %s, %d image files\n",
		in.stages, in.pinned, in.versions["EFS_UTILS_VERSION"], len(in.files))
}

// input is what the checks read. stages and pinned are filled in by check.
type input struct {
	dockerfile []byte
	install    []byte            // hack/install-efs-utils.sh
	versions   map[string]string // hack/versions
	files      []imageFile       // hack/image-files.txt
	defaults   map[string]string // the driver's flag defaults; nil: not checked
	stages     int
	pinned     int
}

type imageFile struct{ path, kind string }

func load(repo, driver string) (*input, error) {
	in := &input{}
	var err error
	if in.dockerfile, err = os.ReadFile(filepath.Join(repo, "Dockerfile")); err != nil {
		return nil, err
	}
	if in.install, err = os.ReadFile(filepath.Join(repo, installScript)); err != nil {
		return nil, err
	}
	v, err := os.ReadFile(filepath.Join(repo, "hack", "versions"))
	if err != nil {
		return nil, err
	}
	if in.versions, err = parseVersions(string(v)); err != nil {
		return nil, err
	}
	f, err := os.ReadFile(filepath.Join(repo, "hack", "image-files.txt"))
	if err != nil {
		return nil, err
	}
	if in.files, err = parseFiles(string(f)); err != nil {
		return nil, err
	}
	if driver != "" {
		// The flag package prints the usage, with every default, on -help.
		var out bytes.Buffer
		cmd := exec.Command(driver, "-help")
		cmd.Stdout, cmd.Stderr = &out, &out
		_ = cmd.Run() // exit status 0 or 2 depending on the flag package's version
		in.defaults = flagDefaults(out.String())
		if len(in.defaults) == 0 {
			return nil, fmt.Errorf("%s -help printed no flag defaults:\n%s", driver, out.String())
		}
	}
	return in, nil
}

// parseVersions reads KEY=VALUE lines; # starts a comment line.
func parseVersions(s string) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`).MatchString(k) || v == "" {
			return nil, fmt.Errorf("hack/versions:%d: %q is not KEY=VALUE", i+1, line)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("hack/versions:%d: %s twice", i+1, k)
		}
		out[k] = v
	}
	return out, nil
}

// parseFiles reads "path kind" lines, kind one of x (executable), f, d, l.
func parseFiles(s string) ([]imageFile, error) {
	var out []imageFile
	for i, line := range strings.Split(s, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || !strings.HasPrefix(fields[0], "/") || !strings.Contains("xfdl", fields[1]) || len(fields[1]) != 1 {
			return nil, fmt.Errorf("hack/image-files.txt:%d: %q is not \"/path x|f|d|l\"", i+1, line)
		}
		out = append(out, imageFile{fields[0], fields[1]})
	}
	return out, nil
}

var (
	flagLine    = regexp.MustCompile(`^  -{1,2}([A-Za-z0-9_.-]+)`)
	defaultText = regexp.MustCompile(`\(default "([^"]*)"\)`)
)

// flagDefaults parses Go flag usage text ("  -name type" lines, each followed by its
// indented description) into flag name -> default string.
func flagDefaults(usage string) map[string]string {
	out := map[string]string{}
	name := ""
	for _, line := range strings.Split(usage, "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			name = m[1]
		}
		if m := defaultText.FindStringSubmatch(line); m != nil && name != "" {
			out[name] = m[1]
		}
	}
	return out
}

// pinnedRef: a tag with a dotted version (golang:1.26.8-trixie), optionally a digest.
var pinnedRef = regexp.MustCompile(`^[a-z0-9][a-z0-9._/-]*(:[0-9a-z._-]*[0-9]+\.[0-9]+[0-9a-z._-]*)(@sha256:[0-9a-f]{64})?$`)

// installScript is efs-utils' one install step, which the Dockerfile and the tests run.
const installScript = "hack/install-efs-utils.sh"

// tarballPath is where the Dockerfile downloads the efs-utils release tarball.
const tarballPath = "/tmp/efs-utils.tar.gz"

// nodeFlagDirs are the driver flags whose default directories the node plugin reads in
// the image.
var nodeFlagDirs = []string{"efs-utils-config-dir-path", "efs-utils-static-files-path"}

func check(in *input) []string {
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }

	// 1. BuildKit's lint rules and its full conversion (undefined ARGs, stage references,
	// flags), as `docker build --check` runs them.
	sm := llb.NewSourceMap(nil, "Dockerfile", "Dockerfile", in.dockerfile)
	sm.Definition = &llb.Definition{} // as the frontend makes it: the source, no build graph
	res, err := dockerfile2llb.DockerfileLint(context.Background(), in.dockerfile, dockerfile2llb.ConvertOpt{
		SourceMap:    sm,
		MetaResolver: offlineResolver{},
	})
	if err != nil {
		return []string{"lint: " + err.Error()}
	}
	if res.Error != nil {
		add("Dockerfile does not build: %s", res.Error.Message)
	}
	for _, w := range res.Warnings {
		line := 0
		if w.Location != nil && len(w.Location.Ranges) > 0 {
			line = int(w.Location.Ranges[0].Start.Line)
		}
		add("Dockerfile:%d: %s: %s (%s)", line, w.RuleName, w.Detail, w.URL)
	}

	ast, err := parser.Parse(bytes.NewReader(in.dockerfile))
	if err != nil {
		return append(problems, "parse: "+err.Error())
	}
	stages, metaArgs, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		return append(problems, "parse: "+err.Error())
	}
	in.stages = len(stages)

	// 2. Global ARG defaults = hack/versions, both ways.
	global := map[string]string{}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			if kv.Value != nil {
				global[kv.Key] = *kv.Value
			}
		}
	}
	for k, v := range in.versions {
		switch d, ok := global[k]; {
		case !ok:
			add("hack/versions has %s, the Dockerfile no global ARG %s", k, k)
		case d != v:
			add("ARG %s=%s in the Dockerfile, %s in hack/versions", k, d, v)
		}
	}
	for k := range global {
		if _, ok := in.versions[k]; !ok && (strings.HasSuffix(k, "_IMAGE") || strings.HasPrefix(k, "EFS_UTILS_")) {
			add("global ARG %s is a pin missing from hack/versions", k)
		}
	}
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(in.versions["EFS_UTILS_VERSION"]) {
		add("EFS_UTILS_VERSION %q is not a release version X.Y.Z", in.versions["EFS_UTILS_VERSION"])
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(in.versions["EFS_UTILS_SHA256"]) {
		add("EFS_UTILS_SHA256 %q is not a sha256", in.versions["EFS_UTILS_SHA256"])
	}

	// 3. Every FROM is an earlier stage or a pinned image.
	names := map[string]bool{}
	for _, st := range stages {
		ref := os.Expand(st.BaseName, func(k string) string { return global[k] })
		switch {
		case names[strings.ToLower(ref)]:
		case ref == "scratch":
		case pinnedRef.MatchString(ref):
			in.pinned++
		default:
			add("Dockerfile:%d: FROM %s (%s) is not pinned to a versioned tag (or digest)", st.Location[0].Start.Line, st.BaseName, ref)
		}
		if st.Name != "" {
			names[st.Name] = true
		}
	}

	// 4. The source tarball is fetched by the pinned tag and installed by the install
	// script, which checks it against the pinned sum and version, and the driver is static.
	text := string(in.dockerfile)
	for _, want := range []string{
		`/archive/refs/tags/v${EFS_UTILS_VERSION}.tar.gz`,
		`-o ` + tarballPath,
		`CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build`,
	} {
		if !strings.Contains(text, want) {
			add("the Dockerfile no longer has %q", want)
		}
	}
	if !installsWithScript(stages) {
		add("no stage of the Dockerfile COPYs %s and hack/versions and RUNs it on %s: efs-utils must be installed by that script", installScript, tarballPath)
	}
	script := string(in.install)
	for _, want := range []string{
		`sed -n "s/^${name}=//p" "${here}/versions"`, // the pins are hack/versions'
		`version=${EFS_UTILS_VERSION:-$(pin EFS_UTILS_VERSION)}`,
		`sha256=${EFS_UTILS_SHA256:-$(pin EFS_UTILS_SHA256)}`,
		`echo "${sha256}  ${tarball}" | sha256sum -c -`,
		`grep -qx "version=${version}" "${src}/config.ini"`,
		`--version`,
		`sbin/mount.efs sbin/mount.s3files usr/bin/amazon-efs-mount-watchdog`,
	} {
		if !strings.Contains(script, want) {
			add("%s no longer has %q", installScript, want)
		}
	}

	// 5. The final stage checks hack/image-files.txt, and the list has the driver's
	// directories.
	if len(stages) > 0 {
		last := stages[len(stages)-1]
		var copied, ran, versioned bool
		for _, c := range last.Commands {
			switch c := c.(type) {
			case *instructions.CopyCommand:
				copied = copied || (len(c.SourcePaths) == 1 && c.SourcePaths[0] == "hack/image-files.txt" && c.From == "")
			case *instructions.RunCommand:
				line := strings.Join(c.CmdLine, " ")
				ran = ran || strings.Contains(line, "/usr/share/efs-csi-driver/image-files.txt")
				versioned = versioned || strings.Contains(line, "/sbin/mount.efs /sbin/mount.s3files") &&
					strings.Contains(line, "--version") && strings.Contains(line, "${EFS_UTILS_VERSION}")
			}
		}
		if !copied || !ran {
			add("the final stage must COPY hack/image-files.txt and RUN its check (copied %v, ran %v)", copied, ran)
		}
		if !versioned {
			add("the final stage must RUN /sbin/mount.efs and /sbin/mount.s3files --version against ${EFS_UTILS_VERSION}")
		}
	}
	listed := map[string]string{}
	for _, f := range in.files {
		listed[f.path] = f.kind
	}
	if in.defaults != nil {
		for _, name := range nodeFlagDirs {
			def, ok := in.defaults[name]
			if !ok {
				add("the driver has no default for --%s", name)
				continue
			}
			if p := strings.TrimSuffix(def, "/"); listed[p] != "d" {
				add("--%s defaults to %s, which hack/image-files.txt does not list as a directory", name, def)
			}
		}
	}
	return problems
}

// installsWithScript: one stage COPYs the install script and hack/versions (from the
// build context) and RUNs the script on the downloaded tarball.
func installsWithScript(stages []instructions.Stage) bool {
	for _, st := range stages {
		var script, versions, ran bool
		for _, c := range st.Commands {
			switch c := c.(type) {
			case *instructions.CopyCommand:
				if c.From == "" {
					script = script || slices.Contains(c.SourcePaths, installScript)
					versions = versions || slices.Contains(c.SourcePaths, "hack/versions")
				}
			case *instructions.RunCommand:
				line := strings.Join(c.CmdLine, " ")
				ran = ran || script && regexp.MustCompile(`install-efs-utils\.sh +\S+ +`+regexp.QuoteMeta(tarballPath)+`\b`).MatchString(line)
			}
		}
		if script && versions && ran {
			return true
		}
	}
	return false
}

// offlineResolver answers every base image with an empty linux configuration of the
// requested platform: the lint needs no registry.
type offlineResolver struct{}

func (offlineResolver) ResolveImageConfig(_ context.Context, ref string, opt sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	os, arch := "linux", "amd64"
	if o := opt.ImageOpt; o != nil && o.Platform != nil {
		os, arch = o.Platform.OS, o.Platform.Architecture
	}
	cfg := fmt.Sprintf(`{"os":%q,"architecture":%q,"config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},"rootfs":{"type":"layers","diff_ids":[]}}`, os, arch)
	return ref, digest.FromString(cfg), []byte(cfg), nil
}
