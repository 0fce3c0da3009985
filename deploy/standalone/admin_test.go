package standalone

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// projectAdmin invites an admin into a project and signs them in.
func projectAdmin(t *testing.T, su, pid, email string) string {
	t.Helper()
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Ada", "lastName", "Admin",
		"email", email, "password", "admin password", "admin", true)
	return signIn(t, email, "admin password", pid, "openid")["access_token"].(string)
}

// foreignPolicy makes an AccessPolicy in another project, as the super admin.
func foreignPolicy(t *testing.T, su, project string) string {
	t.Helper()
	r := do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "elsewhere", "meta": map[string]any{"project": project},
		"resource": []any{map[string]any{"resourceType": "Patient"}}}))
	expect(t, r, 201)
	// A super admin places a resource in the project meta.project names (as in Medplum).
	if got := r.json(t)["meta"].(map[string]any)["project"]; got != project {
		t.Fatalf("super admin's meta.project: landed in %v, want %s", got, project)
	}
	return "AccessPolicy/" + r.json(t)["id"].(string)
}

// count is how many live resources of a type a project holds.
func count(t *testing.T, su, typ, pid string) int {
	t.Helper()
	r := do(t, "GET", "fhir/R4/"+typ+"?_project="+pid+"&_total=accurate&_count=0", su, "", nil)
	expect(t, r, 200)
	return int(r.json(t)["total"].(float64))
}

// tokenStatus is the status of a client-credentials token request.
func tokenStatus(t *testing.T, id, secret string) int {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}
	return do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode())).status
}

// expectOutcome checks a status and the OperationOutcome's text and, when
// given, the field it names.
func expectOutcome(t *testing.T, r *response, status int, text string, expr ...string) {
	t.Helper()
	expect(t, r, status)
	if got := r.outcomeText(t); !strings.Contains(got, text) {
		t.Fatalf("outcome %q, want %q", got, text)
	}
	if len(expr) > 0 && !strings.Contains(string(r.body), `"expression":["`+expr[0]+`"]`) {
		t.Fatalf("outcome does not name %s: %s", expr[0], r.body)
	}
}

