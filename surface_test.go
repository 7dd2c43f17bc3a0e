package gpumem

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The public surface (docs/decisions/2026-12-04-public-surface.md): what a
// user of the library can name is what the root, storage, stream, history,
// cuda and vulkan export, and nothing more. Two rules keep it so.
//
//  1. No exported signature names an internal package: not a function's or
//     method's parameters and results, an exported field's type, an
//     interface's method, a type's definition or alias, nor a typed
//     variable or constant. A user cannot import internal packages, so a
//     public name whose type lives there is a type they can hold but not
//     write down. A sentinel error re-exported by value (var ErrX =
//     pool.ErrX) is allowed: it is a value, and errors.Is needs it.
//  2. The module's public packages export at most publicSurfaceBudget
//     identifiers, counted as go doc lists them: each exported top-level
//     function, type, variable and constant, each exported method of an
//     exported type, each method of an exported interface (struct fields are
//     not counted). What only the library uses belongs under internal/.
//
// The snapshot tool's packages live under internal/analysis: the tool's
// interface is its command line and its JSON, not a Go API, so they add
// nothing to the surface (layering_test.go keeps every tool package there).
const publicSurfaceBudget = 600

// publicPackages parses the non-test files of every public package of the
// module that this platform builds: everything but internal/, cmd/,
// examples/, scripts/ and testdata. The key is the directory ("." for the
// root).
func publicPackages(t *testing.T) map[string][]*ast.File {
	t.Helper()
	out := map[string][]*ast.File{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch n := d.Name(); {
			case path == ".":
				return nil
			case strings.HasPrefix(n, "."), n == "testdata", n == "internal", n == "cmd", n == "examples", n == "scripts":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		dir := filepath.Dir(path)
		if ok, err := build.Default.MatchFile(dir, d.Name()); err != nil || !ok {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		out[filepath.ToSlash(dir)] = append(out[filepath.ToSlash(dir)], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// surface is one public package's exported identifiers and the exported
// declarations that name an internal package.
type surface struct {
	names, leaks []string
}

func exportedSurface(files []*ast.File) surface {
	var s surface
	for _, f := range files {
		internal := map[string]bool{} // import names of internal packages
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if !strings.Contains(p, "/internal/") && !strings.HasSuffix(p, "/internal") {
				continue
			}
			name := p[strings.LastIndex(p, "/")+1:]
			if im.Name != nil {
				name = im.Name.Name
			}
			internal[name] = true
		}
		names := func(n ast.Node) bool {
			found := false
			ast.Inspect(n, func(x ast.Node) bool {
				if sel, ok := x.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] {
						found = true
					}
				}
				return !found
			})
			return found
		}
		check := func(name string, n ast.Node) {
			if n != nil && names(n) {
				s.leaks = append(s.leaks, name)
			}
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				name := d.Name.Name
				if d.Recv != nil {
					recv := receiverType(d.Recv.List[0].Type)
					if !ast.IsExported(recv) {
						continue
					}
					name = recv + "." + name
				}
				s.names = append(s.names, name)
				check(name, d.Type)
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch sp := spec.(type) {
					case *ast.TypeSpec:
						if !sp.Name.IsExported() {
							continue
						}
						s.names = append(s.names, sp.Name.Name)
						switch ty := sp.Type.(type) {
						case *ast.StructType:
							for _, fl := range ty.Fields.List {
								if len(fl.Names) == 0 { // embedded: its methods and fields are promoted
									check(sp.Name.Name+"."+exprName(fl.Type), fl.Type)
								}
								for _, n := range fl.Names {
									if n.IsExported() {
										check(sp.Name.Name+"."+n.Name, fl.Type)
									}
								}
							}
						case *ast.InterfaceType:
							for _, m := range ty.Methods.List {
								for _, n := range m.Names {
									if n.IsExported() {
										s.names = append(s.names, sp.Name.Name+"."+n.Name)
									}
								}
								check(sp.Name.Name+" (interface)", m.Type)
							}
						default:
							check(sp.Name.Name, sp.Type)
						}
						if sp.TypeParams != nil {
							check(sp.Name.Name+" (type parameters)", sp.TypeParams)
						}
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							if n.IsExported() {
								s.names = append(s.names, n.Name)
								check(n.Name, sp.Type)
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(s.names)
	sort.Strings(s.leaks)
	return s
}

// receiverType is a method receiver's type name, without pointer or type
// parameters.
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// exprName names an embedded field's type for a message.
func exprName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return exprName(x.X)
	case *ast.SelectorExpr:
		return exprName(x.X) + "." + x.Sel.Name
	case *ast.Ident:
		return x.Name
	}
	return "?"
}

func TestNoExportedSignatureNamesAnInternalPackage(t *testing.T) {
	pkgs := publicPackages(t)
	if len(pkgs) < 6 {
		t.Fatalf("found %d public packages: run from the module root", len(pkgs))
	}
	for dir, files := range pkgs {
		for _, leak := range exportedSurface(files).leaks {
			t.Errorf("%s: exported %s names an internal package: give the package a public type of its own and convert at the boundary", dir, leak)
		}
	}
}

func TestPublicSurfaceStaysWithinItsBudget(t *testing.T) {
	pkgs := publicPackages(t)
	dirs := make([]string, 0, len(pkgs))
	for dir := range pkgs {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	total := 0
	var lines []string
	for _, dir := range dirs {
		n := len(exportedSurface(pkgs[dir]).names)
		total += n
		lines = append(lines, dir+" "+strconv.Itoa(n))
	}
	t.Logf("exported identifiers: %s; %d in all", strings.Join(lines, ", "), total)
	if total > publicSurfaceBudget {
		t.Errorf("the public packages export %d identifiers, above the budget of %d: move what only the module uses under internal/ (or unexport it) before raising the budget, and say why in a decision record",
			total, publicSurfaceBudget)
	}
}
