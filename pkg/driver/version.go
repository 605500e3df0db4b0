package driver

import (
	"cmp"
	"encoding/json"
	"runtime"
	"runtime/debug"

	"github.com/efs-csi/efs-csi-driver/pkg/efsutils"
)

// GitCommit and BuildDate are set at build time with -ldflags
// "-X .../pkg/driver.GitCommit=<sha> -X .../pkg/driver.BuildDate=<RFC 3339>";
// without them they are the Go toolchain's VCS stamp, when it has one.
var (
	GitCommit string
	BuildDate string
)

// VersionInfo is what --version prints, upstream's JSON keys and order, so
// that scripts parsing upstream's output read this driver's.
type VersionInfo struct {
	DriverVersion   string `json:"driverVersion"`
	GitCommit       string `json:"gitCommit"`
	BuildDate       string `json:"buildDate"`
	EfsClientSource string `json:"efsClientSource"`
	GoVersion       string `json:"goVersion"`
	Compiler        string `json:"compiler"`
	Platform        string `json:"platform"`
}

// GetVersion is this binary's VersionInfo.
func GetVersion() VersionInfo {
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
	return VersionInfo{
		DriverVersion:   Version,
		GitCommit:       cmp.Or(GitCommit, revision),
		BuildDate:       cmp.Or(BuildDate, vcsTime),
		EfsClientSource: efsutils.ClientSource,
		GoVersion:       runtime.Version(),
		Compiler:        runtime.Compiler,
		Platform:        runtime.GOOS + "/" + runtime.GOARCH,
	}
}

// VersionJSON is GetVersion as upstream prints it: indented JSON.
func VersionJSON() string {
	b, _ := json.MarshalIndent(GetVersion(), "", "  ") // strings only: cannot fail
	return string(b)
}