func TestClientApplications(t *testing.T) {
	pid, su := adminProject(t, "Clients")
	other, _ := adminProject(t, "Clients elsewhere")
	admin := projectAdmin(t, su, pid, "clients-admin@example.com")
	otherAdmin := projectAdmin(t, su, other, "clients-other-admin@example.com")
	_, plain := project(t, "Clients plain member")
	foreign := foreignPolicy(t, su, other)
	expectOutcome(t, do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json",
		[]byte(`{"resourceType":"AccessPolicy","name":"nowhere","meta":{"project":"00000000-0000-4000-8000-000000000000"}}`)), 400, "does not exist", "meta.project")
	r := do(t, "POST", "fhir/R4/AccessPolicy", admin, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "read patients",
		"resource": []any{map[string]any{"resourceType": "Patient", "readonly": true}}}))
	expect(t, r, 201)
	readPatients := "AccessPolicy/" + r.json(t)["id"].(string)

	// Bad requests: each a clear 400 (or 415/403/404), and no client written.
	before := count(t, su, "ClientApplication", pid)
	bad := []struct {
		name, token, project, ctype, body string
		status                            int
		text, expr                        string
	}{
		{"no name", admin, pid, "application/json", `{"description":"x"}`, 400, "Client name is required", "name"},
		{"blank name", admin, pid, "application/json", `{"name":"  "}`, 400, "Client name is required", "name"},
		{"chosen secret", admin, pid, "application/json", `{"name":"x","secret":"mine"}`, 400, "is set by the server", "secret"},
		{"chosen retiring secret", admin, pid, "application/json", `{"name":"x","retiringSecret":"mine"}`, 400, "is set by the server", "retiringSecret"},
		{"chosen id", admin, pid, "application/json", `{"name":"x","id":"my-id"}`, 400, "is set by the server", "id"},
		{"chosen meta", admin, pid, "application/json", `{"name":"x","meta":{"project":"` + other + `"}}`, 400, "is set by the server", "meta"},
		{"other type", admin, pid, "application/json", `{"name":"x","resourceType":"Bot"}`, 400, "Incorrect resource type", "resourceType"},
		{"relative redirect", admin, pid, "application/json", `{"name":"x","redirectUri":"/callback"}`, 400, "Invalid redirect URI", "redirectUri"},
		{"redirect fragment", admin, pid, "application/json", `{"name":"x","redirectUri":"https://app.example/cb#x"}`, 400, "Invalid redirect URI", "redirectUri"},
		{"bad redirect list", admin, pid, "application/json", `{"name":"x","redirectUris":["https://ok.example/cb","nope"]}`, 400, "Invalid redirect URI", "redirectUris[1]"},
		{"unknown field", admin, pid, "application/json", `{"name":"x","colour":"blue"}`, 400, "", ""},
		{"wrong field type", admin, pid, "application/json", `{"name":"x","pkceOptional":"yes"}`, 400, "", ""},
		{"policy of another project", admin, pid, "application/json", `{"name":"x","accessPolicy":{"reference":"` + foreign + `"}}`, 400, "does not belong to this project", "accessPolicy"},
		{"policy not a reference", admin, pid, "application/json", `{"name":"x","accessPolicy":"` + readPatients + `"}`, 400, "Invalid access policy reference", "accessPolicy"},
		{"missing policy", admin, pid, "application/json", `{"name":"x","accessPolicy":{"reference":"AccessPolicy/00000000-0000-4000-8000-000000000000"}}`, 400, "does not exist", "accessPolicy"},
		{"malformed JSON", admin, pid, "application/json", `{"name":`, 400, "Content could not be parsed", ""},
		{"array body", admin, pid, "application/json", `[{"name":"x"}]`, 400, "Content could not be parsed", ""},
		{"text body", admin, pid, "text/plain", `name=x`, 415, "", ""},
		{"plain member", plain, pid, "application/json", `{"name":"x"}`, 403, "Only project administrators can change ClientApplication resources", ""},
		{"admin of another project", otherAdmin, pid, "application/json", `{"name":"x"}`, 403, "Forbidden", ""},
		{"no token", "", pid, "application/json", `{"name":"x"}`, 401, "", ""},
		{"unknown project", su, "00000000-0000-4000-8000-000000000000", "application/json", `{"name":"x"}`, 404, "", ""},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, "POST", "admin/projects/"+c.project+"/client", c.token, c.ctype, []byte(c.body))
			if c.text == "" {
				expect(t, r, c.status)
				if r.json(t)["resourceType"] != "OperationOutcome" {
					t.Fatalf("not an OperationOutcome: %s", r.body)
				}
				return
			}
			if c.expr == "" {
				expectOutcome(t, r, c.status, c.text)
			} else {
				expectOutcome(t, r, c.status, c.text, c.expr)
			}
		})
	}
	if n := count(t, su, "ClientApplication", pid); n != before {
		t.Fatalf("refused requests wrote clients: %d, was %d", n, before)
	}

	// A client with ClientApplication fields and a policy, made by a project admin.
	r = do(t, "POST", "admin/projects/"+pid+"/client", admin, "application/json", mustJSON(map[string]any{
		"name": "reader", "description": "reads patients", "redirectUri": "https://app.example/cb",
		"redirectUris": []any{"com.example.app:/cb"}, "pkceOptional": true, "defaultScope": []any{"openid"},
		"accessPolicy": map[string]any{"reference": readPatients},
	}))
	expect(t, r, 201)
	c := r.json(t)
	id, secret := c["id"].(string), c["secret"].(string)
	if len(secret) != 64 || c["description"] != "reads patients" || c["pkceOptional"] != true || c["accessPolicy"] != nil {
		t.Fatalf("client: %s", r.body)
	}
	if !strings.HasPrefix(r.header.Get("Content-Type"), "application/fhir+json") {
		t.Errorf("content type %q", r.header.Get("Content-Type"))
	}
	// The project's admins read the secret again, as in Medplum (issue 37;
	// who else does not: TestClientSecretShownToAdmins).
	r = do(t, "GET", "fhir/R4/ClientApplication/"+id, admin, "", nil)
	expect(t, r, 200)
	if r.json(t)["secret"] != secret {
		t.Fatalf("an admin's read does not show the secret: %s", r.body)
	}
	// It is a member under profile-type=ClientApplication, with its policy.
	r = do(t, "GET", "fhir/R4/ProjectMembership?profile-type=ClientApplication&profile=ClientApplication/"+id, admin, "", nil)
	expect(t, r, 200)
	if _, entries := bundleOf(t, r); len(entries) != 1 || !strings.Contains(string(r.body), readPatients) {
		t.Fatalf("membership: %s", r.body)
	}
	// Its token works at once, under its policy.
	tok := clientToken(t, id, secret)
	r = do(t, "GET", "auth/me", tok, "", nil)
	expect(t, r, 200)
	if !strings.Contains(string(r.body), "ClientApplication/"+id) {
		t.Fatalf("me: %s", r.body)
	}
	expect(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil), 200)
	expect(t, do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", patient("Nope")), 403)

	// Secrets are not written through /fhir, by anyone.
	cur := do(t, "GET", "fhir/R4/ClientApplication/"+id, su, "", nil).json(t)
	cur["secret"] = "chosen"
	expectOutcome(t, do(t, "PUT", "fhir/R4/ClientApplication/"+id, su, "application/fhir+json", mustJSON(cur)), 400, "use $rotate-secret", "secret")
	expectOutcome(t, do(t, "PATCH", "fhir/R4/ClientApplication/"+id, admin, "application/json-patch+json",
		[]byte(`[{"op":"add","path":"/retiringSecret","value":"chosen"}]`)), 400, "use $rotate-secret", "retiringSecret")
	expectOutcome(t, do(t, "POST", "fhir/R4/ClientApplication", admin, "application/fhir+json",
		[]byte(`{"resourceType":"ClientApplication","name":"y","secret":"chosen"}`)), 400, "use $rotate-secret", "secret")
	expect(t, do(t, "POST", "fhir/R4", su, "application/fhir+json", []byte(`{"resourceType":"Bundle","type":"transaction","entry":[
		{"request":{"method":"POST","url":"ClientApplication"},"resource":{"resourceType":"ClientApplication","name":"z","secret":"chosen"}}]}`)), 400)
	if tokenStatus(t, id, "chosen") == 200 {
		t.Fatal("a secret written through /fhir works")
	}

	// Removing its membership ends the client: its token and new tokens.
	r = do(t, "GET", "fhir/R4/ProjectMembership?profile=ClientApplication/"+id, admin, "", nil)
	_, entries := bundleOf(t, r)
	mid := entries[0]["id"].(string)
	expect(t, do(t, "DELETE", "admin/projects/"+pid+"/members/"+mid, admin, "", nil), 200)
	expect(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil), 401)
	if s := tokenStatus(t, id, secret); s != 401 {
		t.Fatalf("token for a removed client: %d", s)
	}
}

