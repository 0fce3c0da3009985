package subscription

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/search"
)

func sub(t *testing.T, extra string) *Subscription {
	t.Helper()
	body := `{"resourceType":"Subscription","status":"active","criteria":"Patient?name=ali",` +
		`"meta":{"author":{"reference":"Practitioner/p1"}},` +
		`"channel":{"type":"rest-hook","endpoint":"https://hooks.example/x","header":["Authorization: Bearer abc","X-Two:  b:c "]}` + extra + `}`
	s, err := Parse("s1", "proj", []byte(body))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

func patient(name string) *search.Doc {
	return search.ContentDoc("Patient", "p1", "proj", time.Now(), map[string]any{
		"resourceType": "Patient", "name": []any{map[string]any{"family": name}},
	})
}

func TestParse(t *testing.T) {
	s := sub(t, "")
	if s.Type != "Patient" || !s.Active || s.Author != "Practitioner/p1" || s.Retries != DefaultRetries {
		t.Fatalf("parsed %+v", s)
	}
	// A header splits at its first colon: a value may hold colons.
	want := [][2]string{{"Authorization", "Bearer abc"}, {"X-Two", "b:c"}}
	if len(s.Headers) != 2 || s.Headers[0] != want[0] || s.Headers[1] != want[1] {
		t.Fatalf("headers %q, want %q", s.Headers, want)
	}
	if _, ok := s.Bot(); ok {
		t.Fatal("a URL endpoint is not a bot")
	}
	s = sub(t, `,"extension":[{"url":"`+ExtMaxAttempts+`","valueInteger":100},{"url":"`+ExtSecret+`","valueString":"shh"}]`)
	if s.Retries != MaxAttempts-1 || s.Secret != "shh" {
		t.Fatalf("retries %d (want the cap %d), secret %q", s.Retries, MaxAttempts-1, s.Secret)
	}
}

func TestMatches(t *testing.T) {
	s := sub(t, "")
	cases := []struct {
		name        string
		doc         *search.Doc
		interaction string
		want        bool
	}{
		{"prefix of the name", patient("Alice"), Create, true},
		{"another name", patient("Bob"), Update, false},
		{"another type", search.ContentDoc("Observation", "o1", "proj", time.Now(), map[string]any{"resourceType": "Observation"}), Create, false},
		{"audit events never", search.ContentDoc("AuditEvent", "a1", "proj", time.Now(), map[string]any{"resourceType": "AuditEvent"}), Create, false},
	}
	for _, c := range cases {
		if got := s.Delivered(c.interaction, c.doc, none); got != c.want {
			t.Errorf("%s: Delivered = %v, want %v", c.name, got, c.want)
		}
	}
	only := sub(t, `,"extension":[{"url":"`+ExtInteraction+`","valueCode":"delete"}]`)
	if only.Delivered(Create, patient("Alice"), none) || !only.Delivered(Delete, patient("Alice"), none) {
		t.Error("the supported-interaction extension does not select the interaction")
	}
	off := sub(t, "")
	off.Active = false
	if off.Delivered(Create, patient("Alice"), none) {
		t.Error("an inactive subscription is delivered")
	}
	pre := sub(t, `,"extension":[{"url":"`+ExtPreCommit+`","valueBoolean":true}]`)
	if pre.Delivered(Create, patient("Alice"), none) {
		t.Error("a pre-commit subscription is delivered after the commit")
	}
}

// none is the previous version of a create.
func none() map[string]any { return map[string]any{} }

func TestFHIRPathCriteria(t *testing.T) {
	// Medplum's example: only a change of active, never a create.
	s := sub(t, `,"extension":[{"url":"`+ExtFHIRPath+`","valueString":"%previous.active != %current.active"}]`)
	alice := search.ContentDoc("Patient", "p1", "proj", time.Now(), map[string]any{
		"resourceType": "Patient", "active": true, "name": []any{map[string]any{"family": "Alice"}},
	})
	if s.Delivered(Create, alice, none) {
		t.Error("a create is a change of active")
	}
	was := func(active bool) func() map[string]any {
		return func() map[string]any { return map[string]any{"resourceType": "Patient", "active": active} }
	}
	if !s.Delivered(Update, alice, was(false)) || s.Delivered(Update, alice, was(true)) {
		t.Error("the FHIRPath criteria do not tell a change of active from none")
	}
	// The search criteria still apply.
	bob := search.ContentDoc("Patient", "p2", "proj", time.Now(), map[string]any{"resourceType": "Patient", "active": true})
	if s.Delivered(Update, bob, was(false)) {
		t.Error("FHIRPath criteria override the search criteria")
	}
}

func TestSuccessful(t *testing.T) {
	def := sub(t, "")
	for status, want := range map[int]bool{199: false, 200: true, 302: true, 399: true, 400: false, 500: false} {
		if def.Successful(status) != want {
			t.Errorf("default: status %d successful = %v", status, !want)
		}
	}
	s := sub(t, `,"extension":[{"url":"`+ExtSuccessCodes+`","valueString":"200-204, 410"}]`)
	for status, want := range map[int]bool{200: true, 204: true, 205: false, 302: false, 410: true} {
		if s.Successful(status) != want {
			t.Errorf("200-204,410: status %d successful = %v", status, !want)
		}
	}
}

func TestSignature(t *testing.T) {
	// python3: hmac.new(b'shh', b'{"resourceType":"Patient"}', hashlib.sha256).hexdigest()
	const want = "2f66e521e09f8ef11f60b848489c5fcd32907ad8258a1b120ba00352e85b45c4"
	if got := Signature("shh", []byte(`{"resourceType":"Patient"}`)); got != want {
		t.Fatalf("Signature = %s, want %s", got, want)
	}
}

func TestCheckRefuses(t *testing.T) {
	base := func(mut func(m map[string]any)) map[string]any {
		m := map[string]any{
			"resourceType": "Subscription", "status": "active", "criteria": "Patient",
			"channel": map[string]any{"type": "rest-hook", "endpoint": "Bot/b1"},
		}
		mut(m)
		return m
	}
	ok := []map[string]any{
		base(func(map[string]any) {}),
		base(func(m map[string]any) { m["channel"] = map[string]any{"type": "websocket"} }),
		base(func(m map[string]any) { m["criteria"] = "Observation?code=http://loinc.org|1234-5" }),
		base(func(m map[string]any) {
			m["channel"] = map[string]any{"type": "rest-hook", "endpoint": "http://127.0.0.1:9/x"}
		}),
	}
	for i, m := range ok {
		if err := Check(m); err != nil {
			t.Errorf("case %d refused: %v", i, err)
		}
	}
	bad := map[string]struct {
		m    map[string]any
		want string
	}{
		"no criteria":    {base(func(m map[string]any) { delete(m, "criteria") }), "criteria are required"},
		"unknown type":   {base(func(m map[string]any) { m["criteria"] = "Patients?name=a" }), "Unknown resource type"},
		"unknown param":  {base(func(m map[string]any) { m["criteria"] = "Patient?nope=1" }), "Invalid criteria"},
		"email channel":  {base(func(m map[string]any) { m["channel"] = map[string]any{"type": "email", "endpoint": "x"} }), "channel types"},
		"no endpoint":    {base(func(m map[string]any) { m["channel"] = map[string]any{"type": "rest-hook"} }), "needs channel.endpoint"},
		"ftp endpoint":   {base(func(m map[string]any) { m["channel"] = map[string]any{"type": "rest-hook", "endpoint": "ftp://x/y"} }), "http(s) URL"},
		"header":         {base(func(m map[string]any) { m["channel"].(map[string]any)["header"] = []any{"no colon"} }), "Name: value"},
		"header newline": {base(func(m map[string]any) { m["channel"].(map[string]any)["header"] = []any{"A: b\r\nC: d"} }), "Name: value"},
		"many headers": {base(func(m map[string]any) {
			hs := []any{}
			for i := 0; i <= MaxHeaders; i++ {
				hs = append(hs, fmt.Sprintf("X-H%d: v", i))
			}
			m["channel"].(map[string]any)["header"] = hs
		}), "At most 64 channel headers"},
		"long header": {base(func(m map[string]any) {
			m["channel"].(map[string]any)["header"] = []any{"X-Big: " + strings.Repeat("v", 9000)}
		}), "at most 8192 bytes"},
		"interaction": {base(func(m map[string]any) {
			m["extension"] = []any{map[string]any{"url": ExtInteraction, "valueCode": "read"}}
		}), "create, update or delete"},
		"attempts": {base(func(m map[string]any) {
			m["extension"] = []any{map[string]any{"url": ExtMaxAttempts, "valueInteger": -1}}
		}), "whole number"},
		"codes": {base(func(m map[string]any) {
			m["extension"] = []any{map[string]any{"url": ExtSuccessCodes, "valueString": "2xx"}}
		}), "not a status code"},
		"fhirpath": {base(func(m map[string]any) {
			m["extension"] = []any{map[string]any{"url": ExtFHIRPath, "valueString": "name.join(',')"}}
		}), "join() is not supported"},
	}
	for name, c := range bad {
		err := Check(c.m)
		var fe *fhir.Error
		if !errors.As(err, &fe) || fe.Status != 400 || !strings.Contains(fe.Message(), c.want) {
			b, _ := json.Marshal(c.m)
			t.Errorf("%s: %s: got %v, want a 400 saying %q", name, b, err, c.want)
		}
	}
}
