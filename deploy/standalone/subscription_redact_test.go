package standalone

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// wsBound opens a subscription socket and binds it to a websocket
// Subscription with a binding token its author asks for.
func wsBound(t *testing.T, author, sub string) *websocket.Conn {
	t.Helper()
	r := do(t, "GET", "fhir/R4/Subscription/"+sub+"/$get-ws-binding-token", author, "", nil)
	expect(t, r, 200)
	var params struct {
		Parameter []struct{ Name, ValueString string } `json:"parameter"`
	}
	if err := json.Unmarshal(r.body, &params); err != nil {
		t.Fatal(err)
	}
	var tok string
	for _, p := range params.Parameter {
		if p.Name == "token" {
			tok = p.ValueString
		}
	}
	c, err := websocket.Dial("ws"+strings.TrimPrefix(base, "http")+"ws/subscriptions-r4", "", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := websocket.JSON.Send(c, map[string]any{"type": "bind-with-token", "payload": map[string]any{"token": tok}}); err != nil {
		t.Fatal(err)
	}
	if m := wsNext(t, c); !strings.Contains(string(m), `"handshake"`) {
		t.Fatalf("binding answered %s", m)
	}
	return c
}

// wsNext is the socket's next message other than a heartbeat.
func wsNext(t *testing.T, c *websocket.Conn) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		var m []byte
		if err := websocket.Message.Receive(c, &m); err != nil {
			t.Fatalf("no message on the socket: %v", err)
		}
		if !strings.Contains(string(m), `"heartbeat"`) {
			return m
		}
	}
}

// wsResource is the changed resource a notification Bundle carries.
func wsResource(t *testing.T, m []byte) map[string]any {
	t.Helper()
	var b struct {
		Entry []struct {
			Resource map[string]any `json:"resource"`
		} `json:"entry"`
	}
	if err := json.Unmarshal(m, &b); err != nil || len(b.Entry) != 2 {
		t.Fatalf("notification %s: want a Bundle of a status and the resource", m)
	}
	return b.Entry[1].Resource
}

// A subscription shows no more than a read by its author does: the fields
// the author's policy hides are not in its rest-hook bodies nor in its
// WebSocket notifications; an admin's subscription sends them.
func TestSubscriptionRedactsHiddenFields(t *testing.T) {
	pid, su := adminProject(t, "Sub redaction")
	author := policyClient(t, su, pid,
		map[string]any{"resourceType": "Patient", "hiddenFields": []any{"birthDate", "telecom"}},
		map[string]any{"resourceType": "Subscription"})
	admin := projectAdmin(t, su, pid, "sub-redaction-admin@example.com")
	authorHook, adminHook := newHook(t, 200), newHook(t, 200)
	newSubscription(t, author, "Patient", authorHook.srv.URL)
	newSubscription(t, admin, "Patient", adminHook.srv.URL)
	ws := func(tok string) *websocket.Conn {
		r := do(t, "POST", "fhir/R4/Subscription", tok, "application/fhir+json", mustJSON(map[string]any{
			"resourceType": "Subscription", "status": "active", "reason": "ws", "criteria": "Patient",
			"channel": map[string]any{"type": "websocket"},
		}))
		expect(t, r, 201)
		return wsBound(t, tok, r.json(t)["id"].(string))
	}
	authorWS, adminWS := ws(author), ws(admin)

	r := do(t, "POST", "fhir/R4/Patient", admin, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "Patient", "name": []any{map[string]any{"family": "Hidden"}}, "birthDate": "1970-01-01",
		"telecom": []any{map[string]any{"system": "phone", "value": "555-0100"}},
	}))
	expect(t, r, 201)
	id := r.json(t)["id"].(string)

	check := func(what string, got map[string]any, hidden bool) {
		t.Helper()
		if got["id"] != id || got["name"] == nil {
			t.Fatalf("%s: %v, want Patient %s with its name", what, got, id)
		}
		for _, f := range []string{"birthDate", "telecom"} {
			if _, has := got[f]; has == hidden {
				t.Errorf("%s: %s present %v, want %v", what, f, has, !hidden)
			}
		}
	}
	hookResource := func(h *hook) map[string]any {
		c := h.next(t, 10*time.Second)
		var m map[string]any
		if err := json.Unmarshal(c.body, &m); err != nil {
			t.Fatalf("rest-hook body %s: %v", c.body, err)
		}
		return m
	}
	check("author's rest-hook", hookResource(authorHook), true)
	check("author's notification", wsResource(t, wsNext(t, authorWS)), true)
	check("admin's rest-hook", hookResource(adminHook), false)
	check("admin's notification", wsResource(t, wsNext(t, adminWS)), false)

	// $resend sends the author's view as well.
	expect(t, do(t, "POST", "fhir/R4/Patient/"+id+"/$resend", admin, "application/json", []byte(`{}`)), 200)
	check("author's resent rest-hook", hookResource(authorHook), true)
	check("admin's resent rest-hook", hookResource(adminHook), false)
}

