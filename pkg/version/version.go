// Package version is what every binary's --version prints: the release (the VERSION file),
// the commit and the build date, stamped at build time with -ldflags
// "-X github.com/efs-csi/efs-csi-driver/pkg/version.Version=$(cat VERSION)
// -X .../pkg/version.GitCommit=<sha> -X .../pkg/version.BuildDate=<RFC 3339>"
// (the Makefile, the Dockerfile and the release workflow do). It imports nothing of the
// driver's, so that the emulator and the stress tool carry it for free.
package version

import (
	"cmp"
	"encoding/json"
	"runtime"
	"runtime/debug"
)

// Unstamped (go build, go test), Version is VERSION with -dev, and GitCommit and BuildDate
// are the Go toolchain's VCS stamp, when it has one.
var (
	Version   = "0.1.0-dev"
	GitCommit string
	BuildDate string
)

// Info is a binary's version.
type Info struct {
	Version   string `json:"version"`
	GitCommit string `json:"gitCommit"`
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get is this binary's Info.
func Get() Info {
	var revision, vcsTime string
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				vcsTime = s.Value
			}
		}
	}
	return Info{
		Version:   Version,
		GitCommit: cmp.Or(GitCommit, revision),
		BuildDate: cmp.Or(BuildDate, vcsTime),
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
}

// JSON is Get as --version prints it: indented JSON.
func JSON() string {
	b, _ := json.MarshalIndent(Get(), "", "  ") // strings only: cannot fail
	return string(b)
}
