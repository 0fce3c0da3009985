package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// service writes one service's source under a temporary root.
func service(t *testing.T, root, name, body string) {
	t.Helper()
	dir := filepath.Join(root, "services", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := "package " + name + "\n\nimport \"github.com/pinion-health/pinion/pkg/bus\"\n\n" + body
	if err := os.WriteFile(filepath.Join(dir, name+".go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The table holds each declared route with its service, handler, mode
// and traits (in one order, whatever the order written), more specific
// paths first; internal endpoints are no routes.
func TestCollect(t *testing.T) {
	root := t.TempDir()
	service(t, root, "alpha", `func (s *S) start() {
	bus.Serve(s.nc, "alpha", "1.0.0", []bus.Endpoint{
		bus.Handle("GET /x/:type", bus.Token, s.search),
		bus.Handle("GET /x/meta", bus.Public, s.meta),
		bus.Handle("POST /login", bus.Public|bus.SignInLimit, s.sub.Login),
		bus.Handle("PUT /x/:type", bus.WritesResource|bus.Token|bus.SignsURLs, s.write),
		bus.Handle("POST /token", (bus.NamesApplied | bus.Public)|bus.SignInLimit, s.token),
		bus.Handle("pinion.alpha.internal", bus.Internal, s.inside),
	}, nil)
}
`)
	routes, err := Collect(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range routes {
		got = append(got, strings.Join([]string{r.Method, r.Path, strings.Join(append([]string{r.Auth}, r.Traits...), "|"), r.Service, r.Handler}, " "))
	}
	want := []string{
		"POST /login Public|SignInLimit alpha sub.Login",
		"POST /token Public|SignInLimit|NamesApplied alpha token",
		"GET /x/meta Public alpha meta",
		"GET /x/:type Token alpha search",
		"PUT /x/:type Token|SignsURLs|WritesResource alpha write",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// What the table could not hold is refused, naming where it is written.
func TestCollectRefuses(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"twins", `func (s *S) start() {
	bus.Serve(s.nc, "alpha", "1.0.0", []bus.Endpoint{
		bus.Handle("GET /x/:id", bus.Token, s.a),
		bus.Handle("GET /x/:name", bus.Token, s.b),
	}, nil)
}
`, "answer the same paths"},
		{"no mode", `func (s *S) start() {
	bus.Serve(s.nc, "alpha", "1.0.0", []bus.Endpoint{bus.Handle("GET /x", bus.SignInLimit, s.a)}, nil)
}
`, "no mode"},
		{"an unknown trait", `func (s *S) start() {
	bus.Serve(s.nc, "alpha", "1.0.0", []bus.Endpoint{bus.Handle("GET /x", bus.Token|bus.Signed, s.a)}, nil)
}
`, "unknown mode bus.Signed"},
		{"a trait twice", `func (s *S) start() {
	bus.Serve(s.nc, "alpha", "1.0.0", []bus.Endpoint{bus.Handle("GET /x", bus.Token|bus.SignsURLs|bus.SignsURLs, s.a)}, nil)
}
`, "bus.SignsURLs twice"},
		{"a mode in a variable", `func (s *S) start() {
	bus.Serve(s.nc, "alpha", "1.0.0", []bus.Endpoint{bus.Handle("GET /x", mode, s.a)}, nil)
}
`, "a route's mode is"},
		{"a route in a variable", `func (s *S) start() {
	bus.Serve(s.nc, "alpha", "1.0.0", []bus.Endpoint{bus.Handle(route, bus.Token, s.a)}, nil)
}
`, "a route is a string literal"},
		{"lower-case method", `func (s *S) start() {
	bus.Serve(s.nc, "alpha", "1.0.0", []bus.Endpoint{bus.Handle("get /x", bus.Token, s.a)}, nil)
}
`, "METHOD /path"},
		{"a wildcard", `func (s *S) start() {
	bus.Serve(s.nc, "alpha", "1.0.0", []bus.Endpoint{bus.Handle("GET /x/*", bus.Token, s.a)}, nil)
}
`, "wildcard"},
		{"no service", `var e = bus.Handle("GET /x", bus.Token, nil)
`, "calls no bus.Serve"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			service(t, root, "alpha", c.body)
			_, err := Collect(root)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}