func TestRotateClientSecret(t *testing.T) {
	pid, su := adminProject(t, "Rotation")
	other, _ := adminProject(t, "Rotation elsewhere")
	admin := projectAdmin(t, su, pid, "rotation-admin@example.com")
	otherAdmin := projectAdmin(t, su, other, "rotation-other-admin@example.com")
	_, plain := project(t, "Rotation plain member")
	r := do(t, "POST", "admin/projects/"+pid+"/client", admin, "application/json", []byte(`{"name":"rotating"}`))
	expect(t, r, 201)
	id, first := r.json(t)["id"].(string), r.json(t)["secret"].(string)

	// The admin route: a new secret without the current one; the old one
	// retires. A second rotation ends the first secret at once.
	r = do(t, "POST", "admin/projects/"+pid+"/client/"+id+"/$rotate-secret", admin, "application/json", nil)
	expect(t, r, 200)
	second := r.json(t)["secret"].(string)
	if len(second) != 64 || second == first {
		t.Fatalf("rotation: %s", r.body)
	}
	clientToken(t, id, second)
	clientToken(t, id, first) // retiring, within its grace period
	expect(t, do(t, "POST", "admin/projects/"+other+"/client/"+id+"/$rotate-secret", otherAdmin, "application/json", nil), 404)
	expect(t, do(t, "POST", "admin/projects/"+pid+"/client/"+id+"/$rotate-secret", plain, "application/json", nil), 403)
	expect(t, do(t, "POST", "admin/projects/"+pid+"/client/"+id+"/$rotate-secret", otherAdmin, "application/json", nil), 403)

	// Medplum's operation: name the current secret to replace it.
	op := "fhir/R4/ClientApplication/" + id + "/$rotate-secret"
	params := func(name, value string) []byte {
		return mustJSON(map[string]any{"resourceType": "Parameters", "parameter": []any{map[string]any{"name": name, "valueString": value}}})
	}
	r = do(t, "POST", op, admin, "application/fhir+json", params("secret", second))
	expect(t, r, 200)
	third := r.json(t)["secret"].(string)
	if third == second || r.json(t)["id"] != id || r.json(t)["resourceType"] != "ClientApplication" {
		t.Fatalf("operation: %s", r.body)
	}
	if s := tokenStatus(t, id, first); s != 401 {
		t.Fatalf("a secret two rotations old: %d", s)
	}
	clientToken(t, id, second)
	clientToken(t, id, third)

	// Refusals change nothing.
	for _, c := range []struct {
		name, token, ctype, body string
		status                   int
		text                     string
	}{
		{"no secret", admin, "application/fhir+json", `{"resourceType":"Parameters","parameter":[]}`, 400, "Secret to rotate must be provided"},
		{"both", admin, "application/json", `{"secret":"` + third + `","retiringSecret":"` + second + `"}`, 400, "Only one secret can be rotated at a time"},
		{"wrong secret", admin, "application/json", `{"secret":"` + first + `"}`, 400, "Provided secret does not match client"},
		{"retiring named as current", admin, "application/json", `{"secret":"` + second + `"}`, 400, "Provided secret does not match client"},
		{"current named as retiring", admin, "application/json", `{"retiringSecret":"` + third + `"}`, 400, "Provided secret does not match client"},
		{"unknown parameter", admin, "application/json", `{"secret":"` + third + `","force":"yes"}`, 400, "Unknown parameter: force"},
		{"not a string", admin, "application/fhir+json", `{"resourceType":"Parameters","parameter":[{"name":"secret","valueInteger":1}]}`, 400, "must be a string"},
		{"malformed", admin, "application/json", `{"secret":`, 400, "Content could not be parsed"},
		{"form body", admin, "application/x-www-form-urlencoded", `secret=` + third, 415, ""},
		{"plain member", plain, "application/json", `{"secret":"` + third + `"}`, 403, "Only project administrators can change ClientApplication resources"},
		{"admin of another project", otherAdmin, "application/json", `{"secret":"` + third + `"}`, 404, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, "POST", op, c.token, c.ctype, []byte(c.body))
			expect(t, r, c.status)
			if c.text != "" {
				expectOutcome(t, r, c.status, c.text)
			}
		})
	}
	clientToken(t, id, third)
	clientToken(t, id, second)

	// Naming the retiring secret ends it before its grace period does.
	r = do(t, "POST", op, admin, "application/json", []byte(`{"retiringSecret":"`+second+`"}`))
	expect(t, r, 200)
	if r.json(t)["secret"] != nil {
		t.Fatalf("retiring shows a secret: %s", r.body)
	}
	if s := tokenStatus(t, id, second); s != 401 {
		t.Fatalf("retired secret: %d", s)
	}
	clientToken(t, id, third)
	// A super admin rotates any project's client the same way.
	r = do(t, "POST", op, su, "application/json", []byte(`{"secret":"`+third+`"}`))
	expect(t, r, 200)
	fourth := r.json(t)["secret"].(string)
	clientToken(t, id, fourth)

	// Rotations naming the same secret at once: one wins, and the secret it
	// answers works; the others are refused.
	// (do may not run off the test's goroutine: it stops the test on errors.)
	results := make(chan *response, 8)
	for i := 0; i < cap(results); i++ {
		go func() {
			req, _ := http.NewRequest("POST", base+op, strings.NewReader(`{"secret":"`+fourth+`"}`))
			req.Header.Set("Authorization", "Bearer "+admin)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				results <- &response{body: []byte(err.Error())}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			results <- &response{status: resp.StatusCode, body: b}
		}()
	}
	var won []string
	for i := 0; i < cap(results); i++ {
		switch r := <-results; r.status {
		case 200:
			won = append(won, r.json(t)["secret"].(string))
		case 400, 409:
		default:
			t.Fatalf("concurrent rotation: %d %s", r.status, r.body)
		}
	}
	if len(won) != 1 {
		t.Fatalf("%d concurrent rotations won", len(won))
	}
	clientToken(t, id, won[0])
}

