package standalone

import (
	"strings"
	"testing"
)

// Each $deploy is a version of the Bot naming its own Binary, and
// Bot/<id>/_history/<vid>/$execute runs the code of that version.
func TestBotVersions(t *testing.T) {
	pid, su := adminProject(t, "Bot versions")
	bot := newBot(t, su, pid, "versioned", "", `export async function handler() { return 'one'; }`, "index.ts")
	version := func() string {
		t.Helper()
		r := do(t, "GET", "fhir/R4/Bot/"+bot, su, "", nil)
		expect(t, r, 200)
		return r.json(t)["meta"].(map[string]any)["versionId"].(string)
	}
	first := version()
	expect(t, do(t, "POST", "fhir/R4/Bot/"+bot+"/$deploy", su, "application/json",
		mustJSON(map[string]any{"code": `export async function handler() { return 'two'; }`, "filename": "index.ts"})), 200)
	second := version()

	run := func(path string) string {
		t.Helper()
		r := do(t, "POST", path, su, "application/json", []byte(`{}`))
		expect(t, r, 200)
		return strings.Trim(string(r.body), `"`)
	}
	if got := run("fhir/R4/Bot/" + bot + "/$execute"); got != "two" {
		t.Fatalf("the current version ran %q", got)
	}
	if got := run("fhir/R4/Bot/" + bot + "/_history/" + first + "/$execute"); got != "one" {
		t.Fatalf("the first deployed version ran %q", got)
	}
	if got := run("fhir/R4/Bot/" + bot + "/_history/" + second + "/$execute"); got != "two" {
		t.Fatalf("the second deployed version ran %q", got)
	}
	r := do(t, "GET", "fhir/R4/Bot/"+bot+"/_history/"+first+"/$execute", su, "", nil)
	expect(t, r, 200)
	expect(t, do(t, "POST", "fhir/R4/Bot/"+bot+"/_history/no-such-version/$execute", su, "application/json", []byte(`{}`)), 404)

	// Another project's member reaches no version of it.
	_, other := project(t, "Elsewhere")
	expect(t, do(t, "POST", "fhir/R4/Bot/"+bot+"/_history/"+first+"/$execute", other, "application/json", []byte(`{}`)), 404)
}
