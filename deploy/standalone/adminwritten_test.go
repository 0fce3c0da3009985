package standalone

import (
	"strings"
	"testing"
)

// A member without a policy reads ClientApplication, AccessPolicy and Bot
// but does not write them: not by PUT, POST, PATCH, DELETE, a conditional
// update, a batch entry or $deploy. Otherwise they would give an admin
// client a key of their own and sign in as it, loosen a policy, or change
// the code of a bot that runs as an admin. Admins, and members whose
// policy names the type, do.
func TestAdminWrittenTypes(t *testing.T) {
	pid, su := adminProject(t, "Admin-written")
	admin := projectAdmin(t, su, pid, "aw-admin@example.com")
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Pat", "lastName", "Plain",
		"email", "aw-plain@example.com", "password", "plain password")
	plain := signIn(t, "aw-plain@example.com", "plain password", pid, "openid")["access_token"].(string)

	r := do(t, "POST", "admin/projects/"+pid+"/client", admin, "application/json", mustJSON(map[string]any{"name": "admin's client"}))
	expect(t, r, 201)
	client := r.json(t)
	delete(client, "secret")
	clientID := client["id"].(string)
	r = do(t, "POST", "fhir/R4/AccessPolicy", admin, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "clients",
		"resource": []any{map[string]any{"resourceType": "ClientApplication"}, map[string]any{"resourceType": "Patient"}}}))
	expect(t, r, 201)
	policy := r.json(t)
	botID := newBot(t, admin, pid, "aw bot", "", "", "")
	bot := do(t, "GET", "fhir/R4/Bot/"+botID, plain, "", nil)
	expect(t, bot, 200) // reads are unchanged

	hijack := map[string]any{}
	for k, v := range client {
		hijack[k] = v
	}
	hijack["jwksUri"] = "https://attacker.example/jwks.json"
	const code = `exports.handler = async () => 'mine';`
	refusals := []struct {
		name, method, path, ctype string
		body                      []byte
		typ                       string
	}{
		{"PUT a client's jwksUri", "PUT", "fhir/R4/ClientApplication/" + clientID, "application/fhir+json", mustJSON(hijack), "ClientApplication"},
		{"create a client", "POST", "fhir/R4/ClientApplication", "application/fhir+json",
			mustJSON(map[string]any{"resourceType": "ClientApplication", "name": "mine"}), "ClientApplication"},
		{"patch a client", "PATCH", "fhir/R4/ClientApplication/" + clientID, "application/json-patch+json",
			[]byte(`[{"op":"add","path":"/jwksUri","value":"https://attacker.example/jwks.json"}]`), "ClientApplication"},
		{"delete a client", "DELETE", "fhir/R4/ClientApplication/" + clientID, "", nil, "ClientApplication"},
		{"conditional update of a client", "PUT", "fhir/R4/ClientApplication?name=" + "admin%27s%20client", "application/fhir+json",
			mustJSON(map[string]any{"resourceType": "ClientApplication", "name": "admin's client", "jwksUri": "https://attacker.example/jwks.json"}), "ClientApplication"},
		{"loosen a policy", "PUT", "fhir/R4/AccessPolicy/" + policy["id"].(string), "application/fhir+json",
			mustJSON(map[string]any{"resourceType": "AccessPolicy", "id": policy["id"], "name": "clients", "resource": []any{map[string]any{"resourceType": "*"}}}), "AccessPolicy"},
		{"update a bot", "PUT", "fhir/R4/Bot/" + botID, "application/fhir+json", bot.body, "Bot"},
		{"deploy a bot", "POST", "fhir/R4/Bot/" + botID + "/$deploy", "application/json", mustJSON(map[string]any{"code": code, "filename": "x.js"}), "Bot"},
		{"redeploy a bot", "POST", "fhir/R4/Bot/" + botID + "/$deploy", "application/json", []byte(`{}`), "Bot"},
	}
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			expectOutcome(t, do(t, c.method, c.path, plain, c.ctype, c.body), 403,
				"Only project administrators can change "+c.typ+" resources")
		})
	}
	t.Run("a batch entry", func(t *testing.T) {
		r := do(t, "POST", "fhir/R4", plain, "application/fhir+json", mustJSON(map[string]any{
			"resourceType": "Bundle", "type": "batch", "entry": []any{map[string]any{
				"request": map[string]any{"method": "PUT", "url": "ClientApplication/" + clientID}, "resource": hijack}}}))
		expect(t, r, 200)
		entry := r.json(t)["entry"].([]any)[0].(map[string]any)
		resp := entry["response"].(map[string]any)
		if !strings.HasPrefix(resp["status"].(string), "403") || !strings.Contains(mustString(resp["outcome"]), "Only project administrators can change ClientApplication resources") {
			t.Fatalf("batch entry: %s", r.body)
		}
	})
	r = do(t, "GET", "fhir/R4/ClientApplication/"+clientID, admin, "", nil)
	expect(t, r, 200)
	if _, ok := r.json(t)["jwksUri"]; ok {
		t.Fatalf("a refused write changed the client: %s", r.body)
	}

	// A member whose policy names ClientApplication writes clients.
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Cal", "lastName", "Clients",
		"email", "aw-clients@example.com", "password", "clients password",
		"membership", map[string]any{"accessPolicy": map[string]any{"reference": "AccessPolicy/" + policy["id"].(string)}})
	named := signIn(t, "aw-clients@example.com", "clients password", pid, "openid")["access_token"].(string)
	expect(t, do(t, "POST", "fhir/R4/ClientApplication", named, "application/fhir+json",
		mustJSON(map[string]any{"resourceType": "ClientApplication", "name": "theirs"})), 201)

	// The admin does all of it.
	expect(t, do(t, "PUT", "fhir/R4/ClientApplication/"+clientID, admin, "application/fhir+json", mustJSON(hijack)), 200)
	expect(t, do(t, "POST", "fhir/R4/Bot/"+botID+"/$deploy", admin, "application/json", mustJSON(map[string]any{"code": code, "filename": "x.js"})), 200)
	expect(t, do(t, "POST", "fhir/R4/Bot/"+botID+"/$deploy", admin, "application/json", []byte(`{}`)), 200)
}

func mustString(v any) string { return string(mustJSON(v)) }
