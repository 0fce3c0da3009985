package resource

import (
	"reflect"
	"testing"
)

// AuditEvent.Map is the map Map (the JSON round trip) gives, for every
// shape Pinion records: a bot run's, a scheduled one's, a delivery's, and
// one with what may be left out left out.
func TestAuditEventMap(t *testing.T) {
	run := AuditEvent{
		ResourceType: "AuditEvent",
		Type:         Coding{System: "https://medplum.com/CodeSystem/audit-event", Code: "execute"},
		Recorded:     "2026-11-27T10:00:00.123Z",
		Period:       &Period{Start: "2026-11-27T10:00:00.1Z", End: "2026-11-27T10:00:00.123Z"},
		Outcome:      "0",
		OutcomeDesc:  "hello \"world\"\n",
		Agent: []AuditAgent{
			{Who: &Reference{Reference: "Practitioner/p1", Display: "Dr P"}, Requestor: true},
			{Who: &Reference{Reference: "Bot/b1"}},
		},
		Source: &AuditSource{Observer: Reference{Reference: "Bot/b1"}},
		Entity: []AuditEntity{{What: Reference{Reference: "Bot/b1"},
			Role: Coding{System: "http://terminology.hl7.org/CodeSystem/object-role", Code: "4", Display: "Domain Resource"}}},
	}
	scheduled := run
	scheduled.Subtype = []Coding{{System: "urn:pinion:bot-trigger", Code: "scheduled", Display: "Scheduled run due 2026-11-27T10:00:00Z"}}
	delivery := AuditEvent{
		ResourceType: "AuditEvent",
		Type:         Coding{Code: "rest"},
		Subtype:      []Coding{}, // omitted when empty, as omitempty does
		Recorded:     "2026-11-27T10:00:00Z",
		Outcome:      "4",
		Agent:        []AuditAgent{{Type: &CodeableConcept{Text: "subscription"}}},
		Entity:       []AuditEntity{},
		Extension:    []Extension{{URL: "https://medplum.com/fhir/StructureDefinition/tracking-duration", ValueInteger: -12345678901}},
	}
	bare := AuditEvent{ResourceType: "AuditEvent"}
	// full sets every field at every depth, so a field added to these
	// types fails here until it is set, and then until Map writes it.
	ref := Reference{Reference: "Device/d", Display: "d"}
	coding := Coding{System: "s", Code: "c", Display: "d"}
	full := AuditEvent{
		ResourceType: "AuditEvent", Type: coding, Subtype: []Coding{coding}, Recorded: "2026-11-27T10:00:00Z",
		Period: &Period{Start: "2026-11-27T10:00:00Z", End: "2026-11-27T10:00:01Z"}, Outcome: "8", OutcomeDesc: "d",
		Agent:     []AuditAgent{{Type: &CodeableConcept{Text: "t"}, Who: &ref, Requestor: true}},
		Source:    &AuditSource{Observer: ref},
		Entity:    []AuditEntity{{What: ref, Role: coding}},
		Extension: []Extension{{URL: "u", ValueInteger: 1}},
	}
	if path := unset(reflect.ValueOf(full), "AuditEvent"); path != "" {
		t.Fatalf("full leaves %s unset", path)
	}
	for name, ev := range map[string]*AuditEvent{"run": &run, "scheduled": &scheduled, "delivery": &delivery, "bare": &bare, "full": &full} {
		want, err := Map(ev)
		if err != nil {
			t.Fatal(err)
		}
		if got := ev.Map(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %#v\nwant %#v", name, got, want)
		}
	}
}

// unset is the path of the first zero field in v, a struct, its pointers
// and its slices' elements; "" when every field is set.
func unset(v reflect.Value, path string) string {
	switch v.Kind() {
	case reflect.Pointer:
		return unset(v.Elem(), path)
	case reflect.Slice:
		for i := range v.Len() {
			if p := unset(v.Index(i), path+"[i]"); p != "" {
				return p
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f, p := v.Field(i), path+"."+v.Type().Field(i).Name
			if f.IsZero() {
				return p
			}
			if p := unset(f, p); p != "" {
				return p
			}
		}
	}
	return ""
}
