package standalone

import (
	"encoding/base64"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

const (
	scimUserSchema  = "urn:ietf:params:scim:schemas:core:2.0:User"
	scimPatchSchema = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
	scimType        = "application/scim+json"
)

// scimClient is an identity provider's SCIM connection: Okta's sends the
// client's id and secret by HTTP Basic (as Medplum's Okta guide sets it
// up), Entra ID's a bearer token.
type scimClient struct {
	token, basic string
}

func (c scimClient) do(t *testing.T, method, path string, body any) *response {
	t.Helper()
	var b []byte
	if body != nil {
		if s, ok := body.(string); ok {
			b = []byte(s)
		} else {
			b = mustJSON(body)
		}
	}
	ct := ""
	if b != nil {
		ct = scimType
	}
	if c.basic != "" {
		return do(t, method, "scim/v2/"+path, "", ct, b, "Authorization", "Basic "+c.basic)
	}
	return do(t, method, "scim/v2/"+path, c.token, ct, b)
}

// expectSCIMError checks a refusal is SCIM's error (RFC 7644 §3.12), its
// status a string, with the scimType given ("" for none).
func expectSCIMError(t *testing.T, r *response, status int, scimTypeWant string) {
	t.Helper()
	expect(t, r, status)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, scimType) {
		t.Fatalf("error Content-Type %q: %s", ct, r.body)
	}
	m := r.json(t)
	schemas, _ := m["schemas"].([]any)
	if len(schemas) != 1 || schemas[0] != "urn:ietf:params:scim:api:messages:2.0:Error" {
		t.Fatalf("not a SCIM error: %s", r.body)
	}
	if m["status"] != strconv.Itoa(status) {
		t.Fatalf("status %v, want %q: %s", m["status"], strconv.Itoa(status), r.body)
	}
	if got, _ := m["scimType"].(string); got != scimTypeWant {
		t.Fatalf("scimType %q, want %q: %s", got, scimTypeWant, r.body)
	}
}

// scimList asks for the Users a filter selects.
func (c scimClient) list(t *testing.T, filter string) []map[string]any {
	t.Helper()
	r := c.do(t, "GET", "Users?filter="+url.QueryEscape(filter), nil)
	expect(t, r, 200)
	m := r.json(t)
	var out []map[string]any
	for _, u := range m["Resources"].([]any) {
		out = append(out, u.(map[string]any))
	}
	if int(m["totalResults"].(float64)) != len(out) {
		t.Fatalf("totalResults %v for %d resources", m["totalResults"], len(out))
	}
	return out
}

// provisionShape is what differs between the providers' scripts.
type provisionShape struct {
	name       string
	deactivate any // the PATCH body that sets active false
	reactivate any
	rename     func(c scimClient, t *testing.T, id string, user map[string]any) *response
}

