package controller

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// The controller reads time only through its clock (Config.Now, passed on
// to the journal and the allocator): a real-clock read would make a step
// of the protocol that the simulator cannot replay, and a test's clock a
// lie. New's default (cfg.Now = time.Now) is the one place the real clock
// is named. Context timeouts bound I/O and are not reads of the protocol's
// time.
func TestControllerReadsTimeOnlyThroughItsClock(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]int{"controller.go": 1} // New: cfg.Now = time.Now
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		reads := 0
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "time" {
				switch sel.Sel.Name {
				case "Now", "Since", "Until", "Sleep", "After", "Tick", "AfterFunc":
					reads++
					if reads > allowed[name] {
						t.Errorf("%s: time.%s: read the controller's clock (s.now, s.sleepUntil)", fset.Position(sel.Pos()), sel.Sel.Name)
					}
				}
			}
			return true
		})
	}
}
