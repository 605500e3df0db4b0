package version

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// A binary stamped as the Makefile stamps it prints those values; unstamped, the VCS's.
func TestStampedVersionJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	dir := t.TempDir()
	main := filepath.Join(dir, "main.go")
	src := "package main\n\nimport (\n\t\"fmt\"\n\n\t\"github.com/efs-csi/efs-csi-driver/pkg/version\"\n)\n\nfunc main() { fmt.Println(version.JSON()) }\n"
	if err := os.WriteFile(main, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "v")
	const pkg = "github.com/efs-csi/efs-csi-driver/pkg/version"
	build := exec.Command("go", "build", "-o", bin, "-ldflags",
		"-X "+pkg+".Version=9.8.7 -X "+pkg+".GitCommit=abc123 -X "+pkg+".BuildDate=2026-01-02T03:04:05Z", main)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	var got Info
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := Info{Version: "9.8.7", GitCommit: "abc123", BuildDate: "2026-01-02T03:04:05Z",
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