// TestSCIMProvisioning runs the provisioning each provider sends over
// HTTP through the gateway: look up by userName, create, deactivate (the
// person's token is refused at once), reactivate (it works again), change
// the name, delete; then the refusals, each in SCIM's error envelope.
func TestSCIMProvisioning(t *testing.T) {
	pid, su := adminProject(t, "scim provisioning")
	// Addresses are the run's own: the stack, its users and its mail
	// outlive one run under -count.
	mail := func(local string) string { return local + "-" + pid[:8] + "@example.com" }
	oktaID, oktaSecret := adminClient(t, su, pid, "okta scim")
	entraID, entraSecret := adminClient(t, su, pid, "entra scim")
	okta := scimClient{basic: base64.StdEncoding.EncodeToString([]byte(oktaID + ":" + oktaSecret))}
	entra := scimClient{token: clientToken(t, entraID, entraSecret)}

	shapes := []struct {
		c     scimClient
		shape provisionShape
	}{
		{okta, provisionShape{
			name:       "okta",
			deactivate: map[string]any{"schemas": []string{scimPatchSchema}, "Operations": []any{map[string]any{"op": "replace", "value": map[string]any{"active": false}}}},
			reactivate: map[string]any{"schemas": []string{scimPatchSchema}, "Operations": []any{map[string]any{"op": "replace", "value": map[string]any{"active": true}}}},
			// Okta pushes a profile update as a PUT of the whole user.
			rename: func(c scimClient, t *testing.T, id string, user map[string]any) *response {
				user["name"] = map[string]any{"givenName": "Augusta", "familyName": "King"}
				return c.do(t, "PUT", "Users/"+id, user)
			},
		}},
		{entra, provisionShape{
			name:       "entra",
			deactivate: map[string]any{"schemas": []string{scimPatchSchema}, "Operations": []any{map[string]any{"op": "Replace", "path": "active", "value": "False"}}},
			reactivate: map[string]any{"schemas": []string{scimPatchSchema}, "Operations": []any{map[string]any{"op": "Replace", "path": "active", "value": "True"}}},
			rename: func(c scimClient, t *testing.T, id string, _ map[string]any) *response {
				return c.do(t, "PATCH", "Users/"+id, map[string]any{"schemas": []string{scimPatchSchema}, "Operations": []any{
					map[string]any{"op": "Replace", "path": "name.givenName", "value": "Augusta"},
					map[string]any{"op": "Replace", "path": "name.familyName", "value": "King"},
				}})
			},
		}},
	}
	for _, s := range shapes {
		t.Run(s.shape.name, func(t *testing.T) { provision(t, pid, mail("ada-"+s.shape.name), s.c, s.shape) })
	}

	t.Run("refusals", func(t *testing.T) {
		_, memberToken := project(t, "scim non-admin")
		expectSCIMError(t, scimClient{token: memberToken}.do(t, "GET", "Users", nil), 403, "")
		expectSCIMError(t, scimClient{}.do(t, "GET", "Users", nil), 401, "")
		expectSCIMError(t, scimClient{token: "not-a-token"}.do(t, "GET", "Users", nil), 401, "")

		// A user of another project is not found, whichever way it is named.
		otherPID, otherSU := adminProject(t, "scim elsewhere")
		oid, osecret := adminClient(t, otherSU, otherPID, "other scim")
		other := scimClient{token: clientToken(t, oid, osecret)}
		r := other.do(t, "POST", "Users", newSCIMUser(mail("elsewhere"), "Else", "Where", "ext-else"))
		expect(t, r, 201)
		foreign := r.json(t)["id"].(string)
		expectSCIMError(t, entra.do(t, "GET", "Users/"+foreign, nil), 404, "")
		expectSCIMError(t, entra.do(t, "PATCH", "Users/"+foreign, okta404Patch()), 404, "")
		expectSCIMError(t, entra.do(t, "DELETE", "Users/"+foreign, nil), 404, "")
		if got := entra.list(t, `userName eq "`+mail("elsewhere")+`"`); len(got) != 0 {
			t.Fatalf("another project's user listed: %v", got)
		}
		// Still there for its own project.
		expect(t, other.do(t, "GET", "Users/"+foreign, nil), 200)

		expectSCIMError(t, entra.do(t, "GET", "Users?filter="+url.QueryEscape(`userName equals "x"`), nil), 400, "invalidFilter")
		expectSCIMError(t, entra.do(t, "GET", "Users?filter="+url.QueryEscape(`password eq "x"`), nil), 400, "invalidFilter")
		expectSCIMError(t, entra.do(t, "GET", "Users?filter="+url.QueryEscape(strings.Repeat("a", 2000)), nil), 400, "invalidFilter")
		expectSCIMError(t, entra.do(t, "GET", "Users?count=many", nil), 400, "invalidValue")
		expectSCIMError(t, entra.do(t, "POST", "Users", "{"), 400, "invalidSyntax")
		expectSCIMError(t, entra.do(t, "POST", "Users", map[string]any{"schemas": []string{scimUserSchema}, "name": map[string]any{"givenName": "No"}}), 400, "invalidValue")
		expectSCIMError(t, do(t, "POST", "scim/v2/Users", entra.token, "text/plain", []byte("userName")), 415, "")

		r = entra.do(t, "POST", "Users", newSCIMUser(mail("twice"), "Tw", "Ice", "ext-twice"))
		expect(t, r, 201)
		id := r.json(t)["id"].(string)
		expectSCIMError(t, entra.do(t, "POST", "Users", newSCIMUser(strings.ToUpper(mail("twice")), "Tw", "Ice", "ext-twice-2")), 409, "uniqueness")
		expectSCIMError(t, entra.do(t, "PATCH", "Users/"+id, map[string]any{"Operations": []any{map[string]any{"op": "replace", "path": "active", "value": false}}}), 400, "invalidSyntax")
		expectSCIMError(t, entra.do(t, "PATCH", "Users/"+id, map[string]any{"schemas": []string{scimPatchSchema}, "Operations": []any{map[string]any{"op": "replace", "path": "userType", "value": "Patient"}}}), 400, "mutability")
	})

	t.Run("a member invited before SCIM is found by e-mail", func(t *testing.T) {
		invited := member(t, su, pid, "resourceType", "Practitioner", "firstName", "Old", "lastName", "Hand", "email", mail("old.hand"))
		got := entra.list(t, `userName eq "`+strings.ToUpper(mail("old.hand"))+`"`)
		if len(got) != 1 || got[0]["id"] != invited["id"] || got[0]["userName"] != mail("old.hand") {
			t.Fatalf("invited member by userName: %v", got)
		}
		// An externalId with FHIR search's separators is one value.
		r := entra.do(t, "POST", "Users", newSCIMUser(mail("comma"), "Com", "Ma", `a,b|c$d\e`))
		expect(t, r, 201)
		if got := entra.list(t, `externalId eq "a,b|c$d\\e"`); len(got) != 1 || got[0]["id"] != r.json(t)["id"] {
			t.Fatalf("by an externalId with separators: %v", got)
		}
	})

	t.Run("groups are access policies", func(t *testing.T) {
		r := do(t, "POST", "fhir/R4/AccessPolicy", entra.token, "application/fhir+json", mustJSON(map[string]any{
			"resourceType": "AccessPolicy", "name": "Nurses", "resource": []any{map[string]any{"resourceType": "Patient"}}}))
		expect(t, r, 201)
		gid := r.json(t)["id"].(string)
		r = entra.do(t, "POST", "Users", newSCIMUser(mail("nurse"), "Flo", "Nightingale", "ext-nurse"))
		expect(t, r, 201)
		uid := r.json(t)["id"].(string)

		r = entra.do(t, "GET", "Groups?filter="+url.QueryEscape(`displayName eq "nurses"`), nil)
		expect(t, r, 200)
		list := r.json(t)["Resources"].([]any)
		if len(list) != 1 || list[0].(map[string]any)["id"] != gid {
			t.Fatalf("groups by displayName: %s", r.body)
		}
		members := func(r *response) []any {
			t.Helper()
			expect(t, r, 200)
			m, _ := r.json(t)["members"].([]any)
			return m
		}
		policyOf := func() any {
			r := do(t, "GET", "fhir/R4/ProjectMembership/"+uid, su, "", nil)
			expect(t, r, 200)
			return r.json(t)["accessPolicy"]
		}
		add := map[string]any{"schemas": []string{scimPatchSchema}, "Operations": []any{
			map[string]any{"op": "Add", "path": "members", "value": []any{map[string]any{"value": uid}}}}}
		if got := members(entra.do(t, "PATCH", "Groups/"+gid, add)); len(got) != 1 || got[0].(map[string]any)["value"] != uid {
			t.Fatalf("members after add: %v", got)
		}
		if p, _ := policyOf().(map[string]any); p["reference"] != "AccessPolicy/"+gid {
			t.Fatalf("membership's policy after add: %v", p)
		}
		remove := map[string]any{"schemas": []string{scimPatchSchema}, "Operations": []any{
			map[string]any{"op": "Remove", "path": `members[value eq "` + uid + `"]`}}}
		if got := members(entra.do(t, "PATCH", "Groups/"+gid, remove)); len(got) != 0 {
			t.Fatalf("members after remove: %v", got)
		}
		if p := policyOf(); p != nil {
			t.Fatalf("membership's policy after remove: %v", p)
		}
		expectSCIMError(t, entra.do(t, "PATCH", "Groups/"+gid, map[string]any{"schemas": []string{scimPatchSchema}, "Operations": []any{
			map[string]any{"op": "replace", "value": map[string]any{"displayName": "Doctors"}}}}), 400, "mutability")
		expectSCIMError(t, entra.do(t, "GET", "Groups/"+uid, nil), 404, "")
		expectSCIMError(t, entra.do(t, "GET", "Groups?filter="+url.QueryEscape(`members pr`), nil), 400, "invalidFilter")
	})

	t.Run("discovery", func(t *testing.T) {
		for _, p := range []string{"ServiceProviderConfig", "ResourceTypes", "Schemas"} {
			r := entra.do(t, "GET", p, nil)
			expect(t, r, 200)
			if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, scimType) {
				t.Fatalf("%s: Content-Type %q", p, ct)
			}
		}
		expect(t, entra.do(t, "GET", "ResourceTypes/User", nil), 200)
		if r := entra.do(t, "GET", "Schemas/"+scimUserSchema, nil); r.status != 200 || r.json(t)["name"] != "User" {
			t.Fatalf("the User schema: %d %s", r.status, r.body)
		}
		expectSCIMError(t, entra.do(t, "GET", "Schemas/urn:example:none", nil), 404, "")
		if r := entra.do(t, "GET", "ServiceProviderConfig", nil).json(t); r["patch"].(map[string]any)["supported"] != true {
			t.Fatalf("ServiceProviderConfig: %v", r)
		}
	})
}

