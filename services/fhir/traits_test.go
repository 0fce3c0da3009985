package fhirsvc

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/presign"
	"github.com/pinion-health/pinion/pkg/store"
)

// memSecrets keeps the storage URL key in memory.
type memSecrets map[string][]byte

func (m memSecrets) Secret(_ context.Context, key string) ([]byte, error) {
	if v, ok := m[key]; ok {
		return v, nil
	}
	return nil, store.ErrNotFound
}

func (m memSecrets) SwapSecret(_ context.Context, key string, _, v []byte) error {
	m[key] = v
	return nil
}

// TestSigningFollowsTraits: a route this service registers signs the
// attachment URLs of its answers exactly when bus.Routes gives it
// SignsURLs, and stores the Binary references for the URLs in its body
// exactly when it gives it WritesResource; and the routes it registers are
// the table's fhir routes. So neither a route whose trait was dropped (or
// never declared), nor a stale table, nor a handler registered without
// signing goes unnoticed.
func TestSigningFollowsTraits(t *testing.T) {
	ctx := context.Background()
	s := &Service{cfg: Config{BaseURL: base}, urls: presign.New(base, memSecrets{})}
	table := map[string]bus.Route{}
	for _, r := range bus.Routes {
		if r.Service == "fhir" {
			table[r.Pattern()] = r
		}
	}

	// What is registered (routes, for bus.Serve and a batch's entries) is
	// the declared endpoints, each wrapped by signing exactly when it has
	// a trait: a method value is itself, a wrapper is another function.
	declared, registered := s.endpoints(), s.routes()
	if len(declared) != len(registered) || len(registered) != len(table) {
		t.Fatalf("%d routes declared, %d registered, %d in bus.Routes", len(declared), len(registered), len(table))
	}
	for i, e := range registered {
		r, ok := table[e.Route]
		if !ok || declared[i].Route != e.Route {
			t.Errorf("%s is registered as %s, in bus.Routes: %v", declared[i].Route, e.Route, ok)
			continue
		}
		wrapped := reflect.ValueOf(e.Handler).Pointer() != reflect.ValueOf(declared[i].Handler).Pointer()
		if traits := r.Has(bus.SignsURLs) || r.Has(bus.WritesResource); wrapped != traits {
			t.Errorf("%s: registered through signing %v, with a trait %v", e.Route, wrapped, traits)
		}
	}

	// What signing does with each declared endpoint, its handler a stub
	// that keeps the body it is given and answers a Binary, whose url is
	// its own signed URL when answers are signed.
	bodies := map[string]string{}
	for i := range declared {
		route := declared[i].Route
		declared[i].Handler = func(_ context.Context, r *bus.Request) (*bus.Response, error) {
			bodies[route] = string(r.Body)
			return &bus.Response{Status: 200, Header: map[string]string{"Content-Type": "application/fhir+json"},
				Body: []byte(`{"resourceType":"Binary","id":"b1","meta":{"versionId":"1"},"contentType":"text/plain"}`)}, nil
		}
	}
	for _, e := range s.signing(declared) {
		r, ok := table[e.Route]
		if !ok {
			continue // reported above
		}
		written := `{"resourceType":"Patient","photo":[{"url":"` + base + `fhir/R4/Binary/b1"}]}`
		resp, err := e.Handler(ctx, request(r.Method, "application/fhir+json", written))
		if err != nil {
			t.Fatalf("%s: %v", e.Route, err)
		}
		signed := strings.Contains(string(resp.Body), base+"storage/b1/1?")
		unsigned := strings.Contains(bodies[e.Route], `"url":"Binary/b1"`)
		if signed != r.Has(bus.SignsURLs) {
			t.Errorf("%s: answer signed %v, SignsURLs %v", e.Route, signed, r.Has(bus.SignsURLs))
		}
		if unsigned != r.Has(bus.WritesResource) {
			t.Errorf("%s: body's URL stored as a reference %v, WritesResource %v (handler got %s)", e.Route, unsigned, r.Has(bus.WritesResource), bodies[e.Route])
		}
	}
}
