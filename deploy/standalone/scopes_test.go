package standalone

import (
	"net/url"
	"strings"
	"testing"
)

// TestSMARTScopesOverHTTP: a token does what its SMART scopes say, within
// its membership's policy (issue 28 item 3). The member and the client
// have no policy of their own, so without scopes they could do anything
// in the project.
func TestSMARTScopesOverHTTP(t *testing.T) {
	pid, su := adminProject(t, "Scopes")
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Sam", "lastName", "Scoped",
		"email", "sam.scoped@example.com", "password", "scoped password")
	in := map[string]any{"project": pid}
	r := do(t, "POST", "fhir/R4/Patient", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "Patient", "meta": in, "name": []any{map[string]any{"family": "Scoped"}}}))
	expect(t, r, 201)
	patient := r.json(t)["id"].(string)
	r = do(t, "POST", "fhir/R4/Observation", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "Observation", "meta": in, "status": "final", "code": map[string]any{"text": "pulse"},
		"subject": map[string]any{"reference": "Patient/" + patient}}))
	expect(t, r, 201)
	obs := r.json(t)["id"].(string)
	newPatient := mustJSON(map[string]any{"resourceType": "Patient", "name": []any{map[string]any{"family": "New"}}})

	refused := func(t *testing.T, r *response, text string) {
		t.Helper()
		expect(t, r, 403)
		if got := r.outcomeText(t); got != text {
			t.Fatalf("403 says %q, want %q", got, text)
		}
	}

	t.Run("patient/*.read reads but does not create", func(t *testing.T) {
		tok := signIn(t, "sam.scoped@example.com", "scoped password", pid, "openid patient/*.read")["access_token"].(string)
		refused(t, do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", newPatient),
			"Insufficient scope: Patient create needs patient/Patient.c or patient/Patient.write")
		expect(t, do(t, "GET", "fhir/R4/Patient/"+patient, tok, "", nil), 200)
		expect(t, do(t, "GET", "fhir/R4/Patient?_id="+patient, tok, "", nil), 200)
	})

	t.Run("user/Observation.rs reads Observations only", func(t *testing.T) {
		tok := signIn(t, "sam.scoped@example.com", "scoped password", pid, "openid user/Observation.rs")["access_token"].(string)
		expect(t, do(t, "GET", "fhir/R4/Observation/"+obs, tok, "", nil), 200)
		r := do(t, "GET", "fhir/R4/Observation?subject=Patient/"+patient, tok, "", nil)
		expect(t, r, 200)
		if entries, _ := r.json(t)["entry"].([]any); len(entries) != 1 {
			t.Fatalf("search found %d Observations, want 1: %s", len(entries), r.body)
		}
		refused(t, do(t, "GET", "fhir/R4/Patient/"+patient, tok, "", nil),
			"Insufficient scope: Patient read needs user/Patient.r or user/Patient.read")
		refused(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil),
			"Insufficient scope: Patient search needs user/Patient.s or user/Patient.read")
		refused(t, do(t, "POST", "fhir/R4/Observation", tok, "application/fhir+json", mustJSON(map[string]any{
			"resourceType": "Observation", "status": "final", "code": map[string]any{"text": "x"}})),
			"Insufficient scope: Observation create needs user/Observation.c or user/Observation.write")
	})

	t.Run("client credentials with system/Patient.read", func(t *testing.T) {
		r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "scoped client"}))
		expect(t, r, 201)
		c := r.json(t)
		id, secret := c["id"].(string), c["secret"].(string)
		form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret},
			"scope": {"system/Patient.read"}}
		r = do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
		expect(t, r, 200)
		tok := r.json(t)["access_token"].(string)
		refused(t, do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", newPatient),
			"Insufficient scope: Patient create needs system/Patient.c or system/Patient.write")
		expect(t, do(t, "GET", "fhir/R4/Patient/"+patient, tok, "", nil), 200)
		r = do(t, "GET", "fhir/R4/Observation/"+obs, tok, "", nil)
		if r.status != 403 || !strings.HasPrefix(r.outcomeText(t), "Insufficient scope") {
			t.Fatalf("Observation read under system/Patient.read: %d %s", r.status, r.body)
		}
		// The same client's token without scopes keeps its full access: the
		// refusals above are the scope's, and one token's scope is not
		// another's, though they share the client's login.
		full := clientToken(t, id, secret)
		expect(t, do(t, "POST", "fhir/R4/Patient", full, "application/fhir+json", newPatient), 201)
		expect(t, do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", newPatient), 403)
	})
}
