package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrRevisionMissing means the repository does not hold the revision asked for (a
// shallow clone, or a tag that was not fetched).
var ErrRevisionMissing = errors.New("revision not in this repository")

// Release is a driver release built from a git revision of this repository.
type Release struct {
	Commit string // the full commit hash the revision names
	Src    string // the revision's tree: its manifests are the release's manifests
	Bin    string // directory holding its efs-csi-driver and efs-emulator
}

// BuildRelease builds the driver and emulator of rev (a tag or commit of the repository
// at repo) into cacheDir/release-<commit>, or reuses that build: a commit's tree never
// changes, so neither does its build. The tree is exported with git archive, so the
// working tree and its index are never touched.
func BuildRelease(ctx context.Context, repo, rev, cacheDir string) (Release, error) {
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--verify", "--quiet", rev+"^{commit}").Output()
	if err != nil {
		return Release{}, fmt.Errorf("%w: %s", ErrRevisionMissing, rev)
	}
	commit := strings.TrimSpace(string(out))
	dir := filepath.Join(cacheDir, "release-"+commit)
	r := Release{Commit: commit, Src: filepath.Join(dir, "src"), Bin: filepath.Join(dir, "bin")}
	if _, err := os.Stat(filepath.Join(r.Bin, "efs-csi-driver")); err == nil {
		return r, nil
	}
	// Build beside the cache entry, then rename it into place: an interrupted build
	// leaves no entry that looks complete.
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return Release{}, err
	}
	tmp, err := os.MkdirTemp(cacheDir, "building-")
	if err != nil {
		return Release{}, err
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return Release{}, err
	}
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", repo, commit, src)
	if b, err := archive.CombinedOutput(); err != nil {
		return Release{}, fmt.Errorf("export %s: %w\n%s", commit, err, b)
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(tmp, "bin")+"/",
		// pkg/driver.Version before pkg/version, pkg/version.Version since (the linker
		// ignores the one a commit does not have).
		"-ldflags", "-X github.com/efs-csi/efs-csi-driver/pkg/driver.Version="+commit[:12]+
			" -X github.com/efs-csi/efs-csi-driver/pkg/version.Version="+commit[:12],
		"./cmd/efs-csi-driver", "./cmd/efs-emulator")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if b, err := build.CombinedOutput(); err != nil {
		return Release{}, fmt.Errorf("build %s: %w\n%s", commit, err, b)
	}
	if err := os.RemoveAll(dir); err != nil { // a broken entry of an older run
		return Release{}, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return Release{}, err
	}
	return r, nil
}
