package botexec

import (
	"context"
	"net/url"
	"reflect"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
)

// A bot's call is sent as the principal it runs as, one deeper in the
// chain of bots, with a body's content type defaulting to FHIR JSON.
func TestHostRequest(t *testing.T) {
	runAs := &bus.Principal{Profile: "Bot/b1", Project: "p1", Membership: "m1"}
	h := &host{principal: runAs, requestID: "req-1", depth: 2}
	cases := []struct {
		name, method, path, body, contentType string
		subject                               string
		params                                map[string]string
		query                                 url.Values
		wantType                              string
	}{
		{name: "read", method: "GET", path: "Patient/123", subject: bus.SubjectOf("GET", "/fhir/R4/:type/:id"),
			params: map[string]string{"type": "Patient", "id": "123"}, query: url.Values{}, wantType: ""},
		{name: "search", method: "GET", path: "Patient?family=Smith&_count=2", subject: bus.SubjectOf("GET", "/fhir/R4/:type"),
			params: map[string]string{"type": "Patient"}, query: url.Values{"family": {"Smith"}, "_count": {"2"}}, wantType: ""},
		{name: "create", method: "POST", path: "Patient", body: `{"resourceType":"Patient"}`, subject: bus.SubjectOf("POST", "/fhir/R4/:type"),
			params: map[string]string{"type": "Patient"}, query: url.Values{}, wantType: "application/fhir+json"},
		{name: "create, type given", method: "POST", path: "Patient", body: `{}`, contentType: "application/json", subject: bus.SubjectOf("POST", "/fhir/R4/:type"),
			params: map[string]string{"type": "Patient"}, query: url.Values{}, wantType: "application/json"},
		{name: "no body, no type", method: "POST", path: "Bot/b2/$execute", subject: bus.SubjectOf("POST", "/fhir/R4/Bot/:id/$execute"),
			params: map[string]string{"id": "b2"}, query: url.Values{}, wantType: ""},
		{name: "bot runs a bot", method: "POST", path: "Bot/b2/$execute", body: "hi", contentType: "text/plain", subject: bus.SubjectOf("POST", "/fhir/R4/Bot/:id/$execute"),
			params: map[string]string{"id": "b2"}, query: url.Values{}, wantType: "text/plain"},
		{name: "method in lower case", method: "get", path: "Patient/123", subject: bus.SubjectOf("GET", "/fhir/R4/:type/:id"),
			params: map[string]string{"type": "Patient", "id": "123"}, query: url.Values{}, wantType: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			subject, req, ok := h.request(tc.method, tc.path, []byte(tc.body), tc.contentType)
			if !ok {
				t.Fatal("no route")
			}
			if subject != tc.subject {
				t.Fatalf("subject %q, want %q", subject, tc.subject)
			}
			if req.Method != tc.method || string(req.Body) != tc.body || req.Header["Content-Type"] != tc.wantType || len(req.Header) != 1 {
				t.Fatalf("%s %q %v", req.Method, req.Body, req.Header)
			}
			if !reflect.DeepEqual(req.Params, tc.params) || !reflect.DeepEqual(req.Query, tc.query) {
				t.Fatalf("params %v query %v, want %v %v", req.Params, req.Query, tc.params, tc.query)
			}
			if req.Principal != runAs || req.RequestID != "req-1" || req.BotDepth != 2 {
				t.Fatalf("%+v %q %d", req.Principal, req.RequestID, req.BotDepth)
			}
		})
	}
	// The path and query as the bot wrote them.
	_, req, _ := h.request("GET", "Patient/123", nil, "")
	if req.Path != "/fhir/R4/Patient/123" || req.RawQuery != "" {
		t.Fatalf("%q %q", req.Path, req.RawQuery)
	}
	_, req, _ = h.request("GET", "Patient?name=a%20b", nil, "")
	if req.RawQuery != "name=a%20b" {
		t.Fatalf("%q", req.RawQuery)
	}
}

// A call to no FHIR route is answered 404 by the host itself, without a
// trip over the bus (this host has no connection to make one with).
func TestHostRequestNoRoute(t *testing.T) {
	h := &host{principal: &bus.Principal{Project: "p1"}}
	cases := []struct{ method, path string }{
		{"TRACE", "Patient"},
		{"GET", "Patient?a=%zz"},
		{"DELETE", "Patient"},
		{"GET", "Patient/1/_history/2/extra"},
	}
	for _, tc := range cases {
		if _, _, ok := h.request(tc.method, tc.path, nil, ""); ok {
			t.Errorf("%s %s: routed", tc.method, tc.path)
		}
		status, ct, body, err := h.Request(context.Background(), tc.method, tc.path, nil, "")
		const want = `{"resourceType":"OperationOutcome","id":"not-found","issue":[{"severity":"error","code":"not-found","details":{"text":"Not found"}}]}`
		if err != nil || status != 404 || ct != bus.FHIRContentType || string(body) != want {
			t.Errorf("%s %s: %d %q %s %v", tc.method, tc.path, status, ct, body, err)
		}
	}
}
