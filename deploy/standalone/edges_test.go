package standalone

import (
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
