package main

import (
	"fmt"
	"go/types"
	"path/filepath"
	"strings"

	"golang.org/x/tools/go/callgraph"
	"golang.org/x/tools/go/callgraph/cha"
	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/go/ssa"
	"golang.org/x/tools/go/ssa/ssautil"
)

// reach counts the functions of the module in root that
// (*controller.Service).CreateVolume reaches by calls, with every call
// through an interface taken to reach every method that implements it
// (class hierarchy analysis: an upper bound, as a reader following
// calls by name meets them), closures counted as functions. The
// module's own code only: the standard library and other modules are
// not the plan.
func reach(root string) (int, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return 0, err
	}
	cfg := &packages.Config{Mode: packages.LoadAllSyntax | packages.NeedModule, Dir: abs}
	pkgs, err := packages.Load(cfg, "./pkg/controller")
	if err != nil {
		return 0, err
	}
	if packages.PrintErrors(pkgs) > 0 {
		return 0, fmt.Errorf("loading %s: errors above", abs)
	}
	prog, ssaPkgs := ssautil.AllPackages(pkgs, ssa.InstantiateGenerics)
	prog.Build()
	module := pkgs[0].Module.Path + "/"
	var start *ssa.Function
	for _, p := range ssaPkgs {
		if p == nil {
			continue
		}
		if t := p.Type("Service"); t != nil {
			start = prog.LookupMethod(types.NewPointer(t.Type()), p.Pkg, "CreateVolume")
		}
	}
	if start == nil {
		return 0, fmt.Errorf("no (*Service).CreateVolume in %s", abs)
	}
	g := cha.CallGraph(prog)
	seen := map[*ssa.Function]bool{}
	var visit func(n *callgraph.Node)
	visit = func(n *callgraph.Node) {
		if n == nil || seen[n.Func] {
			return
		}
		seen[n.Func] = true
		for _, e := range n.Out {
			if f := e.Callee.Func; f.Pkg != nil && strings.HasPrefix(f.Pkg.Pkg.Path()+"/", module) {
				visit(e.Callee)
			}
		}
	}
	visit(g.Nodes[start])
	return len(seen), nil
}
