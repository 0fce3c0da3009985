package bus

import (
	"strings"
	"testing"
)

// TestFHIRRoute resolves what bots and batches send through the one table,
// including the routes the earlier copy of it did not know.
func TestFHIRRoute(t *testing.T) {
	for _, c := range []struct {
		method, rel, subject string
		params               map[string]string
	}{
		{"GET", "Patient/123", SubjRead, map[string]string{"type": "Patient", "id": "123"}},
		{"get", "/Patient?name=x", SubjSearch, map[string]string{"type": "Patient"}},
		{"POST", "Patient", SubjCreate, map[string]string{"type": "Patient"}},
		{"PUT", "Patient?identifier=a|b", SubjUpdate, map[string]string{"type": "Patient"}},
		{"PATCH", "Patient/1", SubjPatch, map[string]string{"type": "Patient", "id": "1"}},
		{"DELETE", "Patient/1/", SubjDelete, map[string]string{"type": "Patient", "id": "1"}},
		{"GET", "Patient/1/_history", SubjHistory, map[string]string{"type": "Patient", "id": "1"}},
		{"GET", "Patient/1/_history/2", SubjVRead, map[string]string{"type": "Patient", "id": "1", "vid": "2"}},
		{"POST", "Patient/_search", SubjSearch, map[string]string{"type": "Patient"}},
		{"POST", "Patient/$validate", SubjValidate, map[string]string{"type": "Patient"}},
		{"POST", "", SubjBatch, map[string]string{}},
		{"POST", "Bot/$execute?identifier=a|b", SubjExecute, map[string]string{}},
		{"POST", "Bot/9/$execute", SubjExecute, map[string]string{"id": "9"}},
		// The earlier copy resolved metadata as a search and knew none of these.
		{"GET", "metadata", SubjMetadata, map[string]string{}},
		{"POST", "Bot/9/$deploy", SubjDeploy, map[string]string{"id": "9"}},
		{"POST", "ClientApplication/7/$rotate-secret", SubjRotateOp, map[string]string{"id": "7"}},
		{"GET", "job/5/status", SubjJobStatus, map[string]string{"id": "5"}},
		{"POST", "Project/$init", SubjProjectInit, map[string]string{}},
		{"POST", "$export?_type=Patient", SubjExport, map[string]string{}},
		{"GET", "Group/3/$export", SubjExport, map[string]string{"id": "3"}},
		{"GET", "bulkdata/export/4", SubjExportStatus, map[string]string{"id": "4"}},
	} {
		subject, params, _, _, ok := FHIRRoute(c.method, c.rel)
		if !ok || subject != c.subject || len(params) != len(c.params) {
			t.Errorf("%s %s: %s %v %v, want %s %v", c.method, c.rel, subject, params, ok, c.subject, c.params)
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
		if s, _, _, _, ok := FHIRRoute("GET", rel); ok {
			t.Errorf("GET %s resolved to %s", rel, s)
		}
	}
	if s, _, _, _, ok := FHIRRoute("TRACE", "Patient"); ok {
		t.Errorf("TRACE resolved to %s", s)
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
