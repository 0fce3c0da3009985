package standalone

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/subscription"
)

// costlyCriteria lowers and uppers the whole family for each identifier,
// three deep: over the Patient (a 1 MiB family, 25 identifiers)
// that is 15,625 passes over a mebibyte when nothing charges them.
func costlyCriteria() string {
	src := "%current.name.family.lower().upper().contains('zz')"
	for i := 0; i < 3; i++ {
		src = "%current.identifier.where(" + src + " or value.exists()).exists()"
	}
	return src
}

// One project's costly FHIRPath criteria do not hold up another project's
// notification: the evaluation spends its budget, counts as no match for
// that subscription (its AuditEvent says why), the project's other
// subscription still gets the change, and the other project's
// rest-hook is called promptly.
func TestSubscriptionCostlyCriteriaDoNotHoldOthers(t *testing.T) {
	// Bodies of a mebibyte and more; the log, to read the matcher's warning.
	var out lockedBuffer
	ownStackLogging(t, map[string]string{"PINION_MAX_BODY_BYTES": "4194304", "PINION_REST_HOOK_ALLOW_PRIVATE": "true"}, slog.New(slog.NewJSONHandler(&out, nil)))
	aProject, aTok := project(t, "Costly criteria")
	costlyHook, plainHook := newHook(t, 200), newHook(t, 200)
	costly := newSubscription(t, aTok, "Patient", costlyHook.srv.URL,
		map[string]any{"url": subscription.ExtFHIRPath, "valueString": costlyCriteria()})
	newSubscription(t, aTok, "Patient", plainHook.srv.URL)
	_, bTok := project(t, "Beside costly criteria")
	other := newHook(t, 200)
	newSubscription(t, bTok, "Patient", other.srv.URL)

	ids := make([]any, 25)
	for i := range ids {
		ids[i] = map[string]any{"system": "urn:example:mrn", "value": strings.Repeat("7", 16)}
	}
	r := do(t, "POST", "fhir/R4/Patient", aTok, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "Patient", "identifier": ids,
		"name": []any{map[string]any{"family": strings.Repeat("a", 1<<20)}},
	}))
	expect(t, r, 201)
	big := r.json(t)["id"].(string)

	start := time.Now()
	newPatient(t, bTok, "Beside")
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range strings.Split(out.String(), "\n") {
				if len(l) > 400 {
					l = l[:400]
				}
				t.Log(l)
			}
		}
	})
	c := other.next(t, 5*time.Second)
	t.Logf("another project's notification came %s after its write, beside costly criteria", c.at.Sub(start))

	// The same change still reaches the project's plain subscription.
	var got struct {
		ID string `json:"id"`
	}
	if c := plainHook.next(t, 5*time.Second); json.Unmarshal(c.body, &got) != nil || got.ID != big {
		t.Fatalf("the plain subscription got %.100s, want Patient/%s", c.body, big)
	}
	// The costly one did not match, and its AuditEvent says why.
	entries := audits(t, costly, 1)
	if len(entries) != 1 || entries[0]["outcome"] != "4" ||
		!strings.Contains(entries[0]["outcomeDesc"].(string), "FHIRPath criteria not evaluated") ||
		!strings.Contains(entries[0]["outcomeDesc"].(string), "budget is spent") {
		t.Fatalf("AuditEvents of the costly subscription: %v", entries)
	}
	costlyHook.none(t, 200*time.Millisecond)

	// One warning names the project and subscription, never the resource.
	var warned bool
	for _, line := range strings.Split(out.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || !strings.Contains(fmt.Sprint(m["msg"]), "FHIRPath criteria spent their budget") {
			continue
		}
		warned = m["level"] == "WARN" && m["project"] == aProject && m["subscription"] == costly
		if strings.Contains(line, "aaaa") || strings.Contains(line, big) {
			t.Errorf("the warning holds the resource: %.200s", line)
		}
	}
	if !warned {
		t.Error("no warning naming the project and subscription")
	}
}

// Criteria past the parse bounds are refused when the Subscription is
// written, naming the extension.
func TestSubscriptionCriteriaBoundsAtWrite(t *testing.T) {
	_, tok := project(t, "Criteria bounds")
	nested := "name.exists()"
	for i := 0; i < 40; i++ {
		nested = "name.where(" + nested + ").exists()"
	}
	r := do(t, "POST", "fhir/R4/Subscription", tok, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "Subscription", "status": "active", "reason": "x", "criteria": "Patient",
		"channel":   map[string]any{"type": "rest-hook", "endpoint": "https://example.com/h"},
		"extension": []any{map[string]any{"url": subscription.ExtFHIRPath, "valueString": nested}},
	}))
	expectOutcome(t, r, 400, "", "Subscription.extension[0].valueString")
	if !strings.Contains(r.outcomeText(t), "nests more than 32 deep") {
		t.Fatalf("refusal says %q", r.outcomeText(t))
	}
}
