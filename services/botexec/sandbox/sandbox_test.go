package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/hl7"
)

// hostCallRecord is one request a bot made through the fake host.
type hostCallRecord struct {
	Method, Path, Body, ContentType string
}

// fakeHost answers from a function and records every request.
type fakeHost struct {
	mu      sync.Mutex
	calls   []hostCallRecord
	respond func(r hostCallRecord) (int, string, []byte, error)
}

func (h *fakeHost) Request(ctx context.Context, method, path string, body []byte, contentType string) (int, string, []byte, error) {
	r := hostCallRecord{method, path, string(body), contentType}
	h.mu.Lock()
	h.calls = append(h.calls, r)
	h.mu.Unlock()
	if h.respond == nil {
		return 200, "application/fhir+json", []byte(`{"resourceType":"Patient","id":"123"}`), nil
	}
	return h.respond(r)
}

func (h *fakeHost) recorded() []hostCallRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hostCallRecord(nil), h.calls...)
}

func mustCompile(t testing.TB, code string) *Program {
	t.Helper()
	p, err := Compile("bot.js", code)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return p
}

func runBot(t testing.TB, code string, ev Event, host Host, lim Limits) *Result {
	t.Helper()
	res, err := Run(context.Background(), mustCompile(t, code), ev, host, lim)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return res
}

func mustSucceed(t testing.TB, res *Result) {
	t.Helper()
	if res.Err != nil {
		t.Fatalf("bot failed: %s (limit %q)\nstack: %s\nlog: %s", res.Err.Message, res.Err.Limit, res.Err.Stack, res.Log)
	}
}

const echoBot = `exports.handler = async (medplum, event) => event.input;`

const adt = "MSH|^~\\&|ADT1|GOOD HEALTH HOSPITAL|GHH LAB|GHH|198808181126|SECURITY|ADT^A01^ADT_A01|MSG00001|P|2.5.1\r" +
	"EVN|A01|200708181123\r" +
	"PID|1||PATID1234^5^M11^ADT1&1.2.3&ISO^MR~123456789^^^USSSA^SS||EVERYMAN^ADAM^A^III||19610615|M"

func TestEcho(t *testing.T) {
	tests := []struct {
		name        string
		input       any
		contentType string
		kind        Kind
		text        string
		json        string
	}{
		{"text", "hello world", "text/plain", KindString, "hello world", `"hello world"`},
		{"json raw keeps key order", json.RawMessage(`{"z":1,"a":[true,null,"x"]}`), "application/json", KindJSON, "", `{"z":1,"a":[true,null,"x"]}`},
		{"json decoded map", map[string]any{"b": 2.5, "a": []any{"x"}}, "application/json", KindJSON, "", `{"a":["x"],"b":2.5}`},
		{"form", map[string]string{"k": "v"}, "application/x-www-form-urlencoded", KindJSON, "", `{"k":"v"}`},
		{"fhir resource", json.RawMessage(`{"resourceType":"Patient","id":"1"}`), "application/fhir+json", KindResource, "", `{"resourceType":"Patient","id":"1"}`},
		{"hl7", adt, HL7ContentType, KindHL7, adt, ""},
		{"hl7 with charset and LF separators", strings.ReplaceAll(adt, "\r", "\n"), HL7ContentType + "; charset=utf-8", KindHL7, adt, ""},
		{"parsed hl7", mustParseHL7(adt), "", KindHL7, adt, ""},
		{"null", nil, "application/json", KindNull, "", "null"},
		{"number", 42.0, "application/json", KindNumber, "42", "42"},
		{"boolean", true, "application/json", KindBoolean, "true", "true"},
	}
	p := mustCompile(t, echoBot)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Run(context.Background(), p, Event{Input: tt.input, ContentType: tt.contentType}, nil, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			mustSucceed(t, res)
			if res.Kind != tt.kind || res.Text != tt.text || string(res.JSON) != tt.json {
				t.Errorf("got kind %v text %q json %s; want %v %q %s", res.Kind, res.Text, res.JSON, tt.kind, tt.text, tt.json)
			}
			if tt.kind == KindResource && res.ResourceType != "Patient" {
				t.Errorf("resourceType = %q", res.ResourceType)
			}
		})
	}
}

func mustParseHL7(s string) *hl7.Message {
	m, err := hl7.Parse(s)
	if err != nil {
		panic(err)
	}
	return m
}

