// Command housecount reports housekeeping counts over the product code of the
// main module (every non-test .go file outside test/, hack/, testdata/, vendor/,
// nested modules and zz_generated*.go): flags registered on the flag/pflag
// package or a FlagSet; named durations (const/var, any scope, typed
// time.Duration or whose value uses a time unit or another named duration);
// functions over 100 lines; pool/ imports of controller-runtime client, manager,
// cache and client-go; and in-memory store candidates (struct fields and
// package-level vars of map, local map type, sync.Map or cache/lru type).
//
// Usage, from the repository root: go run ./hack/tools/housecount [-root dir]
package main

import (
	"cmp"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

type file struct {
	path, dir string
	f         *ast.File
	text      []byte
	imports   map[string]string // local name -> import path
}

type decl struct { // a const or var
	f     *file
	id    *ast.Ident
	value ast.Expr
}

type fn struct {
	lines int
	desc  string
}

var (
	fset      = token.NewFileSet()
	units     = []string{"Nanosecond", "Microsecond", "Millisecond", "Second", "Minute", "Hour", "Duration"}
	cacheType = []string{"Expiring", "LRUExpireCache", "Store", "Indexer", "ThreadSafeStore", "Cache"}
	clientPkg = []string{"sigs.k8s.io/controller-runtime/pkg/client", "sigs.k8s.io/controller-runtime/pkg/manager", "sigs.k8s.io/controller-runtime/pkg/cache", "k8s.io/client-go"}
	flagPkgs  = []string{"flag", "github.com/spf13/pflag"}
	// flag method -> {index of the name argument, number of arguments}; pflag's ...P forms take one more.
	flagMethods = map[string][2]int{"Var": {1, 3}, "Func": {0, 3}, "BoolFunc": {0, 3}, "TextVar": {1, 4}}
	out         = map[string][]string{} // report section -> lines
	module      string                  // the main module's path
	storeTypes  = map[string]bool{}     // "dir.Name" of local types defined as a map or cache
	known       = map[string]bool{}     // "dir.Name" of named durations
	decls, durs []decl                  // const/var not (yet) known to be durations; named durations
	fns         []fn
)

func main() {
	root := flag.String("root", ".", "root of the main module")
	flag.Parse()
	for _, t := range []string{"Bool", "String", "Int", "Int64", "Uint", "Uint64", "Float64", "Duration"} {
		flagMethods[t], flagMethods[t+"Var"] = [2]int{0, 3}, [2]int{1, 4}
	}
	files, err := load(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "housecount:", err)
		os.Exit(1)
	}
	for _, f := range files {
		ast.Inspect(f.f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok && storeKind(f, ts.Type) != "" {
				storeTypes[f.dir+"."+ts.Name.Name] = true
			}
			return true
		})
	}
	for _, f := range files {
		scan(f)
	}
	for changed := true; changed; { // durations by value, to a fixpoint: b = 2 * a counts once a does
		changed = false
		decls = slices.DeleteFunc(decls, func(d decl) bool {
			ok := usesDuration(d.f, d.value)
			if ok {
				foundDuration(d)
				changed = true
			}
			return ok
		})
	}
	sort.Slice(durs, func(i, j int) bool { return durs[i].id.Pos() < durs[j].id.Pos() })
	for _, d := range durs {
		add("durations", "%s\t%s", pos(d.id.Pos()), d.id.Name)
	}
	sort.SliceStable(fns, func(i, j int) bool { return fns[i].lines > fns[j].lines })
	for i, x := range fns {
		if x.lines > 100 {
			add("big", "%s", x.desc)
		}
		if i < 10 {
			add("top", "%s", x.desc)
		}
	}
	fmt.Printf("flags=%d durations=%d funcs>100=%d pool-client-imports=%d map-fields=%d pkg-maps=%d\n(%d product files under %s)\n",
		len(out["flags"]), len(out["durations"]), len(out["big"]), len(out["imports"]), len(out["fields"]), len(out["pkgmaps"]), len(files), *root)
	for _, s := range []string{
		"flags|flags (position, name, method)",
		"indirect|FlagSets passed to other functions (the flags they register are NOT counted)",
		"durations|named durations",
		"big|functions over 100 lines (lines, name, position)",
		"top|10 largest functions",
		"imports|pool/ imports of controller-runtime client/manager/cache and client-go",
		"fields|in-memory store candidates: struct fields (position, field, kind)",
		"pkgmaps|package-level caches: package-level vars of map/sync.Map/cache type",
	} {
		key, title, _ := strings.Cut(s, "|")
		fmt.Printf("\n== %s\n", title)
		for _, l := range out[key] {
			fmt.Println("  " + l)
		}
	}
}

