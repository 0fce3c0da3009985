package botexec

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
)

func TestWantsAsync(t *testing.T) {
	cases := []struct {
		prefer string
		want   bool
	}{
		{"respond-async", true},
		{"Respond-Async", true},
		{"return=minimal, respond-async", true},
		{"respond-async; wait=10", true},
		{"", false},
		{"return=representation", false},
		{"respond-sync", false},
		{"respond async", false},
	}
	for _, tc := range cases {
		r := &bus.Request{Header: map[string]string{"Prefer": tc.prefer}}
		if got := wantsAsync(r); got != tc.want {
			t.Errorf("Prefer %q: %v, want %v", tc.prefer, got, tc.want)
		}
	}
	if wantsAsync(&bus.Request{}) {
		t.Error("no headers: async")
	}
}

// Past the bound, a respond-async request is refused at once with 503 and
// Retry-After; a slot given back is taken again.
func TestTakeAsyncSlot(t *testing.T) {
	slots := make(chan struct{}, 2)
	for i := range 2 {
		if err := takeAsyncSlot(slots); err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
	}
	for range 2 {
		fe := wantError(t, takeAsyncSlot(slots), 503, "Too many asynchronous bot executions, try again")
		if fe.Header["Retry-After"] != "1" {
			t.Fatalf("headers %v", fe.Header)
		}
	}
	<-slots
	if err := takeAsyncSlot(slots); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if len(slots) != 2 {
		t.Fatalf("%d slots held", len(slots))
	}
}

func TestNewAsyncJob(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 8, time.FixedZone("CET", 3600))
	cases := []struct {
		name, path, rawQuery, want string
	}{
		{"by id", "/fhir/R4/Bot/b1/$execute", "", "https://pinion.example/fhir/R4/Bot/b1/$execute"},
		{"by identifier", "/fhir/R4/Bot/$execute", "identifier=https://example.com/bots|echo", "https://pinion.example/fhir/R4/Bot/$execute?identifier=https://example.com/bots|echo"},
		{"query as sent", "/fhir/R4/Bot/b1/$execute", "a=1&a=2&b=%20", "https://pinion.example/fhir/R4/Bot/b1/$execute?a=1&a=2&b=%20"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := newAsyncJob("https://pinion.example/", &bus.Request{Path: tc.path, RawQuery: tc.rawQuery}, at)
			want := map[string]any{
				"resourceType": "AsyncJob", "status": "accepted",
				"requestTime": "2026-03-04T04:06:07.000000008Z", "request": tc.want,
			}
			sameStored(t, job, want)
		})
	}
	// A caller's job is kept for the caller (and admins).
	job := newAsyncJob("https://pinion.example/", &bus.Request{Path: "/fhir/R4/Bot/b1/$execute",
		Principal: &bus.Principal{Profile: "Practitioner/p1"}}, at)
	sameStored(t, job, map[string]any{
		"resourceType": "AsyncJob", "status": "accepted", "requestTime": "2026-03-04T04:06:07.000000008Z",
		"request": "https://pinion.example/fhir/R4/Bot/b1/$execute",
		"meta":    map[string]any{"security": []any{access.OwnerTag("Practitioner/p1")}},
	})
}

// sameStored fails unless the typed resource is stored as the map the
// code before it built would have been: the same JSON once the
// repository's check has dropped empty values.
func sameStored(t *testing.T, typed any, old map[string]any) {
	t.Helper()
	m, err := resource.Map(typed)
	if err != nil {
		t.Fatal(err)
	}
	fhir.DropEmpty(m)
	fhir.DropEmpty(old)
	got, _ := json.Marshal(m)
	want, _ := json.Marshal(old)
	if string(got) != string(want) {
		t.Fatalf("%s\nwant %s", got, want)
	}
}

