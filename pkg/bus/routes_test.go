package bus

import (
	"strings"
	"testing"
)

// TestFHIRRoute resolves what bots and batches send through the one table,
// including the routes the earlier copy of it did not know.
func TestFHIRRoute(t *testing.T) {
	for _, c := range []struct {
		method, rel, route string
		params             map[string]string
	}{
		{"GET", "Patient/123", "GET /fhir/R4/:type/:id", map[string]string{"type": "Patient", "id": "123"}},
		{"get", "/Patient?name=x", "GET /fhir/R4/:type", map[string]string{"type": "Patient"}},
		{"POST", "Patient", "POST /fhir/R4/:type", map[string]string{"type": "Patient"}},
		{"PUT", "Patient?identifier=a|b", "PUT /fhir/R4/:type", map[string]string{"type": "Patient"}},
		{"PATCH", "Patient/1", "PATCH /fhir/R4/:type/:id", map[string]string{"type": "Patient", "id": "1"}},
		{"DELETE", "Patient/1/", "DELETE /fhir/R4/:type/:id", map[string]string{"type": "Patient", "id": "1"}},
		{"GET", "Patient/1/_history", "GET /fhir/R4/:type/:id/_history", map[string]string{"type": "Patient", "id": "1"}},
		{"GET", "Patient/1/_history/2", "GET /fhir/R4/:type/:id/_history/:vid", map[string]string{"type": "Patient", "id": "1", "vid": "2"}},
		{"POST", "Patient/_search", "POST /fhir/R4/:type/_search", map[string]string{"type": "Patient"}},
		{"POST", "Patient/$validate", "POST /fhir/R4/:type/$validate", map[string]string{"type": "Patient"}},
		{"POST", "", "POST /fhir/R4", map[string]string{}},
		{"POST", "Bot/$execute?identifier=a|b", "POST /fhir/R4/Bot/$execute", map[string]string{}},
		{"POST", "Bot/9/$execute", "POST /fhir/R4/Bot/:id/$execute", map[string]string{"id": "9"}},
		// The earlier copy resolved metadata as a search and knew none of these.
		{"GET", "metadata", "GET /fhir/R4/metadata", map[string]string{}},
		{"POST", "Bot/9/$deploy", "POST /fhir/R4/Bot/:id/$deploy", map[string]string{"id": "9"}},
		{"POST", "ClientApplication/7/$rotate-secret", "POST /fhir/R4/ClientApplication/:id/$rotate-secret", map[string]string{"id": "7"}},
		{"GET", "job/5/status", "GET /fhir/R4/job/:id/status", map[string]string{"id": "5"}},
		{"POST", "Project/$init", "POST /fhir/R4/Project/$init", map[string]string{}},
		{"POST", "$export?_type=Patient", "POST /fhir/R4/$export", map[string]string{}},
		{"GET", "Group/3/$export", "GET /fhir/R4/Group/:id/$export", map[string]string{"id": "3"}},
		{"GET", "bulkdata/export/4", "GET /fhir/R4/bulkdata/export/:id", map[string]string{"id": "4"}},
	} {
		r, params, _, _, ok := FHIRRoute(c.method, c.rel)
		if !ok || r.Pattern() != c.route || len(params) != len(c.params) {
			t.Errorf("%s %s: %s %v %v, want %s %v", c.method, c.rel, r.Pattern(), params, ok, c.route, c.params)
			continue
		}
		for k, v := range c.params {
			if params[k] != v {
				t.Errorf("%s %s: %s=%q, want %q", c.method, c.rel, k, params[k], v)
			}
		}
	}
	// Only FHIR routes: the rest of the HTTP surface is not reachable so.
	for _, rel := range []string{"../auth/me", "Patient/1/2/3/4/5", "Patient/1/_history/2/x"} {
		if r, _, _, _, ok := FHIRRoute("GET", rel); ok {
			t.Errorf("GET %s resolved to %s", rel, r.Pattern())
		}
	}
	if r, _, _, _, ok := FHIRRoute("TRACE", "Patient"); ok {
		t.Errorf("TRACE resolved to %s", r.Pattern())
	}
}

// TestRoutesAreDistinct: no route is shadowed by an earlier one, which the
// first-match rule would make unreachable.
func TestRoutesAreDistinct(t *testing.T) {
	for i, r := range Routes {
		// A concrete path for the pattern: each :name becomes a value.
		path := r.Path
		for _, seg := range strings.Split(r.Path, "/") {
			if strings.HasPrefix(seg, ":") {
				path = strings.Replace(path, seg, "x"+seg[1:], 1)
			}
		}
		got, _, ok := Match(r.Method, path)
		if !ok || got != Routes[i] {
			t.Errorf("%s %s is answered by %s %s", r.Method, r.Path, got.Method, got.Path)
		}
	}
}