// TestSecretGraceExpires runs a stack of its own with a one-second grace
// period: the rotated-out secret works, then stops.
func TestSecretGraceExpires(t *testing.T) {
	ownStack(t, map[string]string{"PINION_CLIENT_SECRET_GRACE": "1s"})
	pid, su := adminProject(t, "Grace")
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", []byte(`{"name":"graceful"}`))
	expect(t, r, 201)
	id, old := r.json(t)["id"].(string), r.json(t)["secret"].(string)
	r = do(t, "POST", "fhir/R4/ClientApplication/"+id+"/$rotate-secret", su, "application/json", []byte(`{"secret":"`+old+`"}`))
	expect(t, r, 200)
	fresh := r.json(t)["secret"].(string)
	rotated := time.Now()
	clientToken(t, id, old)
	// The grace period must pass on the clock: the test's subject, not a
	// wait for an event (a poll would pass a grace of any length).
	time.Sleep(time.Until(rotated.Add(1200 * time.Millisecond)))
	if s := tokenStatus(t, id, old); s != 401 {
		t.Fatalf("secret after its grace period: %d", s)
	}
	clientToken(t, id, fresh)
}

func TestAdminBots(t *testing.T) {
	pid, su := adminProject(t, "Admin bots")
	other, _ := adminProject(t, "Admin bots elsewhere")
	admin := projectAdmin(t, su, pid, "bots-admin@example.com")
	_, plain := project(t, "Admin bots plain member")
	foreign := foreignPolicy(t, su, other)

	before := count(t, su, "Bot", pid)
	members := count(t, su, "ProjectMembership", pid)
	binaries := count(t, su, "Binary", pid)
	for _, c := range []struct {
		name, token, body string
		status            int
		text, expr        string
	}{
		{"no name", admin, `{"description":"x"}`, 400, "Bot name is required", "name"},
		{"unknown runtime", admin, `{"name":"x","runtimeVersion":"fission"}`, 400, "Unsupported bot runtime", "runtimeVersion"},
		{"runtime not a string", admin, `{"name":"x","runtimeVersion":7}`, 400, "Unsupported bot runtime", "runtimeVersion"},
		{"timeout too long", admin, `{"name":"x","timeout":901}`, 400, "between 1 and 900", "timeout"},
		{"timeout as text", admin, `{"name":"x","timeout":"10"}`, 400, "between 1 and 900", "timeout"},
		{"executable code", admin, `{"name":"x","executableCode":{"url":"Binary/123"}}`, 400, "is set by the server", "executableCode"},
		{"unknown field", admin, `{"name":"x","colour":"blue"}`, 400, "", ""},
		{"policy of another project", admin, `{"name":"x","accessPolicy":{"reference":"` + foreign + `"}}`, 400, "does not belong to this project", "accessPolicy"},
		{"plain member", plain, `{"name":"x"}`, 403, "Only project administrators can change Bot resources", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, "POST", "admin/projects/"+pid+"/bot", c.token, "application/json", []byte(c.body))
			expect(t, r, c.status)
			if c.text != "" && c.expr != "" {
				expectOutcome(t, r, c.status, c.text, c.expr)
			} else if c.text != "" {
				expectOutcome(t, r, c.status, c.text)
			}
		})
	}
	if count(t, su, "Bot", pid) != before || count(t, su, "ProjectMembership", pid) != members || count(t, su, "Binary", pid) != binaries {
		t.Fatal("refused requests wrote bots, memberships or binaries")
	}

	// Medplum's tools may say awslambda: the bot runs in the sandbox all the same.
	r := do(t, "POST", "admin/projects/"+pid+"/bot", admin, "application/json", mustJSON(map[string]any{
		"name": "lambda-style", "runtimeVersion": "awslambda", "timeout": 5,
		"identifier": []any{map[string]any{"system": "https://example.com/bots", "value": "lambda-style"}}}))
	expect(t, r, 201)
	bot := r.json(t)
	if bot["runtimeVersion"] != "awslambda" || bot["timeout"] != float64(5) || r.header.Get("Location") == "" {
		t.Fatalf("bot: %s", r.body)
	}
	r = do(t, "GET", "fhir/R4/ProjectMembership?profile-type=Bot&profile=Bot/"+bot["id"].(string), admin, "", nil)
	expect(t, r, 200)
	if _, entries := bundleOf(t, r); len(entries) != 1 {
		t.Fatalf("bot membership: %s", r.body)
	}
	expect(t, do(t, "POST", "fhir/R4/Bot/"+bot["id"].(string)+"/$deploy", admin, "application/json",
		mustJSON(map[string]any{"code": `exports.handler = async () => 'ran';`, "filename": "l.js"})), 200)
	r = do(t, "POST", "fhir/R4/Bot/$execute?identifier=https://example.com/bots|lambda-style", admin, "text/plain", []byte("x"))
	expect(t, r, 200)
	if string(r.body) != "ran" {
		t.Fatalf("execute: %s", r.body)
	}
}

