package driver

import (
	"encoding/json"
	"runtime"

	"github.com/efs-csi/efs-csi-driver/pkg/efsutils"
	"github.com/efs-csi/efs-csi-driver/pkg/version"
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

// GetVersion is this binary's VersionInfo (pkg/version's, stamped at build time).
func GetVersion() VersionInfo {
	v := version.Get()
	return VersionInfo{
		DriverVersion:   v.Version,
		GitCommit:       v.GitCommit,
		BuildDate:       v.BuildDate,
		EfsClientSource: efsutils.ClientSource,
		GoVersion:       v.GoVersion,
		Compiler:        runtime.Compiler,
		Platform:        v.Platform,
	}
}

// VersionJSON is GetVersion as upstream prints it: indented JSON.
func VersionJSON() string {
	b, _ := json.MarshalIndent(GetVersion(), "", "  ") // strings only: cannot fail
	return string(b)
}
