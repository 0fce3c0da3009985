package botexec

import (
	"context"
	"encoding/json"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

func TestCheckBotDepth(t *testing.T) {
	for depth := 0; depth < maxBotDepth; depth++ {
		if err := checkBotDepth(depth); err != nil {
			t.Errorf("depth %d refused: %v", depth, err)
		}
	}
	for _, depth := range []int{maxBotDepth, maxBotDepth + 1, 100} {
		wantError(t, checkBotDepth(depth), 400, "Bots may run bots at most 4 deep")
	}
}

// execute refuses before any lookup: an anonymous caller, then a chain of
// bots too deep. (The Service has nothing to look anything up with.)
func TestExecuteRefusals(t *testing.T) {
	caller := &bus.Principal{Project: "p1", Profile: "Practitioner/1"}
	cases := []struct {
		name   string
		r      *bus.Request
		status int
		text   string
	}{
		{"anonymous", &bus.Request{Method: "POST"}, 401, "Unauthorized"},
		{"anonymous and too deep", &bus.Request{Method: "POST", BotDepth: maxBotDepth}, 401, "Unauthorized"},
		{"too deep", &bus.Request{Method: "POST", Principal: caller, BotDepth: maxBotDepth}, 400, "Bots may run bots at most 4 deep"},
		{"too deep, async", &bus.Request{Method: "POST", Principal: caller, BotDepth: maxBotDepth, Header: map[string]string{"Prefer": "respond-async"}}, 400, "Bots may run bots at most 4 deep"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := (&Service{}).execute(context.Background(), tc.r)
			if resp != nil {
				t.Fatalf("answered %d", resp.Status)
			}
			wantError(t, err, tc.status, tc.text)
		})
	}
}

func TestBotTimeout(t *testing.T) {
	cases := []struct {
		setting string
		want    time.Duration
	}{
		{"", 10 * time.Second},
		{"0", 10 * time.Second},
		{"-5", 10 * time.Second},
		{"1", time.Second},
		{"30", 30 * time.Second},
		{"900", 900 * time.Second},
		{"901", 900 * time.Second},
		{"100000", 900 * time.Second},
		{"1.5", 10 * time.Second},
		{"1e2", 10 * time.Second},
		{"abc", 10 * time.Second},
		{"99999999999999999999", 10 * time.Second},
	}
	for _, tc := range cases {
		b := &bot{Timeout: json.Number(tc.setting)}
		if got := b.timeout(); got != tc.want {
			t.Errorf("timeout %q: %v, want %v", tc.setting, got, tc.want)
		}
	}
}

func TestDecodeBot(t *testing.T) {
	t.Run("fields", func(t *testing.T) {
		j := `{"resourceType":"Bot","id":"json-id","name":"echo","runAsUser":true,"timeout":30,` +
			`"executableCode":{"contentType":"application/javascript","url":"Binary/b1"},"sourceCode":{"url":"Binary/s1"},` +
			`"auditEventTrigger":"on-error","auditEventDestination":["log"]}`
		b, err := decodeBot("b1", "p1", []byte(j))
		if err != nil {
			t.Fatal(err)
		}
		want := bot{ID: "b1", Project: "p1", Name: "echo", RunAsUser: true, Timeout: "30",
			AuditTrigger: "on-error", AuditDestination: []string{"log"}}
		want.Code.URL = "Binary/b1"
		if !reflect.DeepEqual(b, want) {
			t.Fatalf("%+v, want %+v", b, want)
		}
	})
	t.Run("defaults", func(t *testing.T) {
		b, err := decodeBot("b1", "p1", []byte(`{"resourceType":"Bot"}`))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(b, bot{ID: "b1", Project: "p1"}) || b.timeout() != 10*time.Second {
			t.Fatalf("%+v", b)
		}
	})
	for _, bad := range []string{``, `{`, `[]`, `{"runAsUser":"yes"}`, `{"executableCode":"Binary/1"}`} {
		t.Run("malformed "+bad, func(t *testing.T) {
			if b, err := decodeBot("b1", "p1", []byte(bad)); err == nil {
				t.Fatalf("decoded %+v", b)
			}
		})
	}
}

