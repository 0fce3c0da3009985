package sandbox

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// catchCall runs a medplum call and answers what it resolved to, or how it
// rejected: {m: message, ooe: is an OperationOutcomeError, code: issue code}.
const catchCall = `exports.handler = async (medplum) => {
	try { const r = await (%s); return JSON.stringify({resolved: r === undefined ? 'undefined' : r}) }
	catch (e) { return JSON.stringify({m: e.message, ooe: e instanceof OperationOutcomeError, code: e.outcome && e.outcome.issue[0].code}) }
};`

func runCall(t *testing.T, call string, host Host) string {
	t.Helper()
	res := runBot(t, fmt.Sprintf(catchCall, call), Event{}, host, Limits{})
	mustSucceed(t, res)
	return res.Text
}

// Calls the client refuses itself: they reject with a 400 outcome and never
// reach the host.
func TestClientRefusesBadArguments(t *testing.T) {
	param := func(name string) string {
		return `{"m":"The \"` + name + `\" parameter cannot be null, undefined, or an empty string","ooe":true,"code":"invalid"}`
	}
	tests := []struct {
		name string
		call string
		want string
	}{
		{"createResource without resourceType", `medplum.createResource({id: '1'})`, `{"m":"Missing resourceType","ooe":true,"code":"invalid"}`},
		{"createResource of null", `medplum.createResource(null)`, `{"m":"Missing resourceType","ooe":true,"code":"invalid"}`},
		{"updateResource without resourceType", `medplum.updateResource({id: '1'})`, `{"m":"Missing resourceType","ooe":true,"code":"invalid"}`},
		{"updateResource without id", `medplum.updateResource({resourceType: 'Patient'})`, `{"m":"Missing id","ooe":true,"code":"invalid"}`},
		{"readReference without a type", `medplum.readReference({reference: 'Patient'})`, `{"m":"Invalid reference","ooe":true,"code":"invalid"}`},
		{"readReference with a path", `medplum.readReference({reference: 'Patient/1/_history/2'})`, `{"m":"Invalid reference","ooe":true,"code":"invalid"}`},
		{"readReference of undefined", `medplum.readReference(undefined)`, `{"m":"Invalid reference","ooe":true,"code":"invalid"}`},
		{"readResource empty type", `medplum.readResource('', '1')`, param("resourceType")},
		{"readResource null id", `medplum.readResource('Patient', null)`, param("id")},
		{"deleteResource without id", `medplum.deleteResource('Patient')`, param("id")},
		{"patchResource without type", `medplum.patchResource(undefined, '1', [])`, param("resourceType")},
		{"executeBot with a number", `medplum.executeBot(42, {})`, `{"m":"Bot id or identifier is required","ooe":true,"code":"invalid"}`},
		{"executeBot with an empty id", `medplum.executeBot('', {})`, param("id")},
		{"a URL outside the FHIR base", `medplum.get('https://x.org/auth/me')`, `{"m":"Only FHIR API URLs can be reached from a bot: https://x.org/auth/me","ooe":true,"code":"invalid"}`},
		{"a FHIR-looking path in the query", `medplum.post('https://evil.example/x?u=/fhir/R4/Patient', {})`, `{"m":"Only FHIR API URLs can be reached from a bot: https://evil.example/x?u=/fhir/R4/Patient","ooe":true,"code":"invalid"}`},
		{"almost the FHIR base", `medplum.get('https://x.org/fhir/R4x/Patient')`, `{"m":"Only FHIR API URLs can be reached from a bot: https://x.org/fhir/R4x/Patient","ooe":true,"code":"invalid"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := &fakeHost{}
			if got := runCall(t, tt.call, host); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if calls := host.recorded(); len(calls) != 0 {
				t.Errorf("the host was called: %+v", calls)
			}
		})
	}
}

// What each call asks the host for: ids cannot leave their path segment,
// URLs are reduced to the path under the FHIR base, and bodies carry the
// content type they are written in.
func TestClientRequests(t *testing.T) {
	tests := []struct {
		name string
		call string
		want hostCallRecord
	}{
		{"id with a slash is one segment", `medplum.readResource('Patient', 'a/../b')`, hostCallRecord{"GET", "Patient/a%2F..%2Fb", "", ""}},
		{"type with a query is one segment", `medplum.deleteResource('Patient?_id=1', 'x')`, hostCallRecord{"DELETE", "Patient%3F_id%3D1/x", "", ""}},
		{"updateResource encodes its id", `medplum.updateResource({resourceType: 'Patient', id: 'a b'})`, hostCallRecord{"PUT", "Patient/a%20b", `{"resourceType":"Patient","id":"a b"}`, "application/fhir+json"}},
		{"any host's FHIR URL is this FHIR API", `medplum.get('ftp://other.example/fhir/R4/Patient')`, hostCallRecord{"GET", "Patient", "", ""}},
		{"leading slashes", `medplum.get('//Patient/1')`, hostCallRecord{"GET", "Patient/1", "", ""}},
		{"base path without a slash", `medplum.get('fhir/R4/Patient/1')`, hostCallRecord{"GET", "Patient/1", "", ""}},
		{"a URL inside a query is not the target", `medplum.get('Patient?url=https://x.org/fhir/R4/Patient')`, hostCallRecord{"GET", "Patient?url=https://x.org/fhir/R4/Patient", "", ""}},
		{"put with a content type", `medplum.put('Binary/1', 'raw', 'text/plain')`, hostCallRecord{"PUT", "Binary/1", "raw", "text/plain"}},
		{"patch by URL", `medplum.patch('Patient/1', [{op: 'remove', path: '/active'}])`, hostCallRecord{"PATCH", "Patient/1", `[{"op":"remove","path":"/active"}]`, "application/json-patch+json"}},
		{"delete by URL", `medplum.delete('Patient/1')`, hostCallRecord{"DELETE", "Patient/1", "", ""}},
		{"an Hl7Message body", `medplum.post('Bot/1/$execute', Hl7Message.parse('MSH|^~\\&|A\rPID|1'))`, hostCallRecord{"POST", "Bot/1/$execute", "MSH|^~\\&|A\rPID|1", HL7ContentType}},
		{"an Hl7Message body with a content type", `medplum.executeBot('b', Hl7Message.parse('MSH|^~\\&|A'), 'text/plain')`, hostCallRecord{"POST", "Bot/b/$execute", "MSH|^~\\&|A", "text/plain"}},
		{"null body", `medplum.post('Patient/$x', null)`, hostCallRecord{"POST", "Patient/$x", "", ""}},
		{"search with a leading ?", `medplum.search('Patient', '?name=a')`, hostCallRecord{"GET", "Patient?name=a", "", ""}},
		{"search with no query", `medplum.search('Patient')`, hostCallRecord{"GET", "Patient", "", ""}},
		{"search with pairs", `medplum.search('Patient', [['name', 'a'], ['name', 'b']])`, hostCallRecord{"GET", "Patient?name=a&name=b", "", ""}},
		{"search skips undefined values", `medplum.search('Patient', {name: 'a', gender: undefined})`, hostCallRecord{"GET", "Patient?name=a", "", ""}},
		{"searchOne replaces _count", `medplum.searchOne('Patient', {_count: 50, name: 'a'})`, hostCallRecord{"GET", "Patient?_count=1&name=a", "", ""}},
		{"executeBot identifier without system", `medplum.executeBot({value: 'v'}, 'x', 'text/plain')`, hostCallRecord{"POST", "Bot/$execute?identifier=%7Cv", "x", "text/plain"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := &fakeHost{respond: func(hostCallRecord) (int, string, []byte, error) {
				return 200, "application/fhir+json", []byte(`{}`), nil
			}}
			runCall(t, tt.call, host)
			if calls := host.recorded(); len(calls) != 1 || calls[0] != tt.want {
				t.Errorf("host calls %+v\nwant %+v", calls, tt.want)
			}
		})
	}
}

// How the client reads the host's answers, as @medplum/core does.
func TestClientResponses(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		want        string
	}{
		{"text stays text", 200, "text/plain", "hello", `{"resolved":"hello"}`},
		{"JSON that is not JSON stays text", 200, "application/json", "not json", `{"resolved":"not json"}`},
		{"JSON by any casing", 200, "Application/JSON; charset=utf-8", `{"a":1}`, `{"resolved":{"a":1}}`},
		{"an empty body is undefined", 201, "application/fhir+json", "", `{"resolved":"undefined"}`},
		{"299 is a success", 299, "text/plain", "ok", `{"resolved":"ok"}`},
		{"401", 401, "", "", `{"m":"Unauthorized","ooe":true,"code":"login"}`},
		{"409 with text", 409, "text/plain", "version conflict", `{"m":"version conflict","ooe":true,"code":"conflict"}`},
		{"409 without", 409, "", "", `{"m":"Conflict","ooe":true,"code":"conflict"}`},
		{"410", 410, "", "", `{"m":"Gone","ooe":true,"code":"deleted"}`},
		{"429", 429, "", "", `{"m":"Too Many Requests","ooe":true,"code":"throttled"}`},
		{"500 with text", 500, "text/plain", "db down", `{"m":"db down","ooe":true,"code":"exception"}`},
		{"503 without", 503, "", "", `{"m":"Internal server error","ooe":true,"code":"exception"}`},
		{"a redirect is a failure", 302, "", "", `{"m":"Request failed with status 302","ooe":true,"code":"invalid"}`},
		{"JSON that is not an outcome", 418, "application/json", `{"x":1}`, `{"m":"Request failed with status 418","ooe":true,"code":"invalid"}`},
		{"an outcome is kept", 422, "application/fhir+json", `{"resourceType":"OperationOutcome","issue":[{"severity":"error","code":"processing","diagnostics":"Bad"}]}`, `{"m":"Bad","ooe":true,"code":"processing"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := &fakeHost{respond: func(hostCallRecord) (int, string, []byte, error) {
				return tt.status, tt.contentType, []byte(tt.body), nil
			}}
			if got := runCall(t, `medplum.get('Patient/1')`, host); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestClientWithoutHost(t *testing.T) {
	got := runCall(t, `medplum.readResource('Patient', '1')`, nil)
	if want := `{"m":"No FHIR API is available to this bot","ooe":true,"code":"transient"}`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	res := runBot(t, `exports.handler = (m) => m.readResource('Patient', '1');`, Event{}, nil, Limits{})
	if res.Err == nil || res.Err.Outcome == nil || res.Err.Outcome.ID != "unavailable" || res.Err.Message != "No FHIR API is available to this bot" {
		t.Errorf("err = %+v", res.Err)
	}
}

func TestClientShape(t *testing.T) {
	// The client is a read-only view: a bot cannot plant methods on it
	// for the next bot, and it answers `in` for its methods.
	res := runBot(t, `exports.handler = async (medplum) => {
		const names = ['get', 'post', 'put', 'patch', 'delete', 'createResource', 'readResource', 'readReference', 'updateResource', 'patchResource', 'deleteResource', 'search', 'searchResources', 'searchOne', 'executeBot'];
		return [names.filter(n => typeof medplum[n] !== 'function').join() || 'all', 'fhirUrl' in medplum, 'get' in medplum].join(' ');
	};`, Event{}, nil, Limits{})
	mustSucceed(t, res)
	if res.Text != "all false true" {
		t.Errorf("got %q", res.Text)
	}
}

func TestConcurrentHostCallsBounded(t *testing.T) {
	var h boundedHost
	res, err := Run(context.Background(), mustCompile(t, `exports.handler = async (m) => (await Promise.all(Array.from({length: 40}, (_, i) => m.get('Patient/' + i)))).length;`), Event{}, &h, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, res)
	if res.Text != "40" {
		t.Errorf("answered %q", res.Text)
	}
	if got := h.peak(); got != maxConcurrentHostCalls {
		t.Errorf("%d host calls ran at once, want %d", got, maxConcurrentHostCalls)
	}
}

// boundedHost holds every request until maxConcurrentHostCalls are in
// flight, then a moment more, so that a call past the bound would show.
type boundedHost struct {
	mu       sync.Mutex
	inflight int
	max      int
	full     chan struct{}
}

func (h *boundedHost) Request(ctx context.Context, method, path string, body []byte, contentType string) (int, string, []byte, error) {
	h.mu.Lock()
	if h.full == nil {
		h.full = make(chan struct{})
	}
	full := h.full
	h.inflight++
	if h.inflight > h.max {
		h.max = h.inflight
		if h.max == maxConcurrentHostCalls {
			time.AfterFunc(10*time.Millisecond, func() { close(full) })
		}
	}
	h.mu.Unlock()
	select {
	case <-full:
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
	h.mu.Lock()
	h.inflight--
	h.mu.Unlock()
	return 200, "application/json", []byte(`{}`), nil
}

func (h *boundedHost) peak() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.max
}
