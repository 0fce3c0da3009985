package standalone

import (
	"strings"
	"testing"
)

// A bot's rights are read on every run: a change to its membership that
// the API has answered holds for the very next run (the bot service keeps
// membership entries between runs, exactly as fresh as the gateway's).
func TestBotMembershipChangeHoldsForTheNextRun(t *testing.T) {
	pid, su := adminProject(t, "bot membership changes")
	r := do(t, "POST", "fhir/R4/Patient", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "Patient", "meta": map[string]any{"project": pid}, "name": []any{map[string]any{"family": "Kept"}}}))
	expect(t, r, 201)
	patient := r.json(t)["id"].(string)
	reader := newBot(t, su, pid, "membership reader", "", readPatient, "reader.js")
	run := func() *response {
		return do(t, "POST", "fhir/R4/Bot/"+reader+"/$execute", su, "text/plain", []byte(patient))
	}
	for range 3 {
		r = run()
		expect(t, r, 200)
		if string(r.body) != "Kept" {
			t.Fatalf("before any change: %s", r.body)
		}
	}
	r = do(t, "GET", "fhir/R4/ProjectMembership?profile=Bot/"+reader, su, "", nil)
	expect(t, r, 200)
	entries, _ := r.json(t)["entry"].([]any)
	if len(entries) != 1 {
		t.Fatalf("the bot's memberships: %s", r.body)
	}
	mid := entries[0].(map[string]any)["resource"].(map[string]any)["id"].(string)

	// A policy that grants Observations only: the next run may not read
	// the Patient.
	r = do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "observations only", "meta": map[string]any{"project": pid},
		"resource": []any{map[string]any{"resourceType": "Observation"}}}))
	expect(t, r, 201)
	policy := r.json(t)["id"].(string)
	expect(t, do(t, "PATCH", "admin/projects/"+pid+"/members/"+mid, su, "application/json-patch+json",
		[]byte(`[{"op":"add","path":"/accessPolicy","value":{"reference":"AccessPolicy/`+policy+`"}}]`)), 200)
	r = run()
	expect(t, r, 200)
	if !strings.HasPrefix(string(r.body), "refused") {
		t.Fatalf("the run after the policy was set read the Patient: %s", r.body)
	}

	// Deactivated: the next run is refused outright.
	expect(t, do(t, "PATCH", "admin/projects/"+pid+"/members/"+mid, su, "application/json-patch+json",
		[]byte(`[{"op":"add","path":"/active","value":false}]`)), 200)
	expect(t, run(), 403)
}