func TestBotTarget(t *testing.T) {
	cases := []struct {
		name          string
		params        map[string]string
		query         url.Values
		id, ident     string
		status        int
		statusMessage string
	}{
		{name: "id", params: map[string]string{"id": "b1"}, id: "b1"},
		{name: "id wins over identifier", params: map[string]string{"id": "b1"}, query: url.Values{"identifier": {"s|v"}}, id: "b1"},
		{name: "identifier", query: url.Values{"identifier": {"https://example.com/bots|echo"}}, ident: "https://example.com/bots|echo"},
		{name: "bare code", query: url.Values{"identifier": {"echo"}}, ident: "echo"},
		{name: "first identifier", query: url.Values{"identifier": {"a", "b"}}, ident: "a"},
		{name: "empty identifier", query: url.Values{"identifier": {""}}, status: 400, statusMessage: "Must specify bot ID or identifier."},
		{name: "neither", query: url.Values{"a": {"1"}}, status: 400, statusMessage: "Must specify bot ID or identifier."},
		{name: "nothing at all", status: 400, statusMessage: "Must specify bot ID or identifier."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, ident, err := botTarget(&bus.Request{Params: tc.params, Query: tc.query})
			if tc.status != 0 {
				wantError(t, err, tc.status, tc.statusMessage)
				return
			}
			if err != nil || id != tc.id || ident != tc.ident {
				t.Fatalf("%q %q %v, want %q %q", id, ident, err, tc.id, tc.ident)
			}
		})
	}
}

// An identifier finds one bot, or none (404), or too many (412): never an
// arbitrary pick.
func TestIdentifierHit(t *testing.T) {
	res := func(ids ...string) []*repo.Resource {
		var out []*repo.Resource
		for _, id := range ids {
			out = append(out, &repo.Resource{Type: "Bot", ID: id})
		}
		return out
	}
	cases := []struct {
		name   string
		found  []*repo.Resource
		id     string
		status int
		text   string
	}{
		{"none", nil, "", 404, "Not found"},
		{"one", res("b1"), "b1", 0, ""},
		{"two", res("b1", "b2"), "", 412, "Multiple resources found matching condition"},
		{"three", res("b1", "b2", "b3"), "", 412, "Multiple resources found matching condition"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := identifierHitOf(tc.found).answer()
			if tc.status != 0 {
				fe := wantError(t, err, tc.status, tc.text)
				if want := map[int]string{404: "not-found", 412: "multiple-matches"}[tc.status]; fe.Outcome.ID != want {
					t.Fatalf("outcome id %q, want %q", fe.Outcome.ID, want)
				}
				return
			}
			if err != nil || id != tc.id {
				t.Fatalf("%q %v, want %q", id, err, tc.id)
			}
		})
	}
}

func TestCodeBinary(t *testing.T) {
	cases := []struct {
		url, id string
		text    string
	}{
		{"Binary/abc", "abc", ""},
		{"Binary/abc/_history/3", "abc", ""},
		{"https://example.com/fhir/R4/Binary/abc", "abc", ""},
		{"/Binary/abc", "abc", ""},
		{"", "", "No executable code"},
		{"Patient/abc", "", "Executable code is not a Binary"},
		{"binary/abc", "", "Executable code is not a Binary"},
		{"Binary", "", "Executable code is not a Binary"},
		{"Binary/", "", "Executable code is not a Binary"},
		{"/abc", "", "Executable code is not a Binary"},
		{"urn:uuid:9b7b9c1e-0000-4000-8000-000000000000", "", "Executable code is not a Binary"},
		// What the web app's editor writes back after reading a signed URL.
		{"https://pinion.example/storage/abc/v1?Expires=1&Signature=s", "abc", ""},
		{"https://elsewhere.example/storage/abc/v1?Expires=1&Signature=s", "", "Executable code is not a Binary"},
	}
	for _, tc := range cases {
		id, err := codeBinary("https://pinion.example/", tc.url)
		if tc.text != "" {
			wantError(t, err, 400, tc.text)
			continue
		}
		if err != nil || id != tc.id {
			t.Errorf("%q: %q %v, want %q", tc.url, id, err, tc.id)
		}
	}
}

