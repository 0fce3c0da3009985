package standalone

import (
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/subscription"
)

// A subscription's endpoint may name its bot by identifier
// (Bot?identifier=system|value, medplum#6029): resolved at each delivery
// as $execute?identifier= resolves it, so a bot given the identifier
// later is the one run, and two bots with it are refused (412), never an
// arbitrary pick.
func TestSubscriptionBotByIdentifier(t *testing.T) {
	pid, su := adminProject(t, "Bots by identifier")
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "writer"}))
	expect(t, r, 201)
	tok := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	const ident = "https://example.com/bots|recorder"
	newBot(t, su, pid, "recorder", ident, `exports.handler = async (medplum, event) => {
		await medplum.createResource({resourceType: 'Basic', code: {text: 'by identifier'},
			identifier: [{system: 'seen', value: event.input.id}]});
	};`, "recorder.js")

	for _, bad := range []string{"Bot?identifier=", "Bot?identifier=a|b&name=x", "Bot?name=recorder"} {
		r := do(t, "POST", "fhir/R4/Subscription", tok, "application/fhir+json", mustJSON(map[string]any{
			"resourceType": "Subscription", "status": "active", "reason": "test", "criteria": "Patient",
			"channel": map[string]any{"type": "rest-hook", "endpoint": bad}}))
		expect(t, r, 400)
		if !strings.Contains(r.outcomeText(t), "Bot?identifier=") {
			t.Errorf("%s: %s", bad, r.body)
		}
	}

	sub := newSubscription(t, tok, "Patient", "Bot?identifier="+ident,
		map[string]any{"url": subscription.ExtMaxAttempts, "valueInteger": 0})
	recorded := func(id string) bool {
		r := do(t, "GET", "fhir/R4/Basic?identifier=seen|"+id, tok, "", nil)
		expect(t, r, 200)
		_, found := bundleOf(t, r)
		return len(found) == 1
	}
	p := newPatient(t, tok, "Identified")["id"].(string)
	if !waitUntil(10*time.Second, func() bool { return recorded(p) }) {
		t.Fatalf("the bot named by identifier never ran; audit: %v", audits(t, sub, 0))
	}

	// A second bot with the identifier: the delivery is refused as
	// $execute?identifier= would be, and kept as a dead letter.
	newBot(t, su, pid, "twin", ident, `exports.handler = async () => {};`, "twin.js")
	q := do(t, "POST", "fhir/R4/Bot/$execute?identifier="+ident, tok, "application/json", []byte(`{}`))
	expect(t, q, 412)
	newPatient(t, tok, "Ambiguous")
	var dead map[string]any
	lettered := waitUntil(15*time.Second, func() bool {
		for _, e := range audits(t, sub, 0) {
			if e["outcome"] == "8" {
				dead = e
			}
		}
		return dead != nil
	})
	if !lettered {
		t.Fatalf("no dead letter for the ambiguous identifier: %v", audits(t, sub, 0))
	}
	if desc, _ := dead["outcomeDesc"].(string); !strings.Contains(strings.ToLower(desc), "multiple") {
		t.Errorf("the dead letter's reason: %q", desc)
	}
}