// A bot run by a subscription is given the change as the membership it
// runs as may read it: its own policy's hidden fields are not in its input.
func TestSubscriptionBotInputRedacted(t *testing.T) {
	pid, su := adminProject(t, "Sub bot redaction")
	r := do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "bot policy", "meta": map[string]any{"project": pid},
		"resource": []any{
			map[string]any{"resourceType": "Patient", "hiddenFields": []any{"birthDate"}},
			map[string]any{"resourceType": "Basic"},
		}}))
	expect(t, r, 201)
	policy := map[string]any{"reference": "AccessPolicy/" + r.json(t)["id"].(string)}
	// The bot records whether its input had a birthDate and a name.
	bot := newBot(t, su, pid, "redacted input", "", `exports.handler = async (medplum, event) => {
		const p = event.input;
		await medplum.createResource({resourceType: 'Basic', code: {text: 'seen'},
			identifier: [{system: 'seen', value: p.id + ':' + ('birthDate' in p) + ':' + ('name' in p)}]});
	};`, "redacted.js", "accessPolicy", policy)
	r = do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "writer"}))
	expect(t, r, 201)
	tok := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	sub := newSubscription(t, tok, "Patient", "Bot/"+bot)
	r = do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "Patient", "name": []any{map[string]any{"family": "Botread"}}, "birthDate": "1970-01-01"}))
	expect(t, r, 201)
	want := r.json(t)["id"].(string) + ":false:true"
	seen := waitUntil(10*time.Second, func() bool {
		r := do(t, "GET", "fhir/R4/Basic?identifier=seen|"+want, su, "", nil)
		expect(t, r, 200)
		_, found := bundleOf(t, r)
		return len(found) == 1
	})
	if !seen {
		r = do(t, "GET", "fhir/R4/Basic?_project="+pid, su, "", nil)
		t.Fatalf("the bot never recorded %s; it recorded %s; audit %v", want, r.body, audits(t, sub, 0))
	}
}

// A subscription's criteria cannot read what its author's policy hides,
// or a notification would answer the search the policy refuses: search
// criteria on a hidden field are refused at the write (as the search),
// and every criterion — FHIRPath's included — is matched on the change
// as the author may read it, so a hidden field is absent when matched.
func TestSubscriptionCriteriaCannotReadHiddenFields(t *testing.T) {
	pid, su := adminProject(t, "Sub criteria hidden")
	author := policyClient(t, su, pid,
		map[string]any{"resourceType": "Patient", "hiddenFields": []any{"birthDate"}},
		map[string]any{"resourceType": "Subscription"})
	admin := projectAdmin(t, su, pid, "sub-criteria-admin@example.com")
	for _, criteria := range []string{"Patient?birthdate=gt1980-01-01", "Patient?_filter=birthdate%20gt%201980-01-01", "Patient?name=x&birthdate:missing=false"} {
		r := do(t, "POST", "fhir/R4/Subscription", author, "application/fhir+json", mustJSON(map[string]any{
			"resourceType": "Subscription", "status": "active", "reason": "probe", "criteria": criteria,
			"channel": map[string]any{"type": "rest-hook", "endpoint": "https://hooks.example/probe"},
		}))
		if r.status != 400 || !strings.Contains(string(r.body), "reads a field hidden by your access policy") {
			t.Fatalf("criteria %s: %d %s", criteria, r.status, r.body)
		}
	}

	// FHIRPath criteria name fields freely: on the author's view the
	// hidden birthDate is not there, so only the marker matches; the admin's matches both.
	fhirPath := func(tok string, h *hook) {
		newSubscription(t, tok, "Patient", h.srv.URL, map[string]any{
			"url":         "https://medplum.com/fhir/StructureDefinition/fhir-path-criteria-expression",
			"valueString": "%current.birthDate.exists() or %current.name.family = 'Marker'",
		})
	}
	authorHook, adminHook := newHook(t, 200), newHook(t, 200)
	fhirPath(author, authorHook)
	fhirPath(admin, adminHook)
	family := func(c hookCall) string {
		var m struct {
			Name []struct{ Family string } `json:"name"`
		}
		_ = json.Unmarshal(c.body, &m)
		if len(m.Name) == 0 {
			return ""
		}
		return m.Name[0].Family
	}
	// Deliveries of different changes may overtake each other, so the
	// second patient is written only once the admin's subscription has the
	// first: by then the matcher has judged the first for both.
	for _, p := range []map[string]any{
		{"resourceType": "Patient", "name": []any{map[string]any{"family": "Young"}}, "birthDate": "1990-05-05"},
		{"resourceType": "Patient", "name": []any{map[string]any{"family": "Marker"}}, "birthDate": "1950-01-01"},
	} {
		expect(t, do(t, "POST", "fhir/R4/Patient", admin, "application/fhir+json", mustJSON(p)), 201)
		// The admin's sees each: the criteria work.
		want := p["name"].([]any)[0].(map[string]any)["family"]
		if got := family(adminHook.next(t, 10*time.Second)); got != want {
			t.Fatalf("admin's subscription got %q, want %q", got, want)
		}
	}
	// The author's gets the marker first: the Young birthDate, written
	// before it, did not match.
	if got := family(authorHook.next(t, 10*time.Second)); got != "Marker" {
		t.Fatalf("author's subscription first got %q, want only the marker", got)
	}
}
