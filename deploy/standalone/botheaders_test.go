package standalone

import (
	"strings"
	"testing"
)

// Medplum 5.0.10's $execute (packages/server/src/fhir/operations/execute.ts)
// answers with the run's status, body and content type and no header of
// its own about the bot or the run: Pinion sends none either, whatever
// the bot returns, synchronously or not.
func TestBotExecuteSendsNoBotHeaders(t *testing.T) {
	pid, su := adminProject(t, "Bot headers")
	cases := map[string]string{
		"text":     `export async function handler() { return 'plain'; }`,
		"resource": `export async function handler() { return {resourceType: 'Patient', name: [{family: 'X'}]}; }`,
		"nothing":  `export async function handler() {}`,
		"thrown":   `export async function handler() { throw new Error('no'); }`,
	}
	for name, code := range cases {
		bot := newBot(t, su, pid, name, "", code, "index.ts")
		for _, r := range []*response{
			do(t, "POST", "fhir/R4/Bot/"+bot+"/$execute", su, "application/json", []byte(`{}`)),
			do(t, "GET", "fhir/R4/Bot/"+bot+"/$execute?a=b", su, "", nil),
			do(t, "POST", "fhir/R4/Bot/"+bot+"/$execute", su, "application/json", []byte(`{}`), "Prefer", "respond-async"),
		} {
			if r.status >= 500 {
				t.Fatalf("%s: status %d: %s", name, r.status, r.body)
			}
			for h := range r.header {
				l := strings.ToLower(h)
				if strings.HasPrefix(l, "x-medplum") || strings.Contains(l, "bot") {
					t.Errorf("%s: $execute answered with %s: %s", name, h, r.header.Get(h))
				}
			}
		}
	}
}