// scan adds one file's flags, pool/ imports, functions, stores and declarations.
func scan(f *file) {
	fsIDs := flagSetIdents(f)
	for _, is := range f.f.Imports {
		p, _ := strconv.Unquote(is.Path.Value)
		if strings.HasPrefix(f.path, "pool/") && slices.ContainsFunc(clientPkg, func(c string) bool { return p == c || strings.HasPrefix(p, c+"/") }) {
			add("imports", "%s\t%s", pos(is.Pos()), p)
		}
	}
	ast.Inspect(f.f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			name := n.Name.Name
			if n.Recv != nil && len(n.Recv.List) > 0 {
				name = strings.SplitN(strings.TrimLeft(types.ExprString(n.Recv.List[0].Type), "*"), "[", 2)[0] + "." + name
			}
			lines := fset.Position(n.End()).Line - fset.Position(n.Pos()).Line + 1
			fns = append(fns, fn{lines, fmt.Sprintf("%4d  %s\t%s", lines, name, pos(n.Pos()))})
		case *ast.StructType:
			for _, fld := range n.Fields.List {
				names := fld.Names
				if len(names) == 0 {
					names = []*ast.Ident{{NamePos: fld.Pos(), Name: types.ExprString(fld.Type) + " (embedded)"}}
				}
				for _, id := range names {
					if k := storeKind(f, fld.Type); k != "" {
						add("fields", "%s\t%s\t%s", pos(id.Pos()), id.Name, k)
					}
				}
			}
		case *ast.GenDecl:
			for _, s := range n.Specs {
				vs, ok := s.(*ast.ValueSpec)
				for i := 0; ok && i < len(vs.Names); i++ {
					d := decl{f, vs.Names[i], nil}
					if len(vs.Values) == len(vs.Names) {
						d.value = vs.Values[i]
					}
					if vs.Type != nil && pkgSel(f, types.ExprString(vs.Type), "Duration", "time") {
						foundDuration(d)
					} else if d.id.Name != "_" && d.value != nil {
						decls = append(decls, d)
					}
					k := cmp.Or(storeKind(f, vs.Type), storeKind(f, d.value))
					if k != "" && n.Tok == token.VAR && slices.Contains(f.f.Decls, ast.Decl(n)) {
						add("pkgmaps", "%s\t%s\t%s", pos(d.id.Pos()), d.id.Name, k)
					}
				}
			}
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && isFlagSet(f, sel.X, fsIDs) {
				m := sel.Sel.Name
				spec, ok := flagMethods[m]
				if p, okP := flagMethods[strings.TrimSuffix(m, "P")]; !ok && okP && strings.HasSuffix(m, "P") {
					spec, ok = [2]int{p[0], p[1] + 1}, true
				}
				if ok && len(n.Args) == spec[1] {
					name := types.ExprString(n.Args[spec[0]])
					if s, err := strconv.Unquote(name); err == nil {
						name = s
					} else {
						name = "<" + name + ">" // not a literal: a constant or computed name
					}
					add("flags", "%s\t%s\t(%s)", pos(n.Pos()), name, m)
				}
				return true
			}
			for _, a := range n.Args {
				if id, ok := a.(*ast.Ident); ok && fsIDs[id.Name] {
					add("indirect", "%s\t%s", pos(n.Pos()), types.ExprString(n))
				}
			}
		}
		return true
	})
}

func add(section, format string, args ...any) {
	out[section] = append(out[section], fmt.Sprintf(format, args...))
}

func pos(p token.Pos) string { q := fset.Position(p); return fmt.Sprintf("%s:%d", q.Filename, q.Line) }

// foundDuration records a named duration, each name once per package.
func foundDuration(d decl) {
	if k := d.f.dir + "." + d.id.Name; !known[k] {
		durs, known[k] = append(durs, d), true
	}
}

