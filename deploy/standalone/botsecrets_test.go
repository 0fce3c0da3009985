package standalone

import (
	"strings"
	"testing"
)

// A bot's own secrets override the project's of the same name in
// event.secrets; only the project's admins set or read them, and the Bot
// resource never carries them.
func TestBotOwnSecrets(t *testing.T) {
	pid, su := adminProject(t, "Bot secrets")
	expect(t, do(t, "POST", "admin/projects/"+pid+"/secrets", su, "application/json", mustJSON([]any{
		map[string]any{"name": "KEY", "valueString": "from-project"},
		map[string]any{"name": "SHARED", "valueString": "project-only"},
	})), 200)
	code := `export async function handler(medplum, event) {
  return [event.secrets.KEY.valueString, event.secrets.SHARED.valueString, event.secrets.OWN ? event.secrets.OWN.valueInteger : 'none'].join(' ');
}`
	bot := newBot(t, su, pid, "secretive", "", code, "secretive.ts")
	other := newBot(t, su, pid, "plain", "", code, "plain.ts")
	path := "admin/projects/" + pid + "/bot/" + bot + "/secrets"

	run := func(id string) string {
		t.Helper()
		r := do(t, "POST", "fhir/R4/Bot/"+id+"/$execute", su, "application/json", []byte(`{}`))
		expect(t, r, 200)
		return strings.Trim(string(r.body), `"`)
	}
	if got := run(bot); got != "from-project project-only none" {
		t.Fatalf("before: %q", got)
	}
	r := do(t, "POST", path, su, "application/json", mustJSON([]any{
		map[string]any{"name": "KEY", "valueString": "from-bot"},
		map[string]any{"name": "OWN", "valueInteger": 7},
	}))
	expect(t, r, 200)
	if got := run(bot); got != "from-bot project-only 7" {
		t.Fatalf("with its own secrets: %q", got)
	}
	if got := run(other); got != "from-project project-only none" {
		t.Fatalf("another bot of the project: %q", got)
	}

	// Checked as the project's secrets are; only an array replaces them.
	r = do(t, "POST", path, su, "application/json", mustJSON([]any{map[string]any{"name": "X", "valueInteger": "7"}}))
	expect(t, r, 400)
	if !strings.Contains(string(r.body), "[0].valueInteger") {
		t.Fatalf("a bad secret: %s", r.body)
	}
	expect(t, do(t, "POST", path, su, "application/json", []byte(`null`)), 400)
	expect(t, do(t, "POST", "admin/projects/"+pid+"/bot/no-such-bot/secrets", su, "application/json", []byte(`[]`)), 404)

	// Admins read them; a member who is no admin neither reads nor sets
	// them, and the Bot never shows them.
	r = do(t, "GET", path, su, "", nil)
	expect(t, r, 200)
	if !strings.Contains(string(r.body), "from-bot") {
		t.Fatalf("an admin's read: %s", r.body)
	}
	c := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "member"}))
	expect(t, c, 201)
	tok := clientToken(t, c.json(t)["id"].(string), c.json(t)["secret"].(string))
	expect(t, do(t, "GET", path, tok, "", nil), 403)
	expect(t, do(t, "POST", path, tok, "application/json", []byte(`[]`)), 403)
	for _, p := range []string{"fhir/R4/Bot/" + bot, "fhir/R4/Bot/" + bot + "/_history", "fhir/R4/Bot?_id=" + bot} {
		r = do(t, "GET", p, su, "", nil)
		expect(t, r, 200)
		if strings.Contains(string(r.body), "from-bot") {
			t.Fatalf("%s shows the bot's secret: %s", p, r.body)
		}
	}

	// An empty array removes them.
	expect(t, do(t, "POST", path, su, "application/json", []byte(`[]`)), 200)
	if got := run(bot); got != "from-project project-only none" {
		t.Fatalf("after removing them: %q", got)
	}
}
