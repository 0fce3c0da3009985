package standalone

import (
	"testing"
)

// The admin pages of Medplum's web app send every field of their forms,
// blank ones as "" (issue 37, item 7): blank is absent, not refused.
func TestAdminFormsBlankFields(t *testing.T) {
	pid, su := adminProject(t, "Admin forms")
	admin := projectAdmin(t, su, pid, "forms-admin@example.com")

	// CreateClientPage's body, description and redirect URI left blank.
	r := do(t, "POST", "admin/projects/"+pid+"/client", admin, "application/json",
		[]byte(`{"name":"web client","description":"","redirectUri":""}`))
	expect(t, r, 201)
	client := r.json(t)
	for _, f := range []string{"description", "redirectUri"} {
		if _, ok := client[f]; ok {
			t.Errorf("blank %s stored: %s", f, r.body)
		}
	}
	if client["secret"] == nil || tokenStatus(t, client["id"].(string), client["secret"].(string)) != 200 {
		t.Fatalf("client without a working secret: %s", r.body)
	}
	r = do(t, "GET", "fhir/R4/ClientApplication/"+client["id"].(string), admin, "", nil)
	expect(t, r, 200)
	if _, ok := r.json(t)["redirectUri"]; ok {
		t.Errorf("blank redirectUri read back: %s", r.body)
	}
	// A redirect URI that is there is still checked.
	expectOutcome(t, do(t, "POST", "admin/projects/"+pid+"/client", admin, "application/json",
		[]byte(`{"name":"bad client","redirectUri":"ftp://example.com/cb"}`)), 400, "Invalid redirect URI", "redirectUri")

	// The same through the FHIR API (the resource forms), for the types
	// whose content is checked before it is written.
	for _, c := range []struct{ typ, body, blank string }{
		{"ClientApplication", `{"resourceType":"ClientApplication","name":"form client","redirectUri":"","launchUri":"","description":""}`, "redirectUri"},
		{"AccessPolicy", `{"resourceType":"AccessPolicy","name":"form policy","resource":[{"resourceType":"Patient","criteria":""}]}`, ""},
		{"Bot", `{"resourceType":"Bot","name":"form bot","description":""}`, "description"},
	} {
		t.Run(c.typ, func(t *testing.T) {
			r := do(t, "POST", "fhir/R4/"+c.typ, admin, "application/fhir+json", []byte(c.body))
			expect(t, r, 201)
			if _, ok := r.json(t)[c.blank]; c.blank != "" && ok {
				t.Errorf("blank %s stored: %s", c.blank, r.body)
			}
		})
	}

	// EditMembershipPage posts the whole membership back; a blank field in
	// it is no change.
	r = do(t, "GET", "fhir/R4/ProjectMembership?profile=ClientApplication/"+client["id"].(string), admin, "", nil)
	expect(t, r, 200)
	_, entries := bundleOf(t, r)
	if len(entries) != 1 {
		t.Fatalf("client's membership: %s", r.body)
	}
	m := entries[0]
	m["externalId"] = ""
	m["admin"] = false
	r = do(t, "POST", "admin/projects/"+pid+"/members/"+m["id"].(string), admin, "application/json", mustJSON(m))
	expect(t, r, 200)
	if _, ok := r.json(t)["externalId"]; ok {
		t.Errorf("blank externalId stored: %s", r.body)
	}
}
