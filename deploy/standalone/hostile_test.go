package standalone

import (
	"strings"
	"testing"
)

// Hostile requests, each with the status it must get, and proof afterwards
// that none of them wrote anything or leaked another project's data.
func TestHostileRequests(t *testing.T) {
	pa, su := adminProject(t, "Hostile A")
	pb, _ := adminProject(t, "Hostile B")
	client := func(pid string) string {
		r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "c"}))
		expect(t, r, 201)
		return clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	}
	a, b := client(pa), client(pb)
	r := do(t, "POST", "fhir/R4/Patient", b, "application/fhir+json", patient("Victim", "Vera"))
	expect(t, r, 201)
	victim := r.json(t)
	vid := victim["id"].(string)
	vver := victim["meta"].(map[string]any)["versionId"].(string)
	r = do(t, "POST", "fhir/R4/Patient", a, "application/fhir+json", patient("Attacker"))
	expect(t, r, 201)
	own := r.json(t)["id"].(string)
	count := func(tok string) float64 {
		r := do(t, "GET", "fhir/R4/Patient?_summary=count", tok, "", nil)
		expect(t, r, 200)
		return r.json(t)["total"].(float64)
	}
	beforeA, beforeB := count(a), count(b)

	victimPut := strings.Replace(string(mustJSON(victim)), `"female"`, `"male"`, 1)
	cases := []struct {
		name, method, path, ct, body string
		hdr                          []string
		status                       int
	}{
		// Another project's ids in paths and bodies.
		{"read other project", "GET", "fhir/R4/Patient/" + vid, "", "", nil, 404},
		{"vread other project", "GET", "fhir/R4/Patient/" + vid + "/_history/" + vver, "", "", nil, 404},
		{"update other project", "PUT", "fhir/R4/Patient/" + vid, "application/fhir+json", victimPut, nil, 404},
		{"patch other project", "PATCH", "fhir/R4/Patient/" + vid, "application/json-patch+json", `[{"op":"replace","path":"/gender","value":"male"}]`, nil, 404},
		{"delete other project", "DELETE", "fhir/R4/Patient/" + vid, "", "", nil, 404},
		{"own id, other's body", "PUT", "fhir/R4/Patient/" + own, "application/fhir+json", victimPut, nil, 400},
		{"batch into other project", "POST", "fhir/R4", "application/fhir+json",
			`{"resourceType":"Bundle","type":"transaction","entry":[{"request":{"method":"DELETE","url":"Patient/` + vid + `"}}]}`, nil, 404},
		{"invite into other project", "POST", "admin/projects/" + pb + "/invite", "application/json",
			`{"resourceType":"Practitioner","firstName":"X","lastName":"Y","email":"x@example.com"}`, nil, 403},
		{"client in other project", "POST", "admin/projects/" + pb + "/client", "application/json", `{"name":"evil"}`, nil, 403},
		{"bot in other project", "POST", "admin/projects/" + pb + "/bot", "application/json", `{"name":"evil"}`, nil, 403},
		{"member of other project", "GET", "admin/projects/" + pb + "/members/" + vid, "", "", nil, 403},
		// Mass assignment.
		{"create a membership", "POST", "fhir/R4/ProjectMembership", "application/fhir+json",
			`{"resourceType":"ProjectMembership","project":{"reference":"Project/` + pa + `"},"user":{"reference":"User/x"},"profile":{"reference":"Patient/` + own + `"},"admin":true}`, nil, 403},
		{"create a project", "POST", "fhir/R4/Project", "application/fhir+json", `{"resourceType":"Project","name":"mine","superAdmin":true}`, nil, 403},
		{"admin/Project as a member", "POST", "admin/Project", "application/json", `{"resourceType":"Project","name":"mine","superAdmin":true}`, nil, 403},
		{"create a user", "POST", "fhir/R4/User", "application/fhir+json", `{"resourceType":"User","firstName":"a","lastName":"b","email":"root@example.com","passwordHash":"x"}`, nil, 403},
		{"update own project", "PUT", "fhir/R4/Project/" + pa, "application/fhir+json", `{"resourceType":"Project","id":"` + pa + `","name":"x","superAdmin":true}`, nil, 403},
		// Oversized, deeply nested and malformed bodies.
		{"deeply nested", "POST", "fhir/R4/Patient", "application/fhir+json", strings.Repeat(`{"extension":[`, 100) + strings.Repeat("]}", 100), nil, 400},
		{"oversized", "POST", "fhir/R4/Patient", "application/fhir+json", `{"resourceType":"Patient","id":"` + strings.Repeat("a", 70000) + `"}`, nil, 413},
		{"null bytes", "POST", "fhir/R4/Patient", "application/fhir+json", "{\"resourceType\":\"Patient\",\"gender\":\"fe\u0000male\"}", nil, 400},
		// Query injection: operators and patterns are values, never query syntax.
		{"operator in a parameter name", "GET", "fhir/R4/Patient?_id[$ne]=x", "", "", nil, 400},
		{"operator in a value", "GET", `fhir/R4/Patient?_id={"$ne":"x"}`, "", "", nil, 200},
		{"regex in a value", "GET", "fhir/R4/Patient?name=.*", "", "", nil, 200},
		{"huge count", "GET", "fhir/R4/Patient?_count=100000", "", "", nil, 400},
		{"negative offset", "GET", "fhir/R4/Patient?_offset=-1", "", "", nil, 400},
		{"sort by a secret", "GET", "fhir/R4/Patient?_sort=r", "", "", nil, 400},
		{"unknown type in path", "GET", "fhir/R4/..%2F..%2Fcredentials", "", "", nil, 400},
		// Header injection.
		{"huge request id", "GET", "fhir/R4/Patient?name=attacker", "", "", []string{"X-Request-Id", strings.Repeat("r", 500)}, 200},
		{"forged principal header", "GET", "fhir/R4/Patient/" + vid, "", "", []string{"Pinion-Principal", `{"project":"` + pb + `","superAdmin":true}`}, 404},
		{"forged on-behalf-of", "GET", "fhir/R4/Patient/" + vid, "", "", []string{"X-Medplum-On-Behalf-Of", "Patient/" + vid}, 404},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, tc.method, tc.path, a, tc.ct, []byte(tc.body), tc.hdr...)
			expect(t, r, tc.status)
			if r.status >= 400 {
				r.outcomeText(t) // every refusal is an OperationOutcome
			}
			if strings.Contains(string(r.body), "Victim") {
				t.Fatalf("leaked the other project's patient: %s", r.body)
			}
			if id := r.header.Get("X-Request-Id"); len(id) > 128 {
				t.Fatalf("echoed a %d-byte request id", len(id))
			}
		})
	}
	if a2, b2 := count(a), count(b); a2 != beforeA || b2 != beforeB {
		t.Fatalf("hostile requests wrote: A %v→%v, B %v→%v", beforeA, a2, beforeB, b2)
	}
	r = do(t, "GET", "fhir/R4/Patient/"+vid, b, "", nil)
	expect(t, r, 200)
	if r.json(t)["meta"].(map[string]any)["versionId"] != vver {
		t.Fatal("the other project's patient changed")
	}
}