// $deploy as Medplum's deploy.ts: executableCode only, titled with the
// filename sent; without code, the current executable code again.
func TestBotDeploy(t *testing.T) {
	pid, su := adminProject(t, "Bot deploy")
	// The body Medplum's CLI sends for `bot create`.
	r := do(t, "POST", "admin/projects/"+pid+"/bot", su, "application/json", []byte(`{"name":"deploy-me","description":""}`))
	expect(t, r, 201)
	bot := r.json(t)
	id := bot["id"].(string)
	if _, ok := bot["description"]; ok {
		t.Errorf("empty description stored: %s", r.body)
	}
	src, _ := bot["sourceCode"].(map[string]any)
	if src["contentType"] != "text/typescript" || src["title"] != "index.ts" || src["url"] == nil {
		t.Fatalf("new bot has no starter source: %s", r.body)
	}
	r = do(t, "GET", "fhir/R4/"+src["url"].(string), su, "", nil, "Accept", "text/typescript")
	expect(t, r, 200)
	if !strings.Contains(string(r.body), "export async function handler") {
		t.Fatalf("starter source: %s", r.body)
	}
	deploy := func(body string) *response {
		return do(t, "POST", "fhir/R4/Bot/"+id+"/$deploy", su, "application/json", []byte(body))
	}
	expectOutcome(t, deploy(`{}`), 400, "Bot missing executable code")
	expectOutcome(t, deploy(`{"code":""}`), 400, "Bot missing executable code")

	expect(t, deploy(`{"code":"exports.handler = async () => 'one';","filename":"dist/one.js"}`), 200)
	r = do(t, "GET", "fhir/R4/Bot/"+id, su, "", nil)
	expect(t, r, 200)
	after := r.json(t)
	exe, _ := after["executableCode"].(map[string]any)
	if exe["title"] != "one.js" || exe["contentType"] != "application/javascript" {
		t.Errorf("executableCode: %v", exe)
	}
	if s, _ := after["sourceCode"].(map[string]any); binaryIDOf(s["url"].(string)) != binaryIDOf(src["url"].(string)) || s["title"] != "index.ts" {
		t.Errorf("deploy touched sourceCode: %v", s)
	}
	exec := func() string {
		r := do(t, "POST", "fhir/R4/Bot/"+id+"/$execute", su, "text/plain", []byte("x"))
		expect(t, r, 200)
		return string(r.body)
	}
	if got := exec(); got != "one" {
		t.Fatalf("execute: %s", got)
	}
	// Without code: the saved executable code is compiled and deployed
	// again, under its title (what an editor saves need not be CommonJS).
	expect(t, deploy(`{}`), 200)
	r = do(t, "GET", "fhir/R4/Bot/"+id, su, "", nil)
	if again, _ := r.json(t)["executableCode"].(map[string]any); again["title"] != "one.js" || binaryIDOf(again["url"].(string)) == binaryIDOf(exe["url"].(string)) {
		t.Errorf("redeploy: executableCode %v, was %v", again, exe)
	}
	if got := exec(); got != "one" {
		t.Fatalf("execute after redeploy: %s", got)
	}
	// Without a filename the title is Medplum's default.
	expect(t, deploy(`{"code":"exports.handler = async () => 'two';"}`), 200)
	r = do(t, "GET", "fhir/R4/Bot/"+id, su, "", nil)
	if exe, _ := r.json(t)["executableCode"].(map[string]any); exe["title"] != "index.js" {
		t.Errorf("default title: %v", exe)
	}
	if got := exec(); got != "two" {
		t.Fatalf("execute after second deploy: %s", got)
	}
}

