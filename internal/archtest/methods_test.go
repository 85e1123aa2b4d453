package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxMethods is the most methods a type of the production code may have:
// past it, a type holds more than one role and is split into types named
// after them (STYLE.md, "God objects").
const maxMethods = 15

// ceilings are the types that have more today, each with its count as a
// ceiling that may only come down: the state stores' key names (one
// method per key), the SQS client, the limiter, the CLI (one method per cobra command), the
// investigation's run (one turn of the loop: the structured answer, its
// retries and the hard token cap read top to bottom in it), Config
// (host names, feedback and resolutions wired in), the
// protocol fakes and the harness's handle on an agent process; and the
// worker's pipeline, whose methods are one task's life read top to bottom
// in pipeline.go, accept → validate → approve → place → claim → decide →
// run → record → finish → ack and the hand-back: role types calling each
// other sideways would make one task's walk cross files back and forth,
// so a life stays in one place rather than being split by count.
var ceilings = map[string]int{
	"agent/state.keys":             16,
	"agent/queue.SQS":              19,
	"agent/investigate.run":        19,
	"agent/worker.pipeline":        31,
	"agent/config.Config":          17,
	"limiter.Limiter":              18,
	"cmd/autodiag.cli":             26,
	"internal/fake/sqsfake.Server": 52,
	"internal/fake/asgfake.Server": 34,
	"internal/harness.Agent":       16,
}

// TestMethodsPerType counts the methods of every type declared in the
// module's non-test Go files, by package directory and type name.
func TestMethodsPerType(t *testing.T) {
	counts := map[string]int{}
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv != nil {
				if name := recvName(fd.Recv.List[0].Type); name != "" {
					counts[filepath.ToSlash(dir)+"."+name]++
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if counts["agent/worker.pipeline"] == 0 {
		t.Fatal("found no methods of agent/worker.pipeline: the walk missed the module")
	}
	for typ, n := range counts {
		limit := maxMethods
		if c, ok := ceilings[typ]; ok {
			limit = c
		}
		if n > limit {
			t.Errorf("%s has %d methods, more than %d: split it by role into types named after them", typ, n, limit)
		}
	}
}

// recvName is the type name of a method receiver: T, *T, T[P] or *T[P].
func recvName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	switch x := e.(type) {
	case *ast.IndexExpr:
		e = x.X
	case *ast.IndexListExpr:
		e = x.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
