package standalone

import (
	"strings"
	"testing"
)

// Fields of meta that only the server sets are dropped on every write
// path, a JSON Patch included.
func TestServerMetaOnPatch(t *testing.T) {
	_, tok := project(t, "meta by patch")
	r := do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", patient("Meta"))
	expect(t, r, 201)
	id := r.json(t)["id"].(string)
	r = do(t, "PATCH", "fhir/R4/Patient/"+id, tok, "application/json-patch+json", []byte(`[
		{"op":"add","path":"/meta/account","value":{"reference":"Organization/forged"}},
		{"op":"add","path":"/meta/compartment","value":[{"reference":"Patient/forged"}]},
		{"op":"add","path":"/meta/accounts","value":[{"reference":"Organization/forged"}]},
		{"op":"add","path":"/active","value":true}]`))
	expect(t, r, 200)
	for _, body := range []map[string]any{r.json(t), do(t, "GET", "fhir/R4/Patient/"+id, tok, "", nil).json(t)} {
		meta := body["meta"].(map[string]any)
		for _, k := range []string{"account", "accounts", "compartment"} {
			if _, ok := meta[k]; ok {
				t.Fatalf("meta.%s stored through a patch: %v", k, meta)
			}
		}
		if body["active"] != true {
			t.Fatalf("the rest of the patch was lost: %v", body)
		}
	}
}

// A search, sort or condition on a field the caller's policy hides would
// reveal it: refused with 400 naming the parameter.
func TestSearchOnHiddenFields(t *testing.T) {
	pid, su := adminProject(t, "hidden search")
	r := do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "no birth dates", "meta": map[string]any{"project": pid},
		"resource": []any{map[string]any{"resourceType": "Patient", "hiddenFields": []any{"birthDate", "identifier"}}}}))
	expect(t, r, 201)
	policy := "AccessPolicy/" + r.json(t)["id"].(string)
	r = do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{
		"name": "restricted", "accessPolicy": map[string]any{"reference": policy}}))
	expect(t, r, 201)
	tok := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	p := mustJSON(map[string]any{"resourceType": "Patient", "name": []any{map[string]any{"family": "Hidden"}},
		"birthDate": "1980-01-01", "identifier": []any{map[string]any{"system": "urn:x", "value": "secret-id"}}})
	expect(t, do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", p), 201)

	refused := []struct{ query, param string }{
		{"birthdate=lt1990-01-01", "birthdate"},
		{"birthdate:missing=false", "birthdate"},
		{"identifier=urn:x|secret-id", "identifier"},
		{"name=Hidden&_sort=birthdate", "_sort"},
		{"_sort=-birthdate", "_sort"},
	}
	for _, tc := range refused {
		r := do(t, "GET", "fhir/R4/Patient?"+tc.query, tok, "", nil)
		expectOutcome(t, r, 400, "hidden by your access policy", tc.param)
	}
	// A condition reveals as much as a search.
	r = do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", p, "If-None-Exist", "birthdate=1980-01-01")
	expectOutcome(t, r, 400, "hidden by your access policy", "birthdate")
	// Searching on what the caller may see still works, without the hidden fields.
	r = do(t, "GET", "fhir/R4/Patient?name=Hidden&_sort=name", tok, "", nil)
	expect(t, r, 200)
	if strings.Contains(string(r.body), "1980") || strings.Contains(string(r.body), "secret-id") || !strings.Contains(string(r.body), "Hidden") {
		t.Fatalf("search answer: %s", r.body)
	}
}
