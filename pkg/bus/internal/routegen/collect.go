package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/pinion-health/pinion/pkg/bus/internal/pattern"
)

// Route is one declared route, as the generated table holds it.
type Route struct {
	Method, Path string
	Auth         string // Token, Public or Optional
	// Traits are the bus traits added to the mode, in traits' order.
	Traits           []string
	Service, Handler string
	// Where it is declared, relative to the root, for errors.
	File string
}

// Collect reads every services/<name> package under root (its non-test
// files) and returns the routes its bus.Handle calls declare, the service
// named by its bus.Serve call, in the table's order.
func Collect(root string) ([]Route, error) {
	dirs, err := filepath.Glob(filepath.Join(root, "services", "*"))
	if err != nil {
		return nil, err
	}
	var all []Route
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		rs, err := collectDir(root, dir)
		if err != nil {
			return nil, err
		}
		all = append(all, rs...)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("no bus.Handle routes under %s/services", root)
	}
	return Order(all)
}

// collectDir reads one service's package.
func collectDir(root, dir string) ([]Route, error) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var routes []Route
	service := ""
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, name)
		rel = filepath.ToSlash(rel)
		var ferr error
		ast.Inspect(f, func(n ast.Node) bool {
			if ferr != nil {
				return false
			}
			call, ok := n.(*ast.CallExpr)
			switch {
			case !ok:
			case isBus(call.Fun, "Serve") && len(call.Args) > 1:
				name, ok := call.Args[1].(*ast.BasicLit)
				if !ok || name.Kind != token.STRING {
					ferr = fmt.Errorf("%s: bus.Serve's name is not a string literal", fset.Position(call.Pos()))
					return false
				}
				s, _ := strconv.Unquote(name.Value)
				if service != "" && service != s {
					ferr = fmt.Errorf("%s: a second service, %q beside %q", fset.Position(call.Pos()), s, service)
					return false
				}
				service = s
			case isBus(call.Fun, "Handle"):
				r, ok, err := endpoint(fset, call)
				if err != nil {
					ferr = err
					return false
				}
				if ok {
					r.File = rel
					routes = append(routes, r)
				}
			}
			return true
		})
		if ferr != nil {
			return nil, ferr
		}
	}
	if len(routes) > 0 && service == "" {
		return nil, fmt.Errorf("%s declares routes but calls no bus.Serve(nc, \"<name>\", ...)", dir)
	}
	for i := range routes {
		routes[i].Service = service
	}
	return routes, nil
}

// traits are the names of the bus traits a route's mode may add (bus's
// SignInLimit and the constants after it), in the order the table writes
// them: routegen reads names, not values, so a new trait is added here too.
var traits = []string{"SignInLimit", "NamesApplied", "SignsURLs", "WritesResource"}

