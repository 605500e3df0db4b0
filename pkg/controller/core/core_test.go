package core

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCoreDoesNoIO holds the package to deciding: no file, network,
// process, goroutine or clock of its own. Its production files import
// only data, error and formatting packages, and the record's, EFS's and
// the volume's types (whose packages do I/O elsewhere, never called
// here: a call would show as a method on a client, which this package is
// never given).
func TestCoreDoesNoIO(t *testing.T) {
	allowed := map[string]bool{
		"errors": true, "fmt": true, "log/slog": true, "maps": true, "slices": true, "strconv": true, "time": true,
		"iter":     true, // iter.Pull runs a protocol as a coroutine only inside Next and Step (proc)
		"context":  true, // context.Background, for the logger's LogAttrs alone (proc.logAttrs): no machine is given a context
		"hash/fnv": true, // the volumes' sequences of ids (sequence.go)
		"github.com/efs-csi/efs-csi-driver/pkg/gid":       true,
		"github.com/efs-csi/efs-csi-driver/pkg/efs":       true,
		"github.com/efs-csi/efs-csi-driver/pkg/journal":   true,
		"github.com/efs-csi/efs-csi-driver/pkg/rootpath":  true, // root directories nested with one (no I/O)
		"github.com/efs-csi/efs-csi-driver/pkg/keylock":   true,
		"github.com/efs-csi/efs-csi-driver/pkg/ownership": true,
		"github.com/efs-csi/efs-csi-driver/pkg/volume":    true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[path] {
				t.Errorf("%s imports %s: the core decides, its caller does", f, path)
			}
		}
		for _, banned := range []string{"time.Now", "time.Since", "time.Until", "time.Sleep", "time.After", "go func"} {
			if strings.Contains(string(src), banned) {
				t.Errorf("%s uses %s: times come in with the call", f, banned)
			}
		}
	}
}

// nextPath is the path after choices in a depth-first walk of every
// sequence of options (counts[i]: how many the run had at step i): the
// last step with an option left, advanced, the steps after it dropped
// (they take their first option). false: every path has run.
func nextPath(choices, counts []int) ([]int, bool) {
	choices = append(choices[:0:0], choices...)
	for len(choices) < len(counts) {
		choices = append(choices, 0)
	}
	for len(choices) > 0 && choices[len(choices)-1]+1 >= counts[len(choices)-1] {
		choices = choices[:len(choices)-1]
	}
	if len(choices) == 0 {
		return nil, false
	}
	choices[len(choices)-1]++
	return choices, true
}