// load reads the module path and parses the product files under root.
func load(root string) (files []*file, err error) {
	gomod, _ := os.ReadFile(filepath.Join(root, "go.mod"))
	if m := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindSubmatch(gomod); m != nil {
		module = string(m[1])
	}
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel, n := filepath.ToSlash(rel), e.Name()
		if e.IsDir() {
			_, modErr := os.Stat(filepath.Join(p, "go.mod"))
			if rel != "." && (rel == "test" || rel == "hack" || n == "testdata" || n == "vendor" || n[0] == '.' || n[0] == '_' || modErr == nil) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") || strings.HasPrefix(n, "zz_generated") {
			return nil
		}
		text, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		af, err := parser.ParseFile(fset, p, text, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		f := &file{path: rel, dir: filepath.ToSlash(filepath.Dir(rel)), f: af, text: text, imports: map[string]string{}}
		for _, is := range af.Imports {
			ip, _ := strconv.Unquote(is.Path.Value)
			name := ip[strings.LastIndex(ip, "/")+1:] // a guess when unnamed; wrong for e.g. golang-lru/v2
			if is.Name != nil {
				name = is.Name.Name
			}
			f.imports[name] = ip
		}
		files = append(files, f)
		return nil
	})
	return files, err
}

// pkgSel reports whether source text s is pkg.name, pkg imported from one of paths.
func pkgSel(f *file, s, name string, paths ...string) bool {
	pkg, sel, ok := strings.Cut(s, ".")
	return ok && sel == name && slices.Contains(paths, f.imports[pkg])
}

// usesDuration: e mentions a time unit, time.Duration or a known named duration,
// outside struct literals and closures.
func usesDuration(f *file, e ast.Expr) (found bool) {
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && f.imports[x.Name] != "" {
				ip := f.imports[x.Name]
				found = found || ip == "time" && slices.Contains(units, n.Sel.Name) || known[strings.TrimPrefix(ip, module+"/")+"."+n.Sel.Name]
			}
			return false
		case *ast.Ident:
			found = found || known[f.dir+"."+n.Name]
		case *ast.FuncLit, *ast.CompositeLit:
			return false
		}
		return !found
	})
	return found
}

// storeKind names the store kind of a type, or of a value (a literal, or make or
// new of one), from its source text; "" for none.
func storeKind(f *file, e ast.Expr) string {
	if c, ok := e.(*ast.CallExpr); ok && len(c.Args) > 0 && slices.Contains([]string{"make", "new"}, types.ExprString(c.Fun)) {
		e = c.Args[0]
	}
	if e == nil {
		return ""
	}
	s := strings.TrimLeft(types.ExprString(e), "*&")
	if strings.HasPrefix(s, "map[") {
		return "map"
	}
	s = s[:len(s)-len(strings.TrimLeft(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_."))] // drop [T], {…}, (…)
	if pkg, typ, ok := strings.Cut(s, "."); ok {
		ip := f.imports[pkg]
		if ip == "sync" && typ == "Map" || strings.Contains(ip, "lru") || strings.Contains(ip, "ristretto") ||
			strings.Contains(ip, "ttlcache") || strings.HasSuffix(ip, "/cache") && slices.Contains(cacheType, typ) {
			return ip + "." + typ
		}
	} else if storeTypes[f.dir+"."+s] {
		return "local store type " + s
	}
	return ""
}

// flagSetIdents collects the file's identifiers (variables, parameters, fields)
// declared as a FlagSet or assigned from NewFlagSet, from its text. Scopes are ignored.
func flagSetIdents(f *file) map[string]bool {
	var pkgs []string
	for name, ip := range f.imports {
		if slices.Contains(flagPkgs, ip) {
			pkgs = append(pkgs, regexp.QuoteMeta(name))
		}
	}
	ids := map[string]bool{}
	if len(pkgs) > 0 {
		p := "(?:" + strings.Join(pkgs, "|") + ")"
		for _, m := range regexp.MustCompile(`(\w+)\s*(?::?=\s*`+p+`\.NewFlagSet\(|\*?`+p+`\.FlagSet\b)`).FindAllSubmatch(f.text, -1) {
			ids[string(m[1])] = true
		}
	}
	return ids
}

// isFlagSet: the flag/pflag package or its CommandLine, a FlagSet identifier, or a FlagSet field (x.fs).
func isFlagSet(f *file, x ast.Expr, ids map[string]bool) bool {
	if s, ok := x.(*ast.SelectorExpr); ok && (ids[s.Sel.Name] || s.Sel.Name == "CommandLine") {
		return ids[s.Sel.Name] || isFlagSet(f, s.X, nil)
	}
	id, ok := x.(*ast.Ident)
	return ok && (ids[id.Name] || slices.Contains(flagPkgs, f.imports[id.Name]))
}