func okta404Patch() map[string]any {
	return map[string]any{"schemas": []string{scimPatchSchema}, "Operations": []any{map[string]any{"op": "replace", "value": map[string]any{"active": false}}}}
}

func newSCIMUser(email, given, family, externalID string) map[string]any {
	return map[string]any{
		"schemas": []string{scimUserSchema}, "userName": email, "externalId": externalID, "active": true,
		"name":   map[string]any{"givenName": given, "familyName": family},
		"emails": []any{map[string]any{"primary": true, "value": email, "type": "work"}},
	}
}

// provision is one provider's script.
func provision(t *testing.T, pid, email string, c scimClient, s provisionShape) {
	if got := c.list(t, `userName eq "`+email+`"`); len(got) != 0 {
		t.Fatalf("before create: %v", got)
	}
	r := c.do(t, "POST", "Users", newSCIMUser(email, "Ada", "Lovelace", "00u-"+s.name))
	expect(t, r, 201)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, scimType) {
		t.Fatalf("Content-Type %q", ct)
	}
	created := r.json(t)
	id := created["id"].(string)
	if created["active"] != true || created["userName"] != email || created["externalId"] != "00u-"+s.name ||
		!strings.HasSuffix(r.header.Get("Location"), "/scim/v2/Users/"+id) {
		t.Fatalf("created: %s (Location %q)", r.body, r.header.Get("Location"))
	}
	got := c.list(t, `userName eq "`+strings.ToUpper(email)+`"`)
	if len(got) != 1 || got[0]["id"] != id {
		t.Fatalf("filter by userName: %v", got)
	}
	if got := c.list(t, `externalId eq "00u-`+s.name+`"`); len(got) != 1 || got[0]["id"] != id {
		t.Fatalf("filter by externalId: %v", got)
	}

	// The person signs in (here with a password they set; at a hospital,
	// through its identity provider) and holds a token.
	expect(t, do(t, "POST", "auth/resetpassword", "", "application/json", mustJSON(map[string]any{"email": email, "projectId": pid})), 200)
	link := resetLinks(t, email, 1)[0]
	expect(t, do(t, "POST", "auth/setpassword", "", "application/json", mustJSON(map[string]any{"id": link[0], "secret": link[1], "password": "provisioned password"})), 200)
	token := signIn(t, email, "provisioned password", pid, "openid")["access_token"].(string)
	expect(t, do(t, "GET", "auth/me", token, "", nil), 200)

	r = c.do(t, "PATCH", "Users/"+id, s.deactivate)
	expect(t, r, 200)
	if r.json(t)["active"] != false {
		t.Fatalf("deactivated: %s", r.body)
	}
	expect(t, do(t, "GET", "auth/me", token, "", nil), 401)
	expect(t, do(t, "GET", "fhir/R4/Patient", token, "", nil), 401)
	if got := c.list(t, `userName eq "`+email+`" and active eq false`); len(got) != 1 {
		t.Fatalf("inactive user not listed: %v", got)
	}

	r = c.do(t, "PATCH", "Users/"+id, s.reactivate)
	expect(t, r, 200)
	if r.json(t)["active"] != true {
		t.Fatalf("reactivated: %s", r.body)
	}
	expect(t, do(t, "GET", "auth/me", token, "", nil), 200)

	r = s.rename(c, t, id, r.json(t))
	expect(t, r, 200)
	name := r.json(t)["name"].(map[string]any)
	if name["givenName"] != "Augusta" || name["familyName"] != "King" {
		t.Fatalf("renamed: %s", r.body)
	}
	me := do(t, "GET", "auth/me", token, "", nil)
	expect(t, me, 200)
	if n := me.json(t)["profile"].(map[string]any)["name"].([]any)[0].(map[string]any); n["family"] != "King" {
		t.Fatalf("profile after the rename: %v", n)
	}
	if got := c.list(t, `name.familyName sw "Ki" and userName co "`+s.name+`"`); len(got) != 1 || got[0]["id"] != id {
		t.Fatalf("filter by new name: %v", got)
	}

	expect(t, c.do(t, "DELETE", "Users/"+id, nil), 204)
	expectSCIMError(t, c.do(t, "GET", "Users/"+id, nil), 404, "")
	expect(t, do(t, "GET", "auth/me", token, "", nil), 401)
	if got := c.list(t, `userName eq "`+email+`"`); len(got) != 0 {
		t.Fatalf("after delete: %v", got)
	}
}