func TestProgramSource(t *testing.T) {
	cases := []struct {
		name, binary, want string
		status             int // 0: the source; 500: not a fhir.Error
		text               string
	}{
		{name: "source", binary: `{"resourceType":"Binary","data":"ZXhwb3J0cy5oYW5kbGVyID0gYXN5bmMgKCkgPT4gMTs="}`, want: "exports.handler = async () => 1;"},
		{name: "no data", binary: `{"resourceType":"Binary"}`, want: ""},
		{name: "not base64", binary: `{"data":"%%%"}`, status: 400, text: "Executable code is not valid base64"},
		{name: "url-safe base64", binary: `{"data":"Pz8_"}`, status: 400, text: "Executable code is not valid base64"},
		{name: "unpadded base64", binary: `{"data":"YQ"}`, status: 400, text: "Executable code is not valid base64"},
		{name: "data of the wrong type", binary: `{"data":1}`, status: 500},
		{name: "not JSON", binary: `{`, status: 500},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src, err := programSource([]byte(tc.binary))
			switch tc.status {
			case 0:
				if err != nil || src != tc.want {
					t.Fatalf("%q %v, want %q", src, err, tc.want)
				}
			case 500:
				// Not the caller's fault: it reaches them as a 500.
				if err == nil || fhir.AsError(err).Status != 500 {
					t.Fatalf("%q %v, want a plain error", src, err)
				}
			default:
				wantError(t, err, tc.status, tc.text)
			}
		})
	}
}

