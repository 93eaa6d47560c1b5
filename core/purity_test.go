package core

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSansIO holds the core, the packages whose rules it runs (router,
// gapfill) and the upstream selector (failover) to what makes each a
// sans-I/O state machine: no goroutines, no locks, no I/O, no clock of
// its own. Time arrives with each event.
func TestSansIO(t *testing.T) {
	forbiddenImports := []string{"sync", "net", "os", "io/fs", "syscall", "crypto/rand", "math/rand", "log", "unsafe"}
	forbiddenTime := map[string]bool{
		"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "AfterFunc": true,
		"NewTimer": true, "NewTicker": true, "Tick": true,
	}
	for _, dir := range []string{".", "../router", "../gapfill", "../failover", "../fairq"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			checked++
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for _, bad := range forbiddenImports {
					if p == bad || strings.HasPrefix(p, bad+"/") {
						t.Errorf("%s imports %q", fset.Position(imp.Pos()), p)
					}
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.GoStmt:
					t.Errorf("%s starts a goroutine", fset.Position(n.Pos()))
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" && forbiddenTime[n.Sel.Name] {
						t.Errorf("%s reads the clock or waits: time.%s", fset.Position(n.Pos()), n.Sel.Name)
					}
				case *ast.ChanType, *ast.SelectStmt:
					t.Errorf("%s uses a channel", fset.Position(n.Pos()))
				}
				return true
			})
		}
		if checked == 0 {
			t.Errorf("no Go files checked in %s", dir)
		}
	}
}