func TestJobAccepted(t *testing.T) {
	resp := jobAccepted("https://pinion.example/", "j1")
	const loc = "https://pinion.example/fhir/R4/job/j1/status"
	if resp.Status != 202 || resp.Header["Content-Location"] != loc || resp.Header["Content-Type"] != bus.FHIRContentType {
		t.Fatalf("%d %v", resp.Status, resp.Header)
	}
	const body = `{"resourceType":"OperationOutcome","id":"accepted","issue":[{"severity":"information","code":"informational","details":{"text":"Accepted"},"diagnostics":"` + loc + `"}]}`
	if string(resp.Body) != body {
		t.Fatalf("%s\nwant %s", resp.Body, body)
	}
}

func TestCompleteJob(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("EST", -5*3600))
	text := func(status int, ct, body string) *bus.Response {
		return &bus.Response{Status: status, Header: map[string]string{"Content-Type": ct}, Body: []byte(body)}
	}
	responseBody := func(s string) map[string]any { return map[string]any{"name": "responseBody", "valueString": s} }
	outcome := func(oo fhir.OperationOutcome) map[string]any {
		o := map[string]any{"resourceType": "OperationOutcome", "issue": []any{}}
		if oo.ID != "" {
			o["id"] = oo.ID
		}
		var issues []any
		for _, i := range oo.Issue {
			issues = append(issues, map[string]any{"severity": i.Severity, "code": i.Code, "details": map[string]any{"text": i.Details.Text}})
		}
		o["issue"] = issues
		return map[string]any{"name": "outcome", "resource": o}
	}
	outcomeOf := func(e *fhir.Error) map[string]any { return outcome(e.Outcome) }
	cases := []struct {
		name   string
		resp   *bus.Response
		status string
		param  map[string]any
	}{
		{"text", text(200, "text/plain; charset=utf-8", "done later"), "completed", responseBody("done later")},
		{"json", text(200, bus.JSONContentType, `{"a":1}`), "completed", responseBody(`{"a":1}`)},
		{"resource", text(200, bus.FHIRContentType, `{"resourceType":"Patient","id":"1"}`), "completed", responseBody(`{"resourceType":"Patient","id":"1"}`)},
		{"ok outcome", bus.OK(), "completed", outcome(fhir.AllOK())},
		{"bot's error", bus.Outcome(fhir.BadRequest("no luck")), "error", outcomeOf(fhir.BadRequest("no luck"))},
		{"not found", bus.Outcome(fhir.NotFound()), "error", outcomeOf(fhir.NotFound())},
		{"plain failure", bus.Outcome(fhir.AsError(errors.New("disk on fire"))), "error", outcomeOf(fhir.Internal())},
		{"outcome as plain JSON is text", text(400, bus.JSONContentType, `{"resourceType":"OperationOutcome"}`), "error", responseBody(`{"resourceType":"OperationOutcome"}`)},
		{"fhir type, bad JSON", text(400, bus.FHIRContentType, `{"resourceType":`), "error", responseBody(`{"resourceType":`)},
		{"fhir JSON array", text(200, bus.FHIRContentType, `[1]`), "completed", responseBody(`[1]`)},
		{"error as text", text(500, "text/plain", "boom"), "error", responseBody("boom")},
		{"399 completes", text(399, "text/plain", "odd"), "completed", responseBody("odd")},
		{"no body", &bus.Response{Status: 200}, "completed", responseBody("")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var j resource.AsyncJob
			if err := json.Unmarshal([]byte(`{"resourceType":"AsyncJob","id":"j1","status":"accepted","requestTime":"earlier","identifier":[{"value":"mine"}]}`), &j); err != nil {
				t.Fatal(err)
			}
			completeJob(&j, tc.resp, at)
			want := map[string]any{
				"resourceType": "AsyncJob", "id": "j1", "requestTime": "earlier",
				"identifier": []any{map[string]any{"value": "mine"}}, // a member's, kept
				"status":     tc.status, "transactionTime": "2026-03-04T10:06:07Z",
				"output": map[string]any{"resourceType": "Parameters", "parameter": []any{tc.param}},
			}
			sameStored(t, &j, want)
		})
	}
}

func TestQuerySuffix(t *testing.T) {
	if got := querySuffix(&bus.Request{}); got != "" {
		t.Errorf("no query: %q", got)
	}
	if got := querySuffix(&bus.Request{RawQuery: "a=1"}); got != "?a=1" {
		t.Errorf("%q", got)
	}
}
