// Command core-figures prints the figures issue 46 measures the protocol
// core by, for the tree it runs in: effect kinds, the effects that only
// read or write the process's memory, closures and their deepest nesting
// in pkg/controller/core, the lines of the shell's effect executor, and
// the non-test lines of pkg/controller, its core and the simulator.
//
//	go run ./hack/core-figures
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

// memoryKinds are the effects a machine asked of the process's own memory
// (no record, no EFS, no directory, no lock): issue 46's list, as far as
// each still exists.
var memoryKinds = map[string]bool{
	"Answered": true, "RememberAnswer": true, "Forget": true, "Recall": true, "Remember": true, "ForgetFinished": true,
	"Burned": true, "UpstreamToken": true, "Seen": true, "DirSeen": true, "DirGone": true, "Candidate": true,
	"Reserve": true, "Release": true, "Creating": true, "CreateEnded": true, "OutsideToken": true, "LearnOutside": true,
	"RootNotOwned": true, "Named": true,
}

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	fset := token.NewFileSet()
	files := func(dir string) []*ast.File {
		var out []*ast.File
		paths, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
		for _, p := range paths {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			out = append(out, f)
		}
		return out
	}
	lines := func(dirs ...string) int {
		n := 0
		for _, d := range dirs {
			paths, _ := filepath.Glob(filepath.Join(root, d, "*.go"))
			for _, p := range paths {
				if strings.HasSuffix(p, "_test.go") {
					continue
				}
				b, _ := os.ReadFile(p)
				n += strings.Count(string(b), "\n")
			}
		}
		return n
	}
	core := files("pkg/controller/core")
	kinds, memory := 0, 0
	closures, deepest := 0, 0
	for _, f := range core {
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "effect" && fn.Recv != nil {
				kinds++
				if id, ok := fn.Recv.List[0].Type.(*ast.Ident); ok && memoryKinds[id.Name] {
					memory++
				}
			}
		}
		var walk func(n ast.Node, depth int)
		walk = func(n ast.Node, depth int) {
			ast.Inspect(n, func(c ast.Node) bool {
				if c == n {
					return true
				}
				if lit, ok := c.(*ast.FuncLit); ok {
					closures++
					deepest = max(deepest, depth+1)
					walk(lit.Body, depth+1)
					return false
				}
				return true
			})
		}
		walk(f, 0)
	}
	doLines := 0
	for _, f := range files("pkg/controller") {
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "do" && fn.Recv != nil {
				doLines = fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			}
		}
	}
	sim := "pkg/controller/sim" // before the simulator moved out of the tree it tests
	if _, err := os.Stat(filepath.Join(root, "internal/sim")); err == nil {
		sim = "internal/sim"
	}
	fmt.Printf("effect kinds                      %d\n", kinds)
	fmt.Printf("effects of the process's memory   %d\n", memory)
	fmt.Printf("closures in core                  %d\n", closures)
	fmt.Printf("deepest closure nesting           %d\n", deepest)
	fmt.Printf("lines of effects.do               %d\n", doLines)
	fmt.Printf("non-test lines: controller %d, core %d, simulator %d\n",
		lines("pkg/controller"), lines("pkg/controller/core"), lines(sim))
	n, err := reach(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("functions CreateVolume reaches    %d (the module's, closures included; interface calls to every implementation)\n", n)
}