func TestResultKinds(t *testing.T) {
	tests := []struct {
		name string
		ret  string
		kind Kind
		text string
		json string
	}{
		{"undefined", `undefined`, KindUndefined, "", ""},
		{"no return", `void 0`, KindUndefined, "", ""},
		{"null", `null`, KindNull, "", "null"},
		{"empty string", `''`, KindString, "", `""`},
		{"string", `'a"b'`, KindString, `a"b`, `"a\"b"`},
		{"float", `1.5`, KindNumber, "1.5", "1.5"},
		{"NaN", `NaN`, KindNumber, "NaN", "null"},
		{"bigint", `10n`, KindNumber, "10", "10"},
		{"false", `false`, KindBoolean, "false", "false"},
		{"array", `[1, 'a']`, KindJSON, "", `[1,"a"]`},
		{"object", `({a: {b: 1}})`, KindJSON, "", `{"a":{"b":1}}`},
		{"resource", `({resourceType: 'Observation', status: 'final'})`, KindResource, "", `{"resourceType":"Observation","status":"final"}`},
		{"returned error outcome", `({resourceType: 'OperationOutcome', id: 'not-found', issue: [{severity: 'error', code: 'not-found'}]})`, KindResource, "", `{"resourceType":"OperationOutcome","id":"not-found","issue":[{"severity":"error","code":"not-found"}]}`},
		{"function", `() => 1`, KindUndefined, "", ""},
		{"symbol", `Symbol('x')`, KindUndefined, "", ""},
		{"toJSON", `({toJSON() { return 'j' }})`, KindJSON, "", `"j"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runBot(t, `exports.handler = async () => { return `+tt.ret+` };`, Event{}, nil, Limits{})
			mustSucceed(t, res)
			if res.Kind != tt.kind || res.Text != tt.text || string(res.JSON) != tt.json {
				t.Errorf("got kind %v text %q json %s; want %v %q %s", res.Kind, res.Text, res.JSON, tt.kind, tt.text, tt.json)
			}
			v, err := res.Value()
			if err != nil || (tt.json == "" || tt.json == "null") != (v == nil) {
				t.Errorf("Value() = %v, %v", v, err)
			}
		})
	}
}

func TestModuleForms(t *testing.T) {
	tests := []struct{ name, code string }{
		{"exports.handler", `exports.handler = async () => 'ok';`},
		{"module.exports.handler", `module.exports.handler = async () => 'ok';`},
		{"module.exports object", `async function handler() { return 'ok' } module.exports = { handler };`},
		{"sync handler", `exports.handler = () => 'ok';`},
		{"use strict", `'use strict'; exports.handler = async function () { return this === undefined ? 'ok' : 'sloppy' };`},
		{"thenable", `exports.handler = () => ({ then(r) { r('ok') } });`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runBot(t, tt.code, Event{}, nil, Limits{})
			mustSucceed(t, res)
			if res.Text != "ok" {
				t.Errorf("result = %q", res.Text)
			}
		})
	}
	res := runBot(t, `exports.nothing = 1;`, Event{}, nil, Limits{})
	if res.Err == nil || !strings.Contains(res.Err.Message, "handler") {
		t.Errorf("missing handler: %+v", res.Err)
	}
}

func TestEventFields(t *testing.T) {
	ev := Event{
		Bot:         map[string]any{"reference": "Bot/1", "display": "Echo"},
		Requester:   map[string]any{"reference": "Practitioner/2"},
		Input:       "in",
		ContentType: "text/plain",
		Secrets:     map[string]any{"API_KEY": map[string]any{"name": "API_KEY", "valueString": "s3cret"}},
		TraceID:     "trace-1",
		Headers:     map[string]string{"x-test": "yes"},
	}
	res := runBot(t, `exports.handler = async (m, e) => JSON.stringify([e.bot.reference, e.requester.reference, e.input, e.contentType, e.secrets.API_KEY.valueString, e.traceId, e.headers['x-test'], Object.keys(e).sort()]);`, ev, nil, Limits{})
	mustSucceed(t, res)
	want := `["Bot/1","Practitioner/2","in","text/plain","s3cret","trace-1","yes",["bot","contentType","headers","input","requester","secrets","traceId"]]`
	if res.Text != want {
		t.Errorf("got %s\nwant %s", res.Text, want)
	}
}

func TestAsyncAndTimers(t *testing.T) {
	tests := []struct {
		name string
		code string
		want string
	}{
		{"await setTimeout", `exports.handler = async () => { await new Promise(r => setTimeout(r, 10)); return 'slept' };`, "slept"},
		{"timer order", `exports.handler = async () => { const out = []; await new Promise(r => { setTimeout(() => out.push(2), 20); setTimeout(() => out.push(1), 5); setTimeout(() => { out.push(3); r() }, 30) }); return out.join(',') };`, "1,2,3"},
		{"setImmediate", `exports.handler = () => new Promise(r => setImmediate((a) => r(a), 'now'));`, "now"},
		{"timer arguments", `exports.handler = () => new Promise(r => setTimeout((a, b) => r(a + b), 0, 'x', 'y'));`, "xy"},
		{"clearTimeout", `exports.handler = async () => { let hit = 'no'; const id = setTimeout(() => { hit = 'yes' }, 5); clearTimeout(id); await new Promise(r => setTimeout(r, 20)); return hit };`, "no"},
		{"setInterval", `exports.handler = () => new Promise(r => { let n = 0; const id = setInterval(() => { if (++n === 3) { clearInterval(id); r(String(n)) } }, 1) });`, "3"},
		{"microtasks before timers", `exports.handler = () => new Promise(r => { const out = []; setTimeout(() => { out.push('t'); r(out.join('')) }, 0); Promise.resolve().then(() => out.push('p')); queueMicrotask(() => out.push('q')) });`, "pqt"},
		{"promise all", `exports.handler = async () => (await Promise.all([1, 2].map(x => new Promise(r => setTimeout(() => r(x * 2), x))))).join(',');`, "2,4"},
		{"leftover timers abandoned", `exports.handler = async () => { setTimeout(() => { throw new Error('late') }, 5); setInterval(() => {}, 1); return 'done' };`, "done"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runBot(t, tt.code, Event{}, nil, Limits{Timeout: 2 * time.Second})
			mustSucceed(t, res)
			if res.Text != tt.want {
				t.Errorf("got %q, want %q", res.Text, tt.want)
			}
		})
	}
	t.Run("never settles", func(t *testing.T) {
		res := runBot(t, `exports.handler = () => new Promise(() => {});`, Event{}, nil, Limits{})
		if res.Err == nil || !strings.Contains(res.Err.Message, "never settles") {
			t.Errorf("err = %+v", res.Err)
		}
	})
	t.Run("throw in timer fails the run", func(t *testing.T) {
		res := runBot(t, `exports.handler = () => new Promise(r => { setTimeout(() => { throw new Error('boom') }, 0); setTimeout(r, 50) });`, Event{}, nil, Limits{})
		if res.Err == nil || res.Err.Message != "boom" {
			t.Errorf("err = %+v", res.Err)
		}
	})
}

func TestMedplumClient(t *testing.T) {
	tests := []struct {
		name   string
		call   string
		want   hostCallRecord
		answer string // body the host answers with
		result string // JSON of what the call resolved to
	}{
		{"createResource", `medplum.createResource({resourceType: 'Patient', name: [{family: 'X'}]})`,
			hostCallRecord{"POST", "Patient", `{"resourceType":"Patient","name":[{"family":"X"}]}`, "application/fhir+json"},
			`{"resourceType":"Patient","id":"1"}`, `{"resourceType":"Patient","id":"1"}`},
		{"readResource", `medplum.readResource('Patient', '123')`,
			hostCallRecord{"GET", "Patient/123", "", ""}, `{"resourceType":"Patient","id":"123"}`, `{"resourceType":"Patient","id":"123"}`},
		{"readReference", `medplum.readReference({reference: 'Observation/9'})`,
			hostCallRecord{"GET", "Observation/9", "", ""}, `{"resourceType":"Observation","id":"9"}`, `{"resourceType":"Observation","id":"9"}`},
		{"updateResource", `medplum.updateResource({resourceType: 'Patient', id: '123', active: true})`,
			hostCallRecord{"PUT", "Patient/123", `{"resourceType":"Patient","id":"123","active":true}`, "application/fhir+json"},
			`{"resourceType":"Patient","id":"123"}`, `{"resourceType":"Patient","id":"123"}`},
		{"patchResource", `medplum.patchResource('Patient', '123', [{op: 'replace', path: '/active', value: false}])`,
			hostCallRecord{"PATCH", "Patient/123", `[{"op":"replace","path":"/active","value":false}]`, "application/json-patch+json"},
			`{"resourceType":"Patient","id":"123"}`, `{"resourceType":"Patient","id":"123"}`},
		{"deleteResource", `medplum.deleteResource('Patient', '123')`,
			hostCallRecord{"DELETE", "Patient/123", "", ""}, ``, `"undefined"`},
		{"searchResources string", `medplum.searchResources('Patient', 'name=Alice&_count=2').then(r => ({ids: r.map(p => p.id), total: r.bundle.total, isArray: Array.isArray(r)}))`,
			hostCallRecord{"GET", "Patient?name=Alice&_count=2", "", ""},
			`{"resourceType":"Bundle","total":2,"entry":[{"resource":{"resourceType":"Patient","id":"a"}},{"resource":{"resourceType":"Patient","id":"b"}}]}`,
			`{"ids":["a","b"],"total":2,"isArray":true}`},
		{"searchResources object", `medplum.searchResources('Patient', {name: 'Al ice', _tag: ['a', 'b']}).then(r => r.length)`,
			hostCallRecord{"GET", "Patient?name=Al+ice&_tag=a&_tag=b", "", ""}, `{"resourceType":"Bundle"}`, `0`},
		{"searchResources URLSearchParams", `medplum.searchResources('Patient', new URLSearchParams({identifier: 'sys|1'})).then(r => r.length)`,
			hostCallRecord{"GET", "Patient?identifier=sys%7C1", "", ""}, `{"resourceType":"Bundle","entry":[]}`, `0`},
		{"searchOne", `medplum.searchOne('Patient', 'name=Bob')`,
			hostCallRecord{"GET", "Patient?name=Bob&_count=1", "", ""},
			`{"resourceType":"Bundle","entry":[{"resource":{"resourceType":"Patient","id":"b"}}]}`, `{"resourceType":"Patient","id":"b"}`},
		{"searchOne none", `medplum.searchOne('Patient', {name: 'Nobody'})`,
			hostCallRecord{"GET", "Patient?name=Nobody&_count=1", "", ""}, `{"resourceType":"Bundle"}`, `"undefined"`},
		{"search", `medplum.search('Observation', {code: 'x'})`,
			hostCallRecord{"GET", "Observation?code=x", "", ""}, `{"resourceType":"Bundle","total":0}`, `{"resourceType":"Bundle","total":0}`},
		{"executeBot by id", `medplum.executeBot('abc', {a: 1}, 'application/json')`,
			hostCallRecord{"POST", "Bot/abc/$execute", `{"a":1}`, "application/json"}, `{"ok":true}`, `{"ok":true}`},
		{"executeBot by identifier", `medplum.executeBot({system: 'https://x', value: 'echo'}, 'hi', 'text/plain')`,
			hostCallRecord{"POST", "Bot/$execute?identifier=https%3A%2F%2Fx%7Cecho", "hi", "text/plain"}, `{"x":1}`, `{"x":1}`},
		{"get relative", `medplum.get('Patient/123')`, hostCallRecord{"GET", "Patient/123", "", ""}, `{"id":"123"}`, `{"id":"123"}`},
		{"get fhir path", `medplum.get('/fhir/R4/Patient?name=x')`, hostCallRecord{"GET", "Patient?name=x", "", ""}, `{"id":"1"}`, `{"id":"1"}`},
		{"get absolute", `medplum.get('https://api.example.com/fhir/R4/Patient/1')`, hostCallRecord{"GET", "Patient/1", "", ""}, `{"id":"1"}`, `{"id":"1"}`},
		{"get absolute with base path", `medplum.get('https://x.org/base/fhir/R4/Patient?_id=1#frag')`, hostCallRecord{"GET", "Patient?_id=1", "", ""}, `{"id":"1"}`, `{"id":"1"}`},
		{"post", `medplum.post('Patient/$validate', {resourceType: 'Patient'})`,
			hostCallRecord{"POST", "Patient/$validate", `{"resourceType":"Patient"}`, "application/fhir+json"}, `{"resourceType":"OperationOutcome","id":"ok","issue":[]}`, `{"resourceType":"OperationOutcome","id":"ok","issue":[]}`},
		{"post text", `medplum.post('Bot/1/$execute', 'raw', 'text/plain')`,
			hostCallRecord{"POST", "Bot/1/$execute", "raw", "text/plain"}, `{}`, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := &fakeHost{respond: func(hostCallRecord) (int, string, []byte, error) {
				return 200, "application/fhir+json", []byte(tt.answer), nil
			}}
			code := `exports.handler = async (medplum) => { const r = await ` + tt.call + `; return r === undefined ? 'undefined' : r };`
			res := runBot(t, code, Event{}, host, Limits{})
			mustSucceed(t, res)
			calls := host.recorded()
			if len(calls) != 1 || calls[0] != tt.want {
				t.Errorf("host calls = %+v, want %+v", calls, tt.want)
			}
			if string(res.JSON) != tt.result {
				t.Errorf("result = %s, want %s", res.JSON, tt.result)
			}
		})
	}
	t.Run("absolute non-FHIR URL refused", func(t *testing.T) {
		host := &fakeHost{}
		res := runBot(t, `exports.handler = (m) => m.get('https://example.com/steal?x=/fhir/R4/Patient');`, Event{}, host, Limits{})
		if res.Err == nil || !strings.Contains(res.Err.Message, "Only FHIR API URLs") || len(host.recorded()) != 0 {
			t.Errorf("err = %+v, calls = %v", res.Err, host.recorded())
		}
	})
	t.Run("missing id rejects without a request", func(t *testing.T) {
		host := &fakeHost{}
		res := runBot(t, `exports.handler = (m) => m.readResource('Patient', '');`, Event{}, host, Limits{})
		if res.Err == nil || res.Err.Outcome == nil || len(host.recorded()) != 0 {
			t.Errorf("err = %+v, calls = %v", res.Err, host.recorded())
		}
	})
	t.Run("many concurrent requests all answered", func(t *testing.T) {
		host := &fakeHost{respond: func(r hostCallRecord) (int, string, []byte, error) {
			time.Sleep(time.Millisecond) // a host's latency, so the fifty calls overlap: not a wait
			return 200, "application/json", []byte(`{"path":"` + r.Path + `"}`), nil
		}}
		res := runBot(t, `exports.handler = async (m) => (await Promise.all(Array.from({length: 50}, (_, i) => m.get('Patient/' + i)))).length;`, Event{}, host, Limits{})
		mustSucceed(t, res)
		if res.Text != "50" || len(host.recorded()) != 50 {
			t.Errorf("result %q after %d calls", res.Text, len(host.recorded()))
		}
	})
}

func TestHostErrors(t *testing.T) {
	notFound := fhir.NotFound()
	tests := []struct {
		name      string
		status    int
		body      string
		err       error
		wantMsg   string
		wantOOID  string
		wantIssue string
	}{
		{"404 outcome", 404, string(notFound.JSON()), nil, "Not found", "not-found", "not-found"},
		{"403 without body", 403, "", nil, "Forbidden", "forbidden", "forbidden"},
		{"400 with text", 400, "bad thing", nil, "bad thing", "", "invalid"},
		{"host *fhir.Error", 0, "", fhir.Conflict("version mismatch"), "version mismatch", "conflict", "conflict"},
		{"host plain error hides detail", 0, "", errors.New("nats: connection refused to 10.0.0.1"), "Internal server error", "", "exception"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := &fakeHost{respond: func(hostCallRecord) (int, string, []byte, error) {
				return tt.status, "application/fhir+json", []byte(tt.body), tt.err
			}}
			caught := runBot(t, `exports.handler = async (m) => {
				try { await m.readResource('Patient', '1'); return 'no error' }
				catch (e) { return {message: e.message, isOOE: e instanceof OperationOutcomeError, isError: e instanceof Error, outcome: e.outcome} }
			};`, Event{}, host, Limits{})
			mustSucceed(t, caught)
			var got struct {
				Message string
				IsOOE   bool
				IsError bool
				Outcome fhir.OperationOutcome
			}
			if err := json.Unmarshal(caught.JSON, &got); err != nil {
				t.Fatalf("%v: %s", err, caught.JSON)
			}
			if got.Message != tt.wantMsg || !got.IsOOE || !got.IsError || got.Outcome.ID != tt.wantOOID || got.Outcome.Issue[0].Code != tt.wantIssue {
				t.Errorf("caught %+v", got)
			}
			uncaught := runBot(t, `exports.handler = async (m) => { await m.readResource('Patient', '1') };`, Event{}, host, Limits{})
			if uncaught.Err == nil || uncaught.Err.Outcome == nil || uncaught.Err.Outcome.ID != tt.wantOOID || uncaught.Err.Message != tt.wantMsg {
				t.Errorf("uncaught err = %+v", uncaught.Err)
			}
		})
	}
}

func TestThrownErrors(t *testing.T) {
	tests := []struct {
		name      string
		code      string
		wantMsg   string
		wantOO    string // outcome id, "-" for no outcome
		wantStack bool
	}{
		{"OperationOutcomeError", `exports.handler = async () => { throw new OperationOutcomeError({resourceType: 'OperationOutcome', id: 'forbidden', issue: [{severity: 'error', code: 'forbidden', details: {text: 'No way'}}]}) };`, "No way", "forbidden", true},
		{"OperationOutcomeError with expression", `exports.handler = async () => { throw new OperationOutcomeError({resourceType: 'OperationOutcome', issue: [{severity: 'error', code: 'invalid', details: {text: 'Bad'}, expression: ['Patient.name']}]}) };`, "Bad (Patient.name)", "", true},
		{"plain Error", `exports.handler = async () => { throw new Error('Invalid boolean') };`, "Invalid boolean", "-", true},
		{"TypeError from code", `exports.handler = async () => { null.x };`, "", "-", true},
		{"thrown string", `exports.handler = async () => { throw 'just text' };`, "just text", "-", false},
		{"thrown object", `exports.handler = async () => { throw {code: 7} };`, `{"code":7}`, "-", false},
		{"sync throw", `exports.handler = () => { throw new RangeError('sync') };`, "sync", "-", true},
		{"rejected promise", `exports.handler = () => Promise.reject(new Error('rejected'));`, "rejected", "-", true},
		{"top-level throw", `throw new Error('at load');`, "at load", "-", true},
		{"hostile message getter", `exports.handler = async () => { const e = new Error('x'); Object.defineProperty(e, 'message', {get() { throw new Error('nope') }}); throw e };`, "Unhandled error", "-", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runBot(t, tt.code, Event{}, nil, Limits{})
			if res.Err == nil {
				t.Fatalf("expected an error, got %v %s", res.Kind, res.JSON)
			}
			if !strings.Contains(res.Err.Message, tt.wantMsg) || res.Err.Limit != "" {
				t.Errorf("message %q (limit %q), want %q", res.Err.Message, res.Err.Limit, tt.wantMsg)
			}
			switch {
			case tt.wantOO == "-" && res.Err.Outcome != nil:
				t.Errorf("unexpected outcome %+v", res.Err.Outcome)
			case tt.wantOO != "-" && (res.Err.Outcome == nil || res.Err.Outcome.ID != tt.wantOO):
				t.Errorf("outcome = %+v, want id %q", res.Err.Outcome, tt.wantOO)
			}
			if tt.wantStack && res.Err.Stack == "" {
				t.Error("no stack")
			}
			oo := res.Err.OperationOutcome()
			if fhir.StatusOf(oo) < 400 {
				t.Errorf("outcome status %d", fhir.StatusOf(oo))
			}
		})
	}
}

func TestNoHostAccess(t *testing.T) {
	tests := []struct {
		name string
		expr string
		want string
	}{
		{"require of host module", `(() => { try { require('fs'); return 'loaded' } catch (e) { return e.message } })()`, "Cannot require 'fs': modules are not available to bots"},
		{"require child_process", `(() => { try { require('child_process'); return 'loaded' } catch (e) { return e.message } })()`, "Cannot require 'child_process': modules are not available to bots"},
		{"no global require", `typeof globalThis.require`, "undefined"},
		{"no process", `typeof process`, "undefined"},
		{"no fetch", `typeof fetch`, "undefined"},
		{"no XMLHttpRequest", `typeof XMLHttpRequest`, "undefined"},
		{"no Deno or Bun", `typeof Deno + typeof Bun`, "undefinedundefined"},
		{"natives not global", `typeof native + typeof globalThis.native`, "undefinedundefined"},
		{"no module registry", `typeof globalThis.module`, "undefined"},
		{"core shim", `typeof require('@medplum/core').Hl7Message`, "function"},
		{"globals present", `[typeof console.log, typeof setTimeout, typeof TextEncoder, typeof URL, typeof URLSearchParams, typeof OperationOutcomeError, typeof Hl7Message, typeof atob].join()`, "function,function,function,function,function,function,function,function"},
		{"TextEncoder round trip", `new TextDecoder().decode(new TextEncoder().encode('Zoë ✓'))`, "Zoë ✓"},
		{"TextEncoder bytes", `Array.from(new TextEncoder().encode('é')).join()`, "195,169"},
		{"URL", `(() => { const u = new URL('https://a.example:8443/p/q?x=1&y=2#h'); u.searchParams.append('z', '3'); return [u.hostname, u.port, u.pathname, u.searchParams.get('y'), u.href].join(' ') })()`, "a.example 8443 /p/q 2 https://a.example:8443/p/q?x=1&y=2&z=3#h"},
		{"URL relative to base", `new URL('../b?c=d', 'https://x.org/a/b/c').href`, "https://x.org/a/b?c=d"},
		{"invalid URL", `(() => { try { new URL('nope') } catch (e) { return e instanceof TypeError ? 'TypeError' : String(e) } })()`, "TypeError"},
		{"atob btoa", `atob(btoa('hello\u00ff'))`, "hello\u00ff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runBot(t, `exports.handler = async () => `+tt.expr+`;`, Event{}, nil, Limits{})
			mustSucceed(t, res)
			if res.Text != tt.want {
				t.Errorf("got %q, want %q", res.Text, tt.want)
			}
		})
	}
}

func TestConsole(t *testing.T) {
	res := runBot(t, `exports.handler = async () => {
		console.log('a', 1, true, null, undefined, {x: [1]});
		console.info('%s is %d years', 'Bob', 42, 'extra');
		console.warn('warn'); console.error(new Error('err').message);
	};`, Event{}, nil, Limits{})
	mustSucceed(t, res)
	want := "a 1 true null undefined {\"x\":[1]}\nBob is 42 years extra\nwarn\nerr\n"
	if res.Log != want || res.LogTruncated {
		t.Errorf("log = %q, want %q", res.Log, want)
	}
	failed := runBot(t, `exports.handler = async () => { console.log('before'); throw new Error('x') };`, Event{}, nil, Limits{})
	if failed.Err == nil || failed.Log != "before\n" {
		t.Errorf("log kept on failure: %q %+v", failed.Log, failed.Err)
	}
}

func TestLimits(t *testing.T) {
	tests := []struct {
		name    string
		code    string
		lim     Limits
		limit   Limit
		message string
		maxTime time.Duration
	}{
		{"sync infinite loop", `exports.handler = async () => { while (true) {} };`, Limits{Timeout: 100 * time.Millisecond}, LimitTimeout, "Bot timed out after 100 ms", 2 * time.Second},
		{"infinite loop at load", `while (true) {}`, Limits{Timeout: 100 * time.Millisecond}, LimitTimeout, "Bot timed out after 100 ms", 2 * time.Second},
		{"long async wait", `exports.handler = async () => { await new Promise(r => setTimeout(r, 60000)); return 'late' };`, Limits{Timeout: 100 * time.Millisecond}, LimitTimeout, "Bot timed out after 100 ms", 2 * time.Second},
		{"busy interval", `exports.handler = () => new Promise(() => setInterval(() => { for (let i = 0; i < 1e5; i++); }, 0));`, Limits{Timeout: 100 * time.Millisecond}, LimitTimeout, "timed out", 2 * time.Second},
		{"recursion", `function f() { return f() + 1 } exports.handler = async () => f();`, Limits{MaxCallDepth: 500}, LimitCallDepth, "Maximum call stack size exceeded", 5 * time.Second},
		{"recursion through native", `function f() { return [1].map(f) } exports.handler = async () => f();`, Limits{MaxCallDepth: 500}, LimitCallDepth, "Maximum call stack size exceeded", 5 * time.Second},
		{"output size", `exports.handler = async () => 'x'.repeat(2000);`, Limits{MaxOutputBytes: 1000}, LimitOutput, "exceeds the limit of 1000 bytes", 5 * time.Second},
		{"output size json", `exports.handler = async () => ({a: 'x'.repeat(2000)});`, Limits{MaxOutputBytes: 1000}, LimitOutput, "exceeds the limit of 1000 bytes", 5 * time.Second},
		{"output size hl7", `exports.handler = async () => Hl7Message.parse('MSH|^~\\&|' + 'x'.repeat(2000));`, Limits{MaxOutputBytes: 1000}, LimitOutput, "exceeds the limit", 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			res := runBot(t, tt.code, Event{}, nil, tt.lim)
			if res.Err == nil || res.Err.Limit != tt.limit || !strings.Contains(res.Err.Message, tt.message) {
				t.Fatalf("err = %+v, want limit %q with %q", res.Err, tt.limit, tt.message)
			}
			if d := time.Since(start); d > tt.maxTime {
				t.Errorf("took %v", d)
			}
		})
	}
	t.Run("log size", func(t *testing.T) {
		res := runBot(t, `exports.handler = async () => { for (let i = 0; i < 1000; i++) console.log('line ' + i); console.log('y'.repeat(100000)); return 'ok' };`, Event{}, nil, Limits{MaxLogBytes: 100})
		mustSucceed(t, res)
		if !res.LogTruncated || !strings.HasPrefix(res.Log, "line 0\nline 1\n") || !strings.Contains(res.Log, "[log truncated at 100 bytes]") || len(res.Log) > 200 {
			t.Errorf("log = %q (truncated %v)", res.Log, res.LogTruncated)
		}
	})
	t.Run("string caps", func(t *testing.T) {
		res := runBot(t, `exports.handler = async () => { const out = []; for (const f of [() => 'x'.repeat(1e9), () => ''.padStart(1e9), () => 'ab'.padEnd(1e9, 'c'), () => new Array(1e9).fill(0)]) { try { f(); out.push('allowed') } catch (e) { out.push(e.name) } } return out.join() };`, Event{}, nil, Limits{MemoryBytes: 64 << 20})
		mustSucceed(t, res)
		if res.Text != "RangeError,RangeError,RangeError,RangeError" {
			t.Errorf("got %q", res.Text)
		}
		// Replacing the intrinsics the checks use does not get around them.
		res = runBot(t, `exports.handler = async () => {
			Number = () => 0; String = () => ''; Function.prototype.call = function () { return 'bypassed' };
			Reflect.apply = () => 'bypassed'; Map = class { get() { return 1 } set() {} };
			let n = 0; const big = {valueOf() { return n++ === 0 ? 1 : 1e9 }};
			const out = [];
			for (const f of [() => 'x'.repeat(1e9), () => 'x'.repeat(big).length, () => { let o = {}; for (let i = 0; i < 5000; i++) o = {o}; return JSON.stringify(o) }]) {
				try { out.push('' + f()) } catch (e) { out.push(e.name) }
			}
			return out.join();
		};`, Event{}, nil, Limits{MemoryBytes: 64 << 20})
		mustSucceed(t, res)
		if res.Text != "RangeError,1,RangeError" {
			t.Errorf("with replaced intrinsics: %q", res.Text)
		}
	})
	t.Run("built-ins that ignore interrupts", func(t *testing.T) {
		res := runBot(t, `exports.handler = async () => {
			const out = [];
			let deep = {}; for (let i = 0; i < 5000; i++) deep = {deep};
			let wide = {s: 'x'.repeat(1000)}; for (let i = 0; i < 40; i++) wide = {a: wide, b: wide};
			for (const f of [() => JSON.stringify(deep), () => JSON.stringify(wide), () => JSON.stringify(wide, (k, v) => v), () => console.log(wide)]) {
				try { f(); out.push('allowed') } catch (e) { out.push(e.message) }
			}
			const cyclic = {}; cyclic.self = cyclic;
			try { JSON.stringify(cyclic) } catch (e) { out.push(e.name) }
			out.push(JSON.stringify({a: [1, {b: 'c'}], d: null}, null, 0));
			return out.join(' | ');
		};`, Event{}, nil, Limits{Timeout: 20 * time.Second})
		mustSucceed(t, res)
		want := "Object nested too deeply to serialize (over 2000 levels) | Object too large to serialize | Object too large to serialize | allowed | TypeError | {\"a\":[1,{\"b\":\"c\"}],\"d\":null}"
		if res.Text != want {
			t.Errorf("got  %q\nwant %q", res.Text, want)
		}
		if !strings.Contains(res.Log, "[object Object]") {
			t.Errorf("console.log of an oversized object: %q", res.Log)
		}
	})
	t.Run("catastrophic regular expression", func(t *testing.T) {
		start := time.Now()
		res := runBot(t, `exports.handler = async () => /^(?=a)(a+)+$/.test('a'.repeat(40) + 'b');`, Event{}, nil, Limits{Timeout: 30 * time.Second})
		mustSucceed(t, res)
		if res.Text != "false" || time.Since(start) > 10*time.Second {
			t.Errorf("got %q after %v", res.Text, time.Since(start))
		}
	})
	t.Run("stuck built-in is abandoned", func(t *testing.T) {
		defer func(d time.Duration) { stuckGrace = d }(stuckGrace)
		stuckGrace = 100 * time.Millisecond
		before := StuckRuns()
		start := time.Now()
		res := runBot(t, `exports.handler = async () => new Array(3e7).join('');`, Event{}, nil, Limits{Timeout: 50 * time.Millisecond})
		if res.Err == nil || res.Err.Limit != LimitTimeout || !strings.Contains(res.Err.Message, "abandoned") {
			t.Fatalf("err = %+v", res.Err)
		}
		if d := time.Since(start); d > time.Second || StuckRuns() != before+1 {
			t.Errorf("returned after %v, stuck runs %d -> %d", d, before, StuckRuns())
		}
		// The abandoned join goes on allocating until it returns: wait for
		// it, or it lands in the next test's measures (TestEchoRunAllocates
		// under -count).
		eventually(t, "the abandoned join to return", func() bool { return stuckLive.Load() == 0 })
	})
	t.Run("context cancellation", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		res, err := Run(ctx, mustCompile(t, `exports.handler = async () => { while (true) {} };`), Event{}, nil, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Err == nil || res.Err.Limit != LimitCancelled || time.Since(start) > 2*time.Second {
			t.Errorf("err = %+v after %v", res.Err, time.Since(start))
		}
	})
	t.Run("cancellation stops pending host calls", func(t *testing.T) {
		blocked := make(chan struct{})
		host := hostFunc(func(ctx context.Context) { close(blocked); <-ctx.Done() })
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-blocked; cancel() }()
		res, err := Run(ctx, mustCompile(t, `exports.handler = (m) => m.readResource('Patient', '1');`), Event{}, host, Limits{})
		if err != nil || res.Err == nil || res.Err.Limit != LimitCancelled {
			t.Errorf("err = %v, res.Err = %+v", err, res.Err)
		}
	})
}

// hostFunc is a Host that blocks in f and then fails.
type hostFunc func(ctx context.Context)

func (f hostFunc) Request(ctx context.Context, method, path string, body []byte, contentType string) (int, string, []byte, error) {
	f(ctx)
	return 0, "", nil, ctx.Err()
}

func TestMemoryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a few hundred MiB; skipped with -short")
	}
	hog := mustCompile(t, `exports.handler = async () => { const a = []; while (true) a.push('x'.repeat(1e6)); };`)
	start := time.Now()
	res, err := Run(context.Background(), hog, Event{}, nil, Limits{MemoryBytes: 64 << 20, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Err == nil || res.Err.Limit != LimitMemory || !strings.Contains(res.Err.Message, "memory limit of 64 MiB") {
		t.Fatalf("err = %+v", res.Err)
	}
	t.Logf("hog stopped after %v; heap %s", time.Since(start), heapNow())
	// The process keeps serving: the next run works and the memory is back.
	echo := runBot(t, echoBot, Event{Input: "still here", ContentType: "text/plain"}, nil, Limits{})
	t.Logf("echo after hog took %v; heap %s", echo.Elapsed, heapNow())
	mustSucceed(t, echo)
	if echo.Text != "still here" {
		t.Errorf("echo = %q", echo.Text)
	}
	// And a bot that churns through garbage without keeping it is not
	// mistaken for a hog.
	churn := runBot(t, `exports.handler = async () => { let n = 0; for (let i = 0; i < 15; i++) { const s = 'y'.repeat(1e7); n += s.length } return n };`, Event{}, nil, Limits{MemoryBytes: 64 << 20, Timeout: time.Minute})
	mustSucceed(t, churn)
}

func heapNow() string {
	s := []metrics.Sample{{Name: metricHeap}, {Name: metricLive}}
	metrics.Read(s)
	return fmt.Sprintf("objects %d MiB, live at last GC %d MiB", s[0].Value.Uint64()>>20, s[1].Value.Uint64()>>20)
}

// gatedHost answers once release is closed, so a bot can be kept waiting.
type gatedHost struct{ waiting, release chan struct{} }

func (h gatedHost) Request(ctx context.Context, method, path string, body []byte, contentType string) (int, string, []byte, error) {
	close(h.waiting)
	select {
	case <-h.release:
	case <-ctx.Done():
		return 0, "", nil, ctx.Err()
	}
	return 200, "application/fhir+json", []byte(`{"resourceType":"Patient","id":"1"}`), nil
}

func TestMemoryLimitBlamesTheAllocator(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a few hundred MiB; skipped with -short")
	}
	// A bot waiting on the FHIR API while another one allocates is inside
	// the growth window with a smaller budget, but it was not executing and
	// so cannot have allocated: only the hog is stopped.
	host := gatedHost{waiting: make(chan struct{}), release: make(chan struct{})}
	// The waiter is parked on the FHIR API before the hog starts, so all of
	// the hog's growth falls in the waiter's (smaller) window while the
	// waiter runs no code. (Started the other way round, a loaded machine
	// could see the waiter still executing when the growth passed its budget.)
	waiter := make(chan *Result, 1)
	go func() {
		res, err := Run(context.Background(), mustCompile(t, `exports.handler = async (m) => (await m.readResource('Patient', '1')).id;`), Event{}, host, Limits{MemoryBytes: 16 << 20, Timeout: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		waiter <- res
	}()
	<-host.waiting
	hogs := make(chan *Result, 1)
	go func() {
		res, err := Run(context.Background(), mustCompile(t, `exports.handler = async () => { const a = []; while (true) a.push('x'.repeat(1e6)); };`), Event{}, nil, Limits{MemoryBytes: 96 << 20, Timeout: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		hogs <- res
	}()
	hog := <-hogs
	if hog == nil || hog.Err == nil || hog.Err.Limit != LimitMemory {
		t.Fatalf("hog = %+v", hog)
	}
	close(host.release)
	res := <-waiter
	if res == nil {
		return
	}
	mustSucceed(t, res)
	if res.Text != "1" {
		t.Errorf("waiting bot returned %q", res.Text)
	}
}

func TestIsolation(t *testing.T) {
	code := func(name string) string {
		return fmt.Sprintf(`exports.handler = async () => {
			const before = [typeof globalThis.mark, typeof Array.prototype.leak, typeof JSON.leak].join();
			globalThis.mark = %[1]q; Array.prototype.leak = %[1]q; JSON.leak = %[1]q; console.log = () => {};
			await new Promise(r => setTimeout(r, 20));
			return before + '|' + globalThis.mark + [].leak + JSON.leak;
		};`, name)
	}
	a, b := mustCompile(t, code("A")), mustCompile(t, code("B"))
	for round := 0; round < 3; round++ {
		var wg sync.WaitGroup
		results := make([]*Result, 2)
		for i, p := range []*Program{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := Run(context.Background(), p, Event{}, nil, Limits{})
				if err != nil {
					t.Error(err)
					return
				}
				results[i] = res
			}()
		}
		wg.Wait()
		for i, want := range []string{"undefined,undefined,undefined|AAA", "undefined,undefined,undefined|BBB"} {
			if results[i] == nil {
				continue
			}
			mustSucceed(t, results[i])
			if results[i].Text != want {
				t.Errorf("round %d bot %d: %q, want %q", round, i, results[i].Text, want)
			}
		}
	}
}

func TestHL7Input(t *testing.T) {
	tests := []struct {
		name string
		expr string
		want string
	}{
		{"is Hl7Message", `e.input instanceof Hl7Message`, "true"},
		{"header name", `e.input.header.name`, "MSH"},
		{"get by name", `e.input.get('PID').getField(5).getComponent(1)`, "EVERYMAN"},
		{"getSegment by index", `e.input.getSegment(1).name`, "EVN"},
		{"getAll", `e.input.getAll('PID').length`, "1"},
		{"getAllSegments", `e.input.getAllSegments('OBX').length`, "0"},
		{"segments", `e.input.segments.map(s => s.name).join()`, "MSH,EVN,PID"},
		{"MSH-1", `e.input.header.getField(1).toString()`, "|"},
		{"MSH-2", `e.input.header.getField(2).toString()`, "^~\\&"},
		{"MSH-9.2", `e.input.header.getComponent(9, 2)`, "A01"},
		{"MSH-10", `e.input.getSegment('MSH').getField(10).toString()`, "MSG00001"},
		{"deprecated get", `e.input.get('PID').get(5).get(0)`, "EVERYMAN"},
		{"repetition", `e.input.get('PID').getComponent(3, 1, undefined, 1)`, "123456789"},
		{"subcomponent (0-based, as Medplum)", `e.input.get('PID').getComponent(3, 4, 1)`, "1.2.3"},
		{"whole component", `e.input.get('PID').getComponent(3, 4)`, "ADT1&1.2.3&ISO"},
		{"field toString", `e.input.get('PID').getField(3).toString()`, "PATID1234^5^M11^ADT1&1.2.3&ISO^MR~123456789^^^USSSA^SS"},
		{"segment toString", `e.input.get('EVN').toString()`, "EVN|A01|200708181123"},
		{"message toString", `e.input.toString() === ` + jsString(adt), "true"},
		{"context", `e.input.context.fieldSeparator + e.input.context.getMsh2()`, "|^~\\&"},
		{"parse in bot", `Hl7Message.parse('MSH|^~\\&|A\nPID|1||x^y').getSegment('PID').getComponent(3, 2)`, "y"},
		{"parse error", `(() => { try { Hl7Message.parse('PID|1') } catch (e) { return e.message } })()`, "hl7: segment 1, column 1 (offset 0): message must start with an MSH segment"},
		{"setComponent", `(() => { const m = e.input; m.get('PID').setComponent(5, 2, 'EVE'); return m.get('PID').getField(5).toString() })()`, "EVERYMAN^EVE^A^III"},
		{"setField", `(() => { const m = e.input; m.get('EVN').setField(3, 'x^y'); return m.get('EVN').toString() })()`, "EVN|A01|200708181123|x^y"},
		{"new segment", `new Hl7Segment(['ZZZ', 'a^b', 'c']).toString()`, "ZZZ|a^b|c"},
		{"Hl7Segment.parse", `Hl7Segment.parse('OBX|1|NM|x^y').getField(3).getComponent(2)`, "y"},
		{"Hl7Field.parse", `Hl7Field.parse('a^b~c').components.length`, "2"},
		{"ack MSA", `e.input.buildAck().getSegment('MSA').toString()`, "MSA|AA|MSG00001|OK"},
		{"ack MSH swap", `(() => { const h = e.input.buildAck().header; return [3, 4, 5, 6, 9].map(i => h.getField(i).toString()).join() })()`, "GHH LAB,GHH,ADT1,GOOD HEALTH HOSPITAL,ACK^A01^ACK"},
		{"ack code", `e.input.buildAck({ackCode: 'AE'}).get('MSA').getComponent(1, 1)`, "AE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runBot(t, `exports.handler = async (m, e) => String(`+tt.expr+`);`, Event{Input: adt, ContentType: HL7ContentType}, nil, Limits{})
			mustSucceed(t, res)
			if res.Text != tt.want {
				t.Errorf("got %q, want %q", res.Text, tt.want)
			}
		})
	}
	t.Run("ACK out", func(t *testing.T) {
		res := runBot(t, `exports.handler = async (m, e) => e.input.buildAck();`, Event{Input: adt, ContentType: HL7ContentType}, nil, Limits{})
		mustSucceed(t, res)
		if res.Kind != KindHL7 || !strings.HasPrefix(res.Text, "MSH|^~\\&|GHH LAB|GHH|ADT1|GOOD HEALTH HOSPITAL|") || !strings.HasSuffix(res.Text, "\rMSA|AA|MSG00001|OK") {
			t.Errorf("ack = %v %q", res.Kind, res.Text)
		}
	})
	t.Run("malformed input is a 400 before running", func(t *testing.T) {
		_, err := Run(context.Background(), mustCompile(t, echoBot), Event{Input: "MSH|^~", ContentType: HL7ContentType}, nil, Limits{})
		var fe *fhir.Error
		if !errors.As(err, &fe) || fe.Status != 400 || !strings.Contains(fe.Message(), "segment 1") {
			t.Errorf("err = %v", err)
		}
	})
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestTranspile(t *testing.T) {
	ts := `
import { BotEvent, MedplumClient } from '@medplum/core';
import type { Patient } from '@medplum/fhirtypes';

interface Summary { id: string; count: number }

async function* ids(list: Patient[]): AsyncGenerator<string> {
  for (const p of list) yield p.id ?? 'none';
}

export async function handler(medplum: MedplumClient, event: BotEvent<Patient>): Promise<Summary> {
  const patient = await medplum.readResource('Patient', event.input.id as string);
  let count = 0;
  for await (const id of ids([patient, event.input])) count += id.length;
  return { id: patient.id!, count };
}
`
	code, err := Transpile(ts, "bot.ts")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(code, "async function*") || strings.Contains(code, "for await") {
		t.Errorf("async generators not lowered:\n%s", code)
	}
	p, err := Compile("bot.js", code)
	if err != nil {
		t.Fatalf("%v\n%s", err, code)
	}
	res, err := Run(context.Background(), p, Event{Input: json.RawMessage(`{"resourceType":"Patient","id":"abcd"}`), ContentType: "application/fhir+json"}, &fakeHost{}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, res)
	if string(res.JSON) != `{"id":"123","count":7}` {
		t.Errorf("result = %s", res.JSON)
	}

	esm, err := Transpile(`export const handler = async (m, e) => e.input + '!';`, "bot.mjs")
	if err != nil {
		t.Fatal(err)
	}
	res = runBot(t, esm, Event{Input: "hi"}, nil, Limits{})
	mustSucceed(t, res)
	if res.Text != "hi!" {
		t.Errorf("esm result %q", res.Text)
	}
	cjs, err := Transpile(`exports.handler = async (m, e) => e.input;`, "bot.cjs")
	if err != nil {
		t.Fatal(err)
	}
	res = runBot(t, cjs, Event{Input: "cjs"}, nil, Limits{})
	mustSucceed(t, res)
	if res.Text != "cjs" {
		t.Errorf("cjs result %q", res.Text)
	}
}

func TestSyntaxErrors(t *testing.T) {
	tests := []struct {
		name     string
		do       func() error
		line     string
		expr     string
		fragment string
	}{
		{"typescript", func() error {
			_, err := Transpile("export async function handler() {\n  const x: number = ;\n}\n", "bot.ts")
			return err
		}, "line 2, column 21", "bot.ts:2:21", "Unexpected"},
		{"javascript", func() error {
			_, err := Transpile("exports.handler = async () => {\n  return 1 +;\n};", "bot.js")
			return err
		}, "line 2, column 13", "bot.js:2:13", "Unexpected"},
		{"top-level await in CommonJS", func() error {
			_, err := Transpile("await 1; exports.handler = () => 1;", "bot.mjs")
			return err
		}, "line 1, column 1", "bot.mjs:1:1", "await"},
		{"compile first line", func() error {
			_, err := Compile("bot.js", "exports.handler = => 1;")
			return err
		}, "line 1, column 19", "bot.js:1:19", "Unexpected"},
		{"compile later line", func() error {
			_, err := Compile("bot.js", "exports.handler = async () => {\n\n  let let = 1;\n};")
			return err
		}, "line 3", "bot.js:3:", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			var fe *fhir.Error
			if !errors.As(err, &fe) || fe.Status != 400 {
				t.Fatalf("err = %v, want 400 *fhir.Error", err)
			}
			if !strings.Contains(fe.Message(), tt.line) || !strings.Contains(fe.Message(), tt.fragment) {
				t.Errorf("message %q, want %q and %q", fe.Message(), tt.line, tt.fragment)
			}
			if ex := fe.Outcome.Issue[0].Expression; len(ex) != 1 || !strings.HasPrefix(ex[0], tt.expr) {
				t.Errorf("expression %v, want prefix %q", ex, tt.expr)
			}
		})
	}
}

// eventually polls cond until it holds, failing the test, naming what it
// waited for, after a minute: an abandoned built-in goes on to its end,
// which takes seconds on a loaded machine.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(pause)
	}
}
