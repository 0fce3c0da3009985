package subscriptions

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/repo"
)

// The typed delivery AuditEvents write the JSON the maps they replaced
// wrote (issue 31, finding 3), for each record a delivery makes.
func TestDeliveryAuditJSON(t *testing.T) {
	committed := time.Date(2026, 3, 4, 4, 6, 7, 100, time.UTC)
	d := &delivery{Subscription: "s1", Project: "p1", Committed: committed,
		Event: repo.Event{Project: "p1", Type: "Patient", ID: "pat1", VersionID: "v1"}}
	const recorded = "2026-03-04T04:06:08.5Z"
	agent := []any{map[string]any{"type": map[string]any{"text": "Subscription"}, "requestor": false}}
	source := map[string]any{"observer": map[string]any{"reference": "Subscription/s1"}}
	changed := map[string]any{"what": map[string]any{"reference": "Patient/pat1"}, "role": map[string]any{"code": "1", "display": "Patient"}}
	subscriber := map[string]any{"what": map[string]any{"reference": "Subscription/s1"}, "role": map[string]any{"code": "9", "display": "Subscriber"}}
	obs := func(ref string) map[string]any {
		return map[string]any{"what": map[string]any{"reference": ref}, "role": map[string]any{"code": "4", "display": "Domain"}}
	}
	for _, tc := range []struct {
		name string
		ev   *resource.AuditEvent
		want map[string]any
	}{
		{"attempt", attemptAudit(d, "0", "Attempt 0 received status 200", time.Now()), map[string]any{
			"resourceType": "AuditEvent", "type": map[string]any{"code": "transmit"}, "recorded": recorded,
			"agent": agent, "source": source, "entity": []any{changed, subscriber},
			"outcome": "0", "outcomeDesc": "Attempt 0 received status 200",
			"period":    map[string]any{"start": "2026-03-04T04:06:07.0000001Z", "end": recorded},
			"extension": []any{map[string]any{"url": "https://medplum.com/fhir/StructureDefinition/durationMs", "valueInteger": 0}},
		}},
		{"dead letter", transmitAudit(d, "8", "Dead letter after 3 attempts: x"), map[string]any{
			"resourceType": "AuditEvent", "type": map[string]any{"code": "transmit"}, "recorded": recorded,
			"agent": agent, "source": source, "entity": []any{changed, subscriber},
			"outcome": "8", "outcomeDesc": "Dead letter after 3 attempts: x",
		}},
		{"not a patient", transmitAudit(&delivery{Subscription: "s1", Event: repo.Event{Type: "Observation", ID: "o1"}}, "4", "FHIRPath"), map[string]any{
			"resourceType": "AuditEvent", "type": map[string]any{"code": "transmit"}, "recorded": recorded,
			"agent": agent, "source": source, "entity": []any{obs("Observation/o1"), subscriber},
			"outcome": "4", "outcomeDesc": "FHIRPath",
		}},
		{"set aside, no subscription", unmatchedAudit(d.Event, "Set aside"), map[string]any{
			"resourceType": "AuditEvent", "type": map[string]any{"code": "transmit"}, "recorded": recorded,
			"agent": agent, "entity": []any{changed},
			"outcome": "8", "outcomeDesc": "Set aside",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := time.Parse(time.RFC3339Nano, tc.ev.Recorded); err != nil {
				t.Fatalf("recorded %q: %v", tc.ev.Recorded, err)
			}
			// The clock's values are the only ones a test cannot name.
			tc.ev.Recorded = recorded
			if p := tc.ev.Period; p != nil {
				p.End = recorded
			}
			for i := range tc.ev.Extension {
				if ms := tc.ev.Extension[i].ValueInteger; ms < 0 || ms > 10_000 {
					t.Fatalf("durationMs %d", ms)
				}
				tc.ev.Extension[i].ValueInteger = 0
			}
			m, err := resource.Map(tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(m)
			want, _ := json.Marshal(tc.want)
			if string(got) != string(want) {
				t.Fatalf("%s\nwant %s", got, want)
			}
		})
	}
}
