// Command api counts the exported identifiers of the module's public
// packages and fails when there are more than a ceiling, so that the API
// surface only grows on purpose: raising the ceiling is a visible change.
//
// It counts, in each package's non-test Go files (those the go command
// builds on this platform): exported top-level constants, variables,
// functions and types, and the exported methods of exported types. Struct
// fields, interface methods and the methods of unexported types (which
// satisfy interfaces but name no API of their own) are not counted. Public packages are
// those of the module in the current directory that are not commands
// (package main) and have no "internal" element in their path; examples/,
// bench/, testdata, directories starting with "." or "_", and nested
// modules are skipped.
//
// Usage, from the module's root:
//
//	go run ./.ci/api -max 216
//	go run ./.ci/api -list    # also every counted identifier
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// skipped are the top-level directories whose packages are not the
// library's API.
var skipped = map[string]bool{"examples": true, "bench": true}

type pkg struct {
	path  string   // import path
	names []string // counted identifiers, as Name or Recv.Name
}

func main() {
	max := flag.Int("max", -1, "fail if the total is above `n` (negative: no ceiling)")
	list := flag.Bool("list", false, "print every counted identifier")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "api: no arguments expected; run it from the module's root")
		os.Exit(2)
	}
	mod, err := modulePath("go.mod")
	if err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(2)
	}
	pkgs, err := count(".", mod)
	if err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(2)
	}

	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "package\tcount\t")
	total := 0
	for _, p := range pkgs {
		fmt.Fprintf(w, "%s\t%d\t\n", p.path, len(p.names))
		total += len(p.names)
	}
	w.Flush()
	if *list {
		for _, p := range pkgs {
			fmt.Printf("\n%s\n", p.path)
			for _, n := range p.names {
				fmt.Printf("\t%s\n", n)
			}
		}
		fmt.Println()
	}
	if *max < 0 {
		fmt.Printf("total %d\n", total)
		return
	}
	fmt.Printf("total %d (ceiling %d)\n", total, *max)
	if total > *max {
		fmt.Fprintf(os.Stderr, "api: FAIL: %d exported identifiers, %d more than the ceiling %d\n",
			total, total-*max, *max)
		os.Exit(1)
	}
}

// modulePath reads the module path from the go.mod file at name.
func modulePath(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module")
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		rest = strings.TrimSpace(rest)
		if i := strings.Index(rest, "//"); i >= 0 {
			rest = strings.TrimSpace(rest[:i])
		}
		if unq, err := strconv.Unquote(rest); err == nil {
			rest = unq
		}
		if rest != "" {
			return rest, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no module line", name)
}

// count walks the module rooted at dir and returns its public packages,
// sorted by import path, with their exported identifiers.
func count(dir, mod string) ([]pkg, error) {
	var pkgs []pkg
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != "." {
			name := d.Name()
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
				name == "testdata" || name == "internal" || skipped[rel] {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		bp, err := build.ImportDir(p, 0)
		if err != nil {
			var none *build.NoGoError
			if errors.As(err, &none) {
				return nil
			}
			return err
		}
		if bp.Name == "main" {
			return nil
		}
		names, err := exported(p, bp.GoFiles)
		if err != nil {
			return err
		}
		ip := mod
		if rel != "." {
			ip = path.Join(mod, rel)
		}
		pkgs = append(pkgs, pkg{path: ip, names: names})
		return nil
	})
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].path < pkgs[j].path })
	return pkgs, err
}

// exported parses files in dir and returns their exported top-level
// identifiers and the exported methods of their exported types, sorted.
func exported(dir string, files []string) ([]string, error) {
	fset := token.NewFileSet()
	var names []string
	for _, name := range files {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if !decl.Name.IsExported() {
					continue
				}
				if decl.Recv == nil {
					names = append(names, decl.Name.Name)
				} else if recv := receiver(decl.Recv.List[0].Type); token.IsExported(recv) {
					names = append(names, recv+"."+decl.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						if spec.Name.IsExported() {
							names = append(names, spec.Name.Name)
						}
					case *ast.ValueSpec:
						for _, id := range spec.Names {
							if id.IsExported() {
								names = append(names, id.Name)
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(names)
	return names, nil
}

// receiver returns the name of a method's receiver type: T for T, *T,
// T[P] and *T[P, Q].
func receiver(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return "?"
		}
	}
}