func TestRunsAsCaller(t *testing.T) {
	cases := []struct {
		name      string
		runAsUser bool
		caller    string
		want      bool
	}{
		{"runAsUser, own project", true, "p1", true},
		{"runAsUser, another project", true, "p2", false},
		{"own membership", false, "p1", false},
		{"own membership, another project", false, "p2", false},
	}
	for _, tc := range cases {
		b := &bot{ID: "b1", Project: "p1", RunAsUser: tc.runAsUser}
		if got := runsAsCaller(b, &bus.Principal{Project: tc.caller}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestWithoutMembership(t *testing.T) {
	b := &bot{ID: "b1", Project: "p1"}
	t.Run("caller of the project", func(t *testing.T) {
		caller := &bus.Principal{User: "User/u1", Profile: "Practitioner/1", Project: "p1", Membership: "m1", Admin: true, SuperAdmin: true, AccessPolicy: true}
		p, err := withoutMembership(b, caller)
		if err != nil {
			t.Fatal(err)
		}
		want := *caller
		want.SuperAdmin = false
		if *p != want {
			t.Fatalf("%+v, want %+v", *p, want)
		}
		if !caller.SuperAdmin {
			t.Fatal("the caller's principal was changed")
		}
	})
	t.Run("caller of another project", func(t *testing.T) {
		p, err := withoutMembership(b, &bus.Principal{Project: "p2", SuperAdmin: true})
		if p != nil {
			t.Fatalf("runs as %+v", p)
		}
		wantError(t, err, 403, "Forbidden")
	})
}

func TestMemberPrincipal(t *testing.T) {
	m := &session.Membership{Project: "p1", User: "Bot/b1", Profile: "Bot/b1", Admin: true, SuperAdmin: true, Active: true, AccessPolicy: true}
	got := memberPrincipal("m1", m)
	want := bus.Principal{User: "Bot/b1", Profile: "Bot/b1", Project: "p1", Membership: "m1", Admin: true, AccessPolicy: true}
	if *got != want {
		t.Fatalf("%+v, want %+v", *got, want)
	}
}

// A runAsUser bot run from its own project acts as its caller, held to the
// project, without looking up its membership (the Service has none to look
// it up in).
func TestRunAsCallerNeedsNoLookup(t *testing.T) {
	caller := &bus.Principal{Profile: "Practitioner/1", Project: "p1", SuperAdmin: true, Admin: true}
	p, err := (&Service{}).runAs(context.Background(), &bot{ID: "b1", Project: "p1", RunAsUser: true}, caller, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p == caller || p.SuperAdmin || !p.Admin || p.Profile != "Practitioner/1" || p.Project != "p1" {
		t.Fatalf("%+v", p)
	}
}

func TestConfined(t *testing.T) {
	for _, sa := range []bool{false, true} {
		p := &bus.Principal{User: "User/1", Project: "p1", Admin: true, SuperAdmin: sa}
		c := confined(p)
		if c == p || c.SuperAdmin || c.User != "User/1" || c.Project != "p1" || !c.Admin || p.SuperAdmin != sa {
			t.Errorf("confined(%+v) = %+v", *p, *c)
		}
	}
}

func TestProjectSecrets(t *testing.T) {
	cases := []struct {
		name, project string
		want          map[string]any
	}{
		{"secrets by name", `{"secret":[{"name":"KEY","valueString":"k"},{"name":"PORT","valueInteger":8443}]}`,
			map[string]any{"KEY": map[string]any{"name": "KEY", "valueString": "k"}, "PORT": map[string]any{"name": "PORT", "valueInteger": float64(8443)}}},
		{"nameless left out", `{"secret":[{"valueString":"k"},{"name":"","valueString":"e"},{"name":7,"valueString":"n"}]}`, map[string]any{}},
		{"last of a name wins", `{"secret":[{"name":"A","valueString":"1"},{"name":"A","valueString":"2"}]}`,
			map[string]any{"A": map[string]any{"name": "A", "valueString": "2"}}},
		{"no secrets", `{"resourceType":"Project"}`, map[string]any{}},
		{"secret not a list", `{"secret":"x"}`, map[string]any{}},
		{"an entry not an object", `{"secret":[5,{"name":"A"}]}`, map[string]any{"A": map[string]any{"name": "A"}}},
		{"not JSON", `{`, map[string]any{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := projectSecrets([]byte(tc.project))
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%v %v, want %v", got, err, tc.want)
			}
		})
	}
}

func TestTraceID(t *testing.T) {
	const id = "5f3c1e1a-9a9e-4d1c-8a51-0e7e3f7a2b10"
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	cases := []struct {
		name, header, trace, want string
	}{
		{"caller's UUID", id, traceparent, id},
		{"caller's UUID in capitals", "5F3C1E1A-9A9E-4D1C-8A51-0E7E3F7A2B10", "", "5F3C1E1A-9A9E-4D1C-8A51-0E7E3F7A2B10"},
		{"not a UUID: the traceparent", "not-a-uuid", traceparent, traceparent},
		{"no header: the traceparent", "", traceparent, traceparent},
		{"shortest traceparent taken", "", traceparent[:35], traceparent[:35]},
	}
	for _, tc := range cases {
		r := &bus.Request{Header: map[string]string{"X-Trace-Id": tc.header}, Trace: tc.trace}
		if got := traceID(r); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// Neither: a new UUID each time.
	for _, trace := range []string{"", traceparent[:34]} {
		r := &bus.Request{Header: map[string]string{"X-Trace-Id": "nope"}, Trace: trace}
		a, b := traceID(r), traceID(r)
		if _, err := uuid.Parse(a); err != nil || a == b {
			t.Errorf("trace %q: %q and %q, want two new UUIDs", trace, a, b)
		}
	}
}

func TestLowerHeaders(t *testing.T) {
	got := lowerHeaders(map[string]string{
		"Content-Type": "text/plain", "X-Medplum": "extended", "Prefer": "respond-async",
		"Authorization": "Bearer secret", "AUTHORIZATION": "Basic x", "cookie": "sid=1",
		// The gateway's own, for the bot's membership entry: not the caller's.
		session.AppliedHeader: "42",
	})
	want := map[string]string{"content-type": "text/plain", "x-medplum": "extended", "prefer": "respond-async"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
	if got := lowerHeaders(nil); got == nil || len(got) != 0 {
		t.Fatalf("nil headers: %v", got)
	}
}

func TestBotEvent(t *testing.T) {
	const trace = "5f3c1e1a-9a9e-4d1c-8a51-0e7e3f7a2b10"
	b := &bot{ID: "b1", Project: "p1", Name: "echo"}
	secrets := map[string]any{"KEY": map[string]any{"name": "KEY", "valueString": "k"}}
	r := &bus.Request{
		Method:    "POST",
		Header:    map[string]string{"Content-Type": "text/plain; charset=utf-8", "X-Trace-Id": trace, "Authorization": "Bearer t"},
		Principal: &bus.Principal{Profile: "Practitioner/1", Project: "p1"},
	}
	ev := requestExecution(b, r, nil, nil, time.Now()).event(secrets)
	want := sandbox.Event{
		Bot:       map[string]any{"reference": "Bot/b1", "display": "echo"},
		Requester: map[string]any{"reference": "Practitioner/1"},
		// As the caller sent it, parameters and all.
		ContentType: "text/plain; charset=utf-8",
		Secrets:     secrets,
		TraceID:     trace,
		Headers:     map[string]string{"content-type": "text/plain; charset=utf-8", "x-trace-id": trace},
	}
	if !reflect.DeepEqual(ev, want) {
		t.Fatalf("%+v\nwant %+v", ev, want)
	}
}

func TestBotResponse(t *testing.T) {
	outcome := func(id, code, text string) *fhir.OperationOutcome {
		return &fhir.OperationOutcome{ResourceType: "OperationOutcome", ID: id, Issue: []fhir.Issue{{Severity: "error", Code: code, Details: &fhir.Text{Text: text}}}}
	}
	forbidden := `{"resourceType":"OperationOutcome","id":"forbidden","issue":[{"severity":"error","code":"forbidden","details":{"text":"Nope"}}]}`
	const okOutcome = `{"resourceType":"OperationOutcome","id":"ok","issue":[{"severity":"information","code":"informational","details":{"text":"All OK"}}]}`
	cases := []struct {
		name        string
		res         sandbox.Result
		requestType string
		status      int
		contentType string
		body        string
	}{
		// A failed run answers with its outcome.
		{name: "thrown error", res: sandbox.Result{Err: &sandbox.BotError{Message: "Invalid boolean"}}, status: 400, contentType: bus.FHIRContentType,
			body: `{"resourceType":"OperationOutcome","issue":[{"severity":"error","code":"invalid","details":{"text":"Invalid boolean"}}]}`},
		{name: "thrown outcome", res: sandbox.Result{Err: &sandbox.BotError{Message: "Nope", Outcome: outcome("forbidden", "forbidden", "Nope")}}, status: 403, contentType: bus.FHIRContentType, body: forbidden},
		{name: "limit", res: sandbox.Result{Err: &sandbox.BotError{Message: "Bot timed out", Limit: sandbox.LimitTimeout}}, status: 400, contentType: bus.FHIRContentType,
			body: `{"resourceType":"OperationOutcome","issue":[{"severity":"error","code":"invalid","details":{"text":"Bot timed out"}}]}`},
		{name: "error wins over a value", res: sandbox.Result{Kind: sandbox.KindString, Text: "x", Err: &sandbox.BotError{Message: "late"}}, status: 400, contentType: bus.FHIRContentType,
			body: `{"resourceType":"OperationOutcome","issue":[{"severity":"error","code":"invalid","details":{"text":"late"}}]}`},

		{name: "undefined", res: sandbox.Result{Kind: sandbox.KindUndefined}, status: 200, contentType: bus.FHIRContentType, body: okOutcome},

		// A Binary is its bytes, under its own content type.
		{name: "binary", res: sandbox.Result{Kind: sandbox.KindResource, ResourceType: "Binary", JSON: json.RawMessage(`{"resourceType":"Binary","contentType":"text/csv","data":"YSxiCjEsMgo="}`)},
			status: 200, contentType: "text/csv", body: "a,b\n1,2\n"},
		{name: "binary without content type", res: sandbox.Result{Kind: sandbox.KindResource, ResourceType: "Binary", JSON: json.RawMessage(`{"resourceType":"Binary","data":"AAE="}`)},
			status: 200, contentType: "application/octet-stream", body: "\x00\x01"},
		{name: "binary without data", res: sandbox.Result{Kind: sandbox.KindResource, ResourceType: "Binary", JSON: json.RawMessage(`{"resourceType":"Binary","contentType":"text/plain"}`)},
			status: 200, contentType: "text/plain", body: ""},
		{name: "binary with bad data", res: sandbox.Result{Kind: sandbox.KindResource, ResourceType: "Binary", JSON: json.RawMessage(`{"resourceType":"Binary","data":"%%"}`)},
			status: 400, contentType: bus.FHIRContentType,
			body: `{"resourceType":"OperationOutcome","issue":[{"severity":"error","code":"invalid","details":{"text":"Bot returned a Binary with invalid data"}}]}`},

		// A returned outcome keeps the status it stands for when an error.
		{name: "error outcome", res: sandbox.Result{Kind: sandbox.KindResource, ResourceType: "OperationOutcome", JSON: json.RawMessage(forbidden)}, status: 403, contentType: bus.FHIRContentType, body: forbidden},
		{name: "not-found outcome", res: sandbox.Result{Kind: sandbox.KindResource, ResourceType: "OperationOutcome", JSON: json.RawMessage(`{"resourceType":"OperationOutcome","id":"not-found","issue":[]}`)},
			status: 404, contentType: bus.FHIRContentType, body: `{"resourceType":"OperationOutcome","id":"not-found","issue":[]}`},
		{name: "exception outcome", res: sandbox.Result{Kind: sandbox.KindResource, ResourceType: "OperationOutcome", JSON: json.RawMessage(`{"resourceType":"OperationOutcome","issue":[{"severity":"error","code":"exception"}]}`)},
			status: 500, contentType: bus.FHIRContentType, body: `{"resourceType":"OperationOutcome","issue":[{"severity":"error","code":"exception"}]}`},
		{name: "outcome without id is a 400", res: sandbox.Result{Kind: sandbox.KindResource, ResourceType: "OperationOutcome", JSON: json.RawMessage(`{"resourceType":"OperationOutcome","issue":[{"severity":"information","code":"informational"}]}`)},
			status: 400, contentType: bus.FHIRContentType, body: `{"resourceType":"OperationOutcome","issue":[{"severity":"information","code":"informational"}]}`},
		{name: "ok outcome", res: sandbox.Result{Kind: sandbox.KindResource, ResourceType: "OperationOutcome", JSON: json.RawMessage(okOutcome)}, status: 200, contentType: bus.FHIRContentType, body: okOutcome},
		{name: "accepted outcome", res: sandbox.Result{Kind: sandbox.KindResource, ResourceType: "OperationOutcome", JSON: json.RawMessage(`{"resourceType":"OperationOutcome","id":"accepted","issue":[]}`)},
			status: 200, contentType: bus.FHIRContentType, body: `{"resourceType":"OperationOutcome","id":"accepted","issue":[]}`},
		{name: "outcome of the wrong shape", res: sandbox.Result{Kind: sandbox.KindResource, ResourceType: "OperationOutcome", JSON: json.RawMessage(`{"resourceType":"OperationOutcome","id":5}`)},
			status: 200, contentType: bus.FHIRContentType, body: `{"resourceType":"OperationOutcome","id":5}`},

		{name: "resource", res: sandbox.Result{Kind: sandbox.KindResource, ResourceType: "Patient", JSON: json.RawMessage(`{"resourceType":"Patient","id":"1"}`)},
			status: 200, contentType: bus.FHIRContentType, body: `{"resourceType":"Patient","id":"1"}`},
		{name: "hl7", res: sandbox.Result{Kind: sandbox.KindHL7, Text: "MSH|^~\\&|A\rMSA|AA|1"}, requestType: "application/json",
			status: 200, contentType: "x-application/hl7-v2+er7; charset=utf-8", body: "MSH|^~\\&|A\rMSA|AA|1"},

		// A string goes back as the caller's text or HL7, else as JSON text, unquoted.
		{name: "string to text", res: sandbox.Result{Kind: sandbox.KindString, Text: "hé", JSON: json.RawMessage(`"hé"`)}, requestType: "text/plain",
			status: 200, contentType: "text/plain; charset=utf-8", body: "hé"},
		{name: "string to hl7", res: sandbox.Result{Kind: sandbox.KindString, Text: "MSH|x", JSON: json.RawMessage(`"MSH|x"`)}, requestType: sandbox.HL7ContentType,
			status: 200, contentType: "x-application/hl7-v2+er7; charset=utf-8", body: "MSH|x"},
		{name: "string to json", res: sandbox.Result{Kind: sandbox.KindString, Text: "hi", JSON: json.RawMessage(`"hi"`)}, requestType: "application/json",
			status: 200, contentType: bus.JSONContentType, body: "hi"},
		{name: "string to form", res: sandbox.Result{Kind: sandbox.KindString, Text: "hi", JSON: json.RawMessage(`"hi"`)}, requestType: "application/x-www-form-urlencoded",
			status: 200, contentType: bus.JSONContentType, body: "hi"},
		{name: "string to GET", res: sandbox.Result{Kind: sandbox.KindString, Text: "hi", JSON: json.RawMessage(`"hi"`)}, requestType: "",
			status: 200, contentType: bus.JSONContentType, body: "hi"},

		{name: "null", res: sandbox.Result{Kind: sandbox.KindNull, JSON: json.RawMessage(`null`)}, status: 200, contentType: bus.JSONContentType, body: ""},
		{name: "number", res: sandbox.Result{Kind: sandbox.KindNumber, Text: "42", JSON: json.RawMessage(`42`)}, requestType: "text/plain", status: 200, contentType: bus.JSONContentType, body: "42"},
		{name: "boolean", res: sandbox.Result{Kind: sandbox.KindBoolean, Text: "true", JSON: json.RawMessage(`true`)}, status: 200, contentType: bus.JSONContentType, body: "true"},
		{name: "object", res: sandbox.Result{Kind: sandbox.KindJSON, JSON: json.RawMessage(`{"a":[1,2]}`)}, requestType: "text/plain", status: 200, contentType: bus.JSONContentType, body: `{"a":[1,2]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := botResponse(&tc.res, tc.requestType)
			if resp.Status != tc.status || resp.Header["Content-Type"] != tc.contentType || string(resp.Body) != tc.body {
				t.Fatalf("%d %q %q\nwant %d %q %q", resp.Status, resp.Header["Content-Type"], resp.Body, tc.status, tc.contentType, tc.body)
			}
		})
	}
}