// endpoint reads one bus.Handle("METHOD /path", bus.Mode, handler); ok
// is false for an Internal endpoint, which is no route.
func endpoint(fset *token.FileSet, call *ast.CallExpr) (Route, bool, error) {
	if len(call.Args) != 3 {
		return Route{}, false, fmt.Errorf("%s: bus.Handle takes a route, a mode and a handler", fset.Position(call.Pos()))
	}
	args := call.Args
	var r Route
	var modes []string
	var walk func(x ast.Expr) bool
	walk = func(x ast.Expr) bool {
		switch x := x.(type) {
		case *ast.BinaryExpr:
			return x.Op == token.OR && walk(x.X) && walk(x.Y)
		case *ast.ParenExpr:
			return walk(x.X)
		case *ast.SelectorExpr:
			if isBus(x, x.Sel.Name) {
				modes = append(modes, x.Sel.Name)
				return true
			}
		}
		return false
	}
	if !walk(args[1]) {
		return Route{}, false, fmt.Errorf("%s: a route's mode is bus.Token, bus.Public or bus.Optional, with | bus.<trait> (%s)", fset.Position(args[1].Pos()), strings.Join(traits, ", "))
	}
	has := map[string]bool{}
	for _, m := range modes {
		switch {
		case m == "Internal":
			return Route{}, false, nil
		case slices.Contains(traits, m):
			if has[m] {
				return Route{}, false, fmt.Errorf("%s: bus.%s twice", fset.Position(args[1].Pos()), m)
			}
			has[m] = true
		case m == "Token", m == "Public", m == "Optional":
			if r.Auth != "" {
				return Route{}, false, fmt.Errorf("%s: two modes", fset.Position(args[1].Pos()))
			}
			r.Auth = m
		default:
			return Route{}, false, fmt.Errorf("%s: unknown mode bus.%s", fset.Position(args[1].Pos()), m)
		}
	}
	if r.Auth == "" {
		return Route{}, false, fmt.Errorf("%s: no mode (bus.Token, bus.Public or bus.Optional)", fset.Position(args[1].Pos()))
	}
	for _, t := range traits {
		if has[t] {
			r.Traits = append(r.Traits, t)
		}
	}
	pat, ok := args[0].(*ast.BasicLit)
	if !ok || pat.Kind != token.STRING {
		return Route{}, false, fmt.Errorf("%s: a route is a string literal, \"METHOD /path\"", fset.Position(args[0].Pos()))
	}
	route, _ := strconv.Unquote(pat.Value)
	var err error
	if r.Method, r.Path, err = pattern.Parse(route); err != nil {
		return Route{}, false, fmt.Errorf("%s: %w", fset.Position(pat.Pos()), err)
	}
	var h bytes.Buffer
	if err := format.Node(&h, token.NewFileSet(), args[2]); err != nil {
		return Route{}, false, err
	}
	// The handler without its receiver: s.invite is "invite".
	r.Handler = h.String()
	if sel, ok := args[2].(*ast.SelectorExpr); ok {
		if _, isIdent := sel.X.(*ast.Ident); isIdent {
			r.Handler = sel.Sel.Name
		} else if _, rest, ok := strings.Cut(r.Handler, "."); ok {
			r.Handler = rest
		}
	}
	return r, true, nil
}

// isBus reports whether x is bus.<name>.
func isBus(x ast.Expr, name string) bool {
	sel, ok := x.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "bus"
}

// Order sorts routes so that the first match is the most specific one:
// at the first segment where two patterns differ, a literal comes before
// a :name (two literals in byte order), then shorter paths, then methods.
// Two routes of one method whose patterns differ only in their
// parameters' names would answer the same paths: that is an error.
func Order(routes []Route) ([]Route, error) {
	sort.SliceStable(routes, func(i, j int) bool { return less(routes[i], routes[j]) })
	for i := 1; i < len(routes); i++ {
		a, b := routes[i-1], routes[i]
		if !less(a, b) && !less(b, a) {
			return nil, fmt.Errorf("%s %s (%s, %s) and %s %s (%s, %s) answer the same paths",
				a.Method, a.Path, a.Service, a.File, b.Method, b.Path, b.Service, b.File)
		}
	}
	return routes, nil
}

func less(a, b Route) bool {
	if c := pattern.Compare(a.Path, b.Path); c != 0 {
		return c < 0
	}
	return a.Method < b.Method
}

// Render writes the table as Go source.
func Render(routes []Route) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("// Code generated by go run ./internal/routegen; DO NOT EDIT.\n")
	b.WriteString("// Each route is declared, with its handler, by a bus.Handle call in services/<Service>.\n\n")
	b.WriteString("package bus\n\n")
	b.WriteString("// Routes is the whole HTTP surface (Method, Path, Subject, Mode with its\n")
	b.WriteString("// traits, Service, Handler), most specific path first; see routes.go.\n")
	b.WriteString("var Routes = []Route{\n")
	for _, r := range routes {
		mode := strings.Join(append([]string{r.Auth}, r.Traits...), " | ")
		fmt.Fprintf(&b, "\t{%q, %q, %q, %s, %q, %q},\n",
			r.Method, r.Path, pattern.Subject(r.Service, r.Method+" "+r.Path), mode, r.Service, r.Handler)
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}
