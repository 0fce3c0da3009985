package standalone

import (
	"strings"
	"testing"
)

// A project admin reads a client's secret, as Medplum's web app shows it on
// the client's page (issue 37, item 7); a member who is no admin, and
// anyone of another project, does not.
func TestClientSecretShownToAdmins(t *testing.T) {
	pid, su := adminProject(t, "Shown secrets")
	other, _ := adminProject(t, "Shown secrets elsewhere")
	admin := projectAdmin(t, su, pid, "shown-admin@example.com")
	otherAdmin := projectAdmin(t, su, other, "shown-other-admin@example.com")
	r := do(t, "POST", "admin/projects/"+pid+"/client", admin, "application/json", []byte(`{"name":"shown","description":"","redirectUri":""}`))
	expect(t, r, 201)
	id, secret := r.json(t)["id"].(string), r.json(t)["secret"].(string)
	r = do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", []byte(`{"name":"plain member"}`))
	expect(t, r, 201)
	plain := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))

	readSecret := func(token string) (int, any) {
		r := do(t, "GET", "fhir/R4/ClientApplication/"+id, token, "", nil)
		if r.status != 200 {
			return r.status, nil
		}
		return 200, r.json(t)["secret"]
	}
	searchSecret := func(token string) (int, any) {
		r := do(t, "GET", "fhir/R4/ClientApplication?_id="+id, token, "", nil)
		_, entries := bundleOf(t, r)
		if len(entries) != 1 {
			return len(entries), nil
		}
		return 1, entries[0]["secret"]
	}
	for _, c := range []struct {
		name, token     string
		status, entries int
		shown           bool
	}{
		{"project admin", admin, 200, 1, true},
		{"super admin", su, 200, 1, true},
		{"member who is no admin", plain, 200, 1, false},
		{"admin of another project", otherAdmin, 404, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, got := readSecret(c.token)
			if status != c.status || (got == secret) != c.shown || (!c.shown && got != nil) {
				t.Fatalf("read: %d, secret %v", status, got)
			}
			n, got := searchSecret(c.token)
			if n != c.entries || (got == secret) != c.shown || (!c.shown && got != nil) {
				t.Fatalf("search: %d entries, secret %v", n, got)
			}
		})
	}

	// An admin whose own policy hides the field does not get it either.
	r = do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "no client secrets", "meta": map[string]any{"project": pid},
		"resource": []any{map[string]any{"resourceType": "ClientApplication", "hiddenFields": []any{"secret"}}}}))
	expect(t, r, 201)
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Hal", "lastName", "Hidden", "email", "hidden-secret-admin@example.com",
		"password", "admin password", "admin", true, "accessPolicy", map[string]any{"reference": "AccessPolicy/" + r.json(t)["id"].(string)})
	hidden := signIn(t, "hidden-secret-admin@example.com", "admin password", pid, "openid")["access_token"].(string)
	if status, got := readSecret(hidden); status != 200 || got != nil {
		t.Fatalf("an admin whose policy hides the secret: %d, %v", status, got)
	}

	// The client's edit form sends the resource back, secret and all: the
	// secret it has is no change; another is refused.
	r = do(t, "GET", "fhir/R4/ClientApplication/"+id, admin, "", nil)
	client := r.json(t)
	client["description"] = "edited"
	r = do(t, "PUT", "fhir/R4/ClientApplication/"+id, admin, "application/fhir+json", mustJSON(client))
	expect(t, r, 200)
	client["secret"] = "chosen by hand"
	expectOutcome(t, do(t, "PUT", "fhir/R4/ClientApplication/"+id, admin, "application/fhir+json", mustJSON(client)), 400, "is set by the server", "secret")
	clientToken(t, id, secret)

	// After a rotation the admin reads the new secret.
	r = do(t, "POST", "admin/projects/"+pid+"/client/"+id+"/$rotate-secret", admin, "application/json", nil)
	expect(t, r, 200)
	rotated := r.json(t)["secret"].(string)
	if _, got := readSecret(admin); got != rotated {
		t.Fatalf("after rotation: %v, want the new secret", got)
	}
	// The stored resource and its history never hold it.
	r = do(t, "GET", "fhir/R4/ClientApplication/"+id+"/_history", admin, "", nil)
	expect(t, r, 200)
	if s := string(r.body); strings.Contains(s, secret) || strings.Contains(s, rotated) {
		t.Fatalf("history holds a secret: %s", s)
	}
}
