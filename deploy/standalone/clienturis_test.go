package standalone

import "testing"

// Redirect and launch URIs are checked on the /admin route and on FHIR
// writes alike: javascript:, data: and other schemes are refused.
func TestClientURIsChecked(t *testing.T) {
	pid, su := adminProject(t, "Client URIs")
	admin := projectAdmin(t, su, pid, "uris-admin@example.com")
	r := do(t, "POST", "admin/projects/"+pid+"/client", admin, "application/json", mustJSON(map[string]any{"name": "app",
		"redirectUris": []any{"https://app.example/cb", "com.example.app:/cb", "http://127.0.0.1:7777/cb"}}))
	expect(t, r, 201)
	client := r.json(t)
	delete(client, "secret")
	id := client["id"].(string)
	with := func(k string, v any) []byte {
		c := map[string]any{}
		for k, v := range client {
			c[k] = v
		}
		c[k] = v
		return mustJSON(c)
	}
	cases := []struct {
		name, method, path, ctype string
		body                      []byte
		text, expr                string
	}{
		{"admin route, javascript:", "POST", "admin/projects/" + pid + "/client", "application/json",
			mustJSON(map[string]any{"name": "x", "redirectUris": []any{"https://ok.example/cb", "javascript:alert(document.cookie)"}}),
			"Invalid redirect URI", "redirectUris[1]"},
		{"admin route, http elsewhere", "POST", "admin/projects/" + pid + "/client", "application/json",
			mustJSON(map[string]any{"name": "x", "redirectUri": "http://app.example/cb"}), "loopback", "redirectUri"},
		{"FHIR update, javascript:", "PUT", "fhir/R4/ClientApplication/" + id, "application/fhir+json",
			with("redirectUris", []any{"https://ok.example/cb", "javascript:alert(1)"}), "Invalid redirect URI", "redirectUris[1]"},
		{"FHIR create, data:", "POST", "fhir/R4/ClientApplication", "application/fhir+json",
			mustJSON(map[string]any{"resourceType": "ClientApplication", "name": "x", "redirectUri": "data:text/html,<script>alert(1)</script>"}),
			"Invalid redirect URI", "redirectUri"},
		{"FHIR patch, vbscript:", "PATCH", "fhir/R4/ClientApplication/" + id, "application/json-patch+json",
			[]byte(`[{"op":"add","path":"/redirectUris/0","value":"vbscript:msgbox(1)"}]`), "Invalid redirect URI", "redirectUris[0]"},
		{"FHIR update, launch URI", "PUT", "fhir/R4/ClientApplication/" + id, "application/fhir+json",
			with("launchUri", "file:///etc/passwd"), "Invalid launch URI", "launchUri"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expectOutcome(t, do(t, c.method, c.path, admin, c.ctype, c.body), 400, c.text, c.expr)
		})
	}
	expect(t, do(t, "PUT", "fhir/R4/ClientApplication/"+id, admin, "application/fhir+json",
		with("redirectUris", []any{"https://ok.example/cb", "com.example.app:/cb", "http://[::1]:7777/cb"})), 200)
}