func TestProjectDetailsAndSecrets(t *testing.T) {
	pid, su := adminProject(t, "Secrets")
	other, _ := adminProject(t, "Secrets elsewhere")
	admin := projectAdmin(t, su, pid, "secrets-admin@example.com")
	otherAdmin := projectAdmin(t, su, other, "secrets-other-admin@example.com")
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", []byte(`{"name":"plain"}`))
	expect(t, r, 201)
	plain := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))

	const apiKey = `sk-"very"-secret<value>`
	r = do(t, "POST", "admin/projects/"+pid+"/secrets", admin, "application/json", mustJSON([]any{
		map[string]any{"name": "API_KEY", "valueString": apiKey},
		map[string]any{"name": "FLAG", "valueBoolean": true},
		map[string]any{"name": "RATE", "valueDecimal": 0.25},
		map[string]any{"name": "PORT", "valueInteger": 8443},
	}))
	expect(t, r, 200)

	// Project details, for the project's admins.
	r = do(t, "GET", "admin/projects/"+pid, admin, "", nil)
	expect(t, r, 200)
	p := r.json(t)["project"].(map[string]any)
	if p["id"] != pid || p["name"] != "Secrets" || len(p["secret"].([]any)) != 4 {
		t.Fatalf("project: %s", r.body)
	}
	expect(t, do(t, "GET", "admin/projects/"+pid, plain, "", nil), 403)
	expect(t, do(t, "GET", "admin/projects/"+pid, otherAdmin, "", nil), 403)
	expect(t, do(t, "GET", "admin/projects/00000000-0000-4000-8000-000000000000", su, "", nil), 404)
	// Non-admins never see the project, its history or its secrets.
	for _, path := range []string{"fhir/R4/Project/" + pid, "fhir/R4/Project/" + pid + "/_history", "fhir/R4/Project?_id=" + pid} {
		if r := do(t, "GET", path, plain, "", nil); r.status != 403 || strings.Contains(string(r.body), "very") {
			t.Fatalf("%s as a plain member: %d %s", path, r.status, r.body)
		}
	}

	// Bad secrets: a clear 400 naming the entry, and the secrets unchanged.
	for _, c := range []struct{ name, body, text, expr string }{
		{"object", `{"name":"x"}`, "must be a JSON array", ""},
		{"null", `null`, "must be a JSON array", ""},
		{"no name", `[{"valueString":"x"}]`, "Secret name is required", "[0].name"},
		{"two values", `[{"name":"a","valueString":"x","valueBoolean":true}]`, "exactly one value", "[0]"},
		{"no value", `[{"name":"a"}]`, "exactly one value", "[0]"},
		{"duplicate", `[{"name":"a","valueString":"1"},{"name":"a","valueString":"2"}]`, "Duplicate secret name: a", "[1].name"},
		{"string as number", `[{"name":"a","valueString":5}]`, "valueString must be a string", "[0].valueString"},
		{"empty string", `[{"name":"a","valueString":""}]`, "valueString must be a string", "[0].valueString"},
		{"boolean as text", `[{"name":"a","valueBoolean":"true"}]`, "valueBoolean must be true or false", "[0].valueBoolean"},
		{"fractional integer", `[{"name":"a","valueInteger":1.5}]`, "valueInteger must be a 32-bit integer", "[0].valueInteger"},
		{"huge integer", `[{"name":"a","valueInteger":4294967296}]`, "valueInteger must be a 32-bit integer", "[0].valueInteger"},
		{"unknown field", `[{"name":"a","valueString":"x","note":"y"}]`, "Unknown secret field: note", "[0].note"},
		{"trailing data", `[] []`, "Secrets must be an array", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, "POST", "admin/projects/"+pid+"/secrets", admin, "application/json", []byte(c.body))
			if c.expr != "" {
				expectOutcome(t, r, 400, c.text, c.expr)
			} else {
				expectOutcome(t, r, 400, c.text)
			}
		})
	}
	expect(t, do(t, "POST", "admin/projects/"+pid+"/secrets", admin, "text/plain", []byte(`[]`)), 415)
	expect(t, do(t, "POST", "admin/projects/"+pid+"/secrets", plain, "application/json", []byte(`[]`)), 403)
	expect(t, do(t, "POST", "admin/projects/"+pid+"/secrets", otherAdmin, "application/json", []byte(`[]`)), 403)
	r = do(t, "GET", "admin/projects/"+pid, admin, "", nil)
	if !strings.Contains(string(r.body), "PORT") || len(r.json(t)["project"].(map[string]any)["secret"].([]any)) != 4 {
		t.Fatalf("refused requests changed the secrets: %s", r.body)
	}

	// Bots get them as event.secrets, at once, typed; their audit events
	// never show them, whether logged, stringified or thrown.
	bot := newBot(t, su, pid, "secretive", "", `exports.handler = async (m, e) => {
  console.log('key is ' + e.secrets.API_KEY.valueString);
  console.log(JSON.stringify(e.secrets));
  if (e.input === 'throw') throw new Error('failed with ' + e.secrets.API_KEY.valueString);
  return [e.secrets.FLAG.valueBoolean, e.secrets.RATE.valueDecimal, e.secrets.PORT.valueInteger];
};`, "s.js")
	r = do(t, "POST", "fhir/R4/Bot/"+bot+"/$execute", plain, "text/plain", []byte("x"))
	expect(t, r, 200)
	if string(r.body) != "[true,0.25,8443]" {
		t.Fatalf("bot saw secrets: %s", r.body)
	}
	r = do(t, "POST", "fhir/R4/Bot/"+bot+"/$execute", plain, "text/plain", []byte("throw"))
	expectOutcome(t, r, 400, "failed with ****")
	audited := waitUntil(10*time.Second, func() bool {
		r = do(t, "GET", "fhir/R4/AuditEvent?_project="+pid+"&entity=Bot/"+bot+"&type=execute", su, "", nil)
		expect(t, r, 200)
		_, entries := bundleOf(t, r)
		return len(entries) >= 2
	})
	if !audited {
		t.Fatalf("no audit events: %s", r.body)
	}
	body := string(r.body)
	for _, leak := range []string{"very", `\"valueInteger\":8443`, `\"valueDecimal\":0.25`} {
		if strings.Contains(body, leak) {
			t.Fatalf("an audit event shows a secret (%s): %s", leak, body)
		}
	}
	if !strings.Contains(body, "key is ****") || !strings.Contains(body, "failed with ****") {
		t.Fatalf("audit events lack the masked log: %s", body)
	}
	// Replaced secrets reach the next run.
	expect(t, do(t, "POST", "admin/projects/"+pid+"/secrets", admin, "application/json",
		[]byte(`[{"name":"API_KEY","valueString":"rotated"},{"name":"FLAG","valueBoolean":false},{"name":"RATE","valueDecimal":1},{"name":"PORT","valueInteger":1}]`)), 200)
	r = do(t, "POST", "fhir/R4/Bot/"+bot+"/$execute", plain, "text/plain", []byte("x"))
	expect(t, r, 200)
	if string(r.body) != "[false,1,1]" {
		t.Fatalf("bot after the change: %s", r.body)
	}

	// Sites, Medplum's other project list.
	r = do(t, "POST", "admin/projects/"+pid+"/sites", admin, "application/json",
		[]byte(`[{"name":"portal","domain":["portal.example.com"]}]`))
	expect(t, r, 200)
	r = do(t, "GET", "admin/projects/"+pid, admin, "", nil)
	if !strings.Contains(string(r.body), "portal.example.com") || !strings.Contains(string(r.body), "rotated") {
		t.Fatalf("sites: %s", r.body)
	}
	for _, body := range []string{`{"name":"x"}`, `null`, `[{"name":"no domain"}]`, `[{"name":"x","domain":["a"],"colour":"blue"}]`} {
		r := do(t, "POST", "admin/projects/"+pid+"/sites", admin, "application/json", []byte(body))
		expect(t, r, 400)
		if r.json(t)["resourceType"] != "OperationOutcome" {
			t.Fatalf("not an outcome: %s", r.body)
		}
	}
	expect(t, do(t, "POST", "admin/projects/"+pid+"/sites", plain, "application/json", []byte(`[]`)), 403)
	r = do(t, "GET", "admin/projects/"+pid, admin, "", nil)
	if n := strings.Count(string(r.body), `"domain"`); n != 1 {
		t.Fatalf("refused sites changed the project: %s", r.body)
	}
}

// TestSuperAdminUnderPolicy: docs/interface.md advises an access policy on the
// client that creates projects, to reduce what else it can do. It keeps
// the super-admin routes and every project; the policy decides the rest.
func TestSuperAdminUnderPolicy(t *testing.T) {
	su := superToken(t)
	r := do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "project maker",
		"resource": []any{map[string]any{"resourceType": "Patient", "readonly": true}}}))
	expect(t, r, 201)
	policy := "AccessPolicy/" + r.json(t)["id"].(string)
	sap := stack.SuperAdmin.ProjectID
	r = do(t, "POST", "admin/projects/"+sap+"/client", su, "application/json",
		mustJSON(map[string]any{"name": "project maker", "accessPolicy": map[string]any{"reference": policy}}))
	expect(t, r, 201)
	maker := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))

	r = do(t, "POST", "admin/Project", maker, "application/json", []byte(`{"resourceType":"Project","name":"Made under policy"}`))
	expect(t, r, 201)
	pid := r.json(t)["id"].(string)
	r = do(t, "POST", "fhir/R4/Patient", su, "application/fhir+json",
		[]byte(`{"resourceType":"Patient","meta":{"project":"`+pid+`"},"name":[{"family":"Elsewhere"}]}`))
	expect(t, r, 201)
	patientID := r.json(t)["id"].(string)

	expect(t, do(t, "GET", "fhir/R4/Patient/"+patientID, maker, "", nil), 200) // any project, as a super admin
	expect(t, do(t, "GET", "fhir/R4/Project/"+pid, maker, "", nil), 200)       // project-admin types the policy leaves out stay open
	expect(t, do(t, "POST", "fhir/R4/Patient", maker, "application/fhir+json", patient("Nope")), 403)
	expect(t, do(t, "DELETE", "fhir/R4/Patient/"+patientID, maker, "", nil), 403)
	expect(t, do(t, "GET", "fhir/R4/Observation", maker, "", nil), 403)
	// The unrestricted super admin is unchanged.
	expect(t, do(t, "GET", "fhir/R4/Observation", su, "", nil), 200)
}
