package standalone

import (
	"strings"
	"testing"
	"time"
)

// newBot creates a bot in a project (as the super admin) and deploys code.
func newBot(t *testing.T, su, pid, name, identifier, code, filename string, extra ...any) string {
	t.Helper()
	body := map[string]any{"name": name}
	if identifier != "" {
		sys, val, _ := strings.Cut(identifier, "|")
		body["identifier"] = []any{map[string]any{"system": sys, "value": val}}
	}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	r := do(t, "POST", "admin/projects/"+pid+"/bot", su, "application/json", mustJSON(body))
	expect(t, r, 201)
	id := r.json(t)["id"].(string)
	if code != "" {
		expect(t, do(t, "POST", "fhir/R4/Bot/"+id+"/$deploy", su, "application/json", mustJSON(map[string]any{"code": code, "filename": filename})), 200)
	}
	return id
}

const adt = "MSH|^~\\&|ADT1|GOOD HEALTH HOSPITAL|GHH LAB|GHH|198808181126|SECURITY|ADT^A01^ADT_A01|MSG00001|P|2.5\r" +
	"EVN|A01|200708181123\r" +
	"PID|1||PATID1234^^^GOOD HEALTH HOSPITAL^MR||EVERYMAN^ADAM^A^III||19610615|M"

func TestBotExecute(t *testing.T) {
	pid, su := adminProject(t, "Bots")
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "bot caller"}))
	expect(t, r, 201)
	caller := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	echo := newBot(t, su, pid, "echo", "https://example.com/bots|echo", `exports.handler = async (medplum, event) => event.input;`, "echo.js")

	cases := []struct {
		name, method, path, ct, body string
		status                       int
		wantType, wantBody           string
	}{
		{"text", "POST", "Bot/" + echo + "/$execute", "text/plain", "hello", 200, "text/plain", "hello"},
		{"text with charset", "POST", "Bot/" + echo + "/$execute", "text/plain; charset=utf-8", "hé", 200, "text/plain", "hé"},
		{"json", "POST", "Bot/" + echo + "/$execute", "application/json", `{"a":1,"b":[true]}`, 200, "application/json", `{"a":1,"b":[true]}`},
		{"form", "POST", "Bot/" + echo + "/$execute", "application/x-www-form-urlencoded", "a=1&b=two", 200, "application/json", `{"a":"1","b":"two"}`},
		{"fhir", "POST", "Bot/" + echo + "/$execute", "application/fhir+json", `{"resourceType":"Patient","gender":"male"}`, 200, "application/fhir+json", `"resourceType":"Patient"`},
		{"hl7", "POST", "Bot/" + echo + "/$execute", "x-application/hl7-v2+er7", adt, 200, "x-application/hl7-v2+er7", "PID|1||PATID1234"},
		{"get query", "GET", "Bot/" + echo + "/$execute?x=1&y=two", "", "", 200, "application/json", `{"x":"1","y":"two"}`},
		{"by identifier", "POST", "Bot/$execute?identifier=https://example.com/bots|echo", "text/plain", "id", 200, "text/plain", "id"},
		{"by bare code", "POST", "Bot/$execute?identifier=echo", "text/plain", "bare", 200, "text/plain", "bare"},
		{"by identifier, GET", "GET", "Bot/$execute?identifier=|echo&k=v", "", "", 404, "", ""},
		{"unsupported type", "POST", "Bot/" + echo + "/$execute", "image/png", "x", 415, "", ""},
		{"bad json", "POST", "Bot/" + echo + "/$execute", "application/json", `{"a":`, 400, "", ""},
		{"bad hl7", "POST", "Bot/" + echo + "/$execute", "x-application/hl7-v2+er7", "PID|1", 400, "", ""},
		{"no id or identifier", "POST", "Bot/$execute", "text/plain", "x", 400, "", "Must specify bot ID or identifier."},
		{"unknown id", "POST", "Bot/00000000-0000-0000-0000-000000000000/$execute", "text/plain", "x", 404, "", ""},
		{"unknown identifier", "POST", "Bot/$execute?identifier=https://example.com/bots|nope", "text/plain", "x", 404, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, tc.method, "fhir/R4/"+tc.path, caller, tc.ct, []byte(tc.body))
			expect(t, r, tc.status)
			if tc.wantType != "" && !strings.HasPrefix(r.header.Get("Content-Type"), tc.wantType) {
				t.Fatalf("content type %q, want %s", r.header.Get("Content-Type"), tc.wantType)
			}
			// The type is the bot's (or the caller's) choice: browsers must not sniff another.
			if r.header.Get("X-Content-Type-Options") != "nosniff" {
				t.Fatal("answer without X-Content-Type-Options: nosniff")
			}
			if tc.wantBody != "" && !strings.Contains(strings.ReplaceAll(string(r.body), "\n", "\r"), tc.wantBody) {
				t.Fatalf("body %q lacks %q", r.body, tc.wantBody)
			}
		})
	}

	// Another project's bot is not found, by id or by identifier; the same
	// identifier twice in one project is 412.
	other, _ := adminProject(t, "Other bots")
	foreign := newBot(t, su, other, "foreign", "https://example.com/bots|echo", `exports.handler = async () => 'foreign';`, "f.js")
	expect(t, do(t, "POST", "fhir/R4/Bot/"+foreign+"/$execute", caller, "text/plain", []byte("x")), 404)
	r = do(t, "POST", "fhir/R4/Bot/$execute?identifier=https://example.com/bots|echo", caller, "text/plain", []byte("mine"))
	expect(t, r, 200)
	if string(r.body) != "mine" {
		t.Fatalf("identifier found another project's bot: %s", r.body)
	}
	newBot(t, su, pid, "echo twin", "https://example.com/bots|echo", "", "")
	r = do(t, "POST", "fhir/R4/Bot/$execute?identifier=https://example.com/bots|echo", caller, "text/plain", []byte("x"))
	expect(t, r, 412)

	// A bot without code.
	empty := newBot(t, su, pid, "empty", "", "", "")
	r = do(t, "POST", "fhir/R4/Bot/"+empty+"/$execute", caller, "text/plain", []byte("x"))
	expect(t, r, 400)
	if r.outcomeText(t) != "No executable code" {
		t.Fatal(string(r.body))
	}
	expect(t, do(t, "POST", "admin/projects/"+pid+"/bot", su, "application/json", []byte(`{"description":"nameless"}`)), 400)
}

func TestBotOutputsAndLimits(t *testing.T) {
	pid, su := adminProject(t, "Bot outputs")
	run := func(code, filename, ct, body string, extra ...any) *response {
		t.Helper()
		id := newBot(t, su, pid, "b", "", code, filename, extra...)
		return do(t, "POST", "fhir/R4/Bot/"+id+"/$execute", su, ct, []byte(body))
	}
	// TypeScript, an HL7 ACK out.
	r := run(`export async function handler(medplum: unknown, event: { input: any }): Promise<any> {
  return event.input.buildAck();
}`, "ack.ts", "x-application/hl7-v2+er7", adt)
	expect(t, r, 200)
	if !strings.Contains(string(r.body), "MSA|AA|MSG00001") {
		t.Fatalf("ACK: %q", r.body)
	}
	// undefined → 200 ok outcome; thrown error → 400 with its message; a
	// returned error outcome → its status; a Binary → raw bytes.
	r = run(`exports.handler = async () => {};`, "u.js", "text/plain", "x")
	expect(t, r, 200)
	if r.outcomeText(t) != "All OK" {
		t.Fatal(string(r.body))
	}
	r = run(`exports.handler = async () => { throw new Error('Invalid boolean'); };`, "e.js", "text/plain", "x")
	expect(t, r, 400)
	if r.outcomeText(t) != "Invalid boolean" {
		t.Fatal(string(r.body))
	}
	r = run(`exports.handler = async () => ({resourceType: 'OperationOutcome', id: 'forbidden', issue: [{severity: 'error', code: 'forbidden', details: {text: 'Nope'}}]});`, "o.js", "text/plain", "x")
	expect(t, r, 403)
	r = run(`exports.handler = async () => ({resourceType: 'Binary', contentType: 'text/csv', data: 'YSxiCjEsMgo='});`, "b.js", "text/plain", "x")
	expect(t, r, 200)
	if r.header.Get("Content-Type") != "text/csv" || string(r.body) != "a,b\n1,2\n" {
		t.Fatalf("binary: %q %q", r.header.Get("Content-Type"), r.body)
	}
	// The bot reads and writes through its medplum client, as itself.
	r = run(`exports.handler = async (medplum) => {
  const p = await medplum.createResource({resourceType: 'Patient', name: [{family: 'FromBot'}]});
  const back = await medplum.readResource('Patient', p.id);
  const found = await medplum.searchResources('Patient', 'family=FromBot');
  return {id: back.id, found: found.length};
};`, "rw.js", "application/json", "{}")
	expect(t, r, 200)
	if m := r.json(t); m["found"] != float64(1) || m["id"] == nil {
		t.Fatalf("bot client: %s", r.body)
	}
	// Limits: a compile error at deploy, wall time, no require.
	id := newBot(t, su, pid, "broken", "", "", "")
	r = do(t, "POST", "fhir/R4/Bot/"+id+"/$deploy", su, "application/json", mustJSON(map[string]any{"code": "exports.handler = async () => {\n  return 1 +;\n};", "filename": "x.js"}))
	expect(t, r, 400)
	if !strings.Contains(string(r.body), "2:") {
		t.Fatalf("compile error without line: %s", r.body)
	}
	start := time.Now()
	r = run(`exports.handler = async () => { while (true) {} };`, "loop.js", "text/plain", "x", "timeout", 1)
	expect(t, r, 400)
	if time.Since(start) > 10*time.Second {
		t.Fatal("timeout not enforced")
	}
	r = run(`exports.handler = async () => require('fs').readFileSync('/etc/passwd', 'utf8');`, "req.js", "text/plain", "x")
	expect(t, r, 400)

	// Each execution is audited.
	audited := waitUntil(10*time.Second, func() bool {
		r = do(t, "GET", "fhir/R4/AuditEvent?_project="+pid+"&type=execute&_summary=count", su, "", nil) // runs, not the trail's own events
		expect(t, r, 200)
		return r.json(t)["total"].(float64) == 8
	})
	if !audited {
		t.Fatalf("audit events, want 8: %s", r.body)
	}
}

func TestBotRespondAsync(t *testing.T) {
	pid, su := adminProject(t, "Async bots")
	id := newBot(t, su, pid, "slow", "", `exports.handler = async (m, e) => { await new Promise(r => setTimeout(r, 200)); return 'done ' + e.input; };`, "slow.js")
	job := runAsync(t, su, id, "later")
	if job["status"] != "completed" {
		t.Fatalf("job: %v", job)
	}
	p := job["output"].(map[string]any)["parameter"].([]any)[0].(map[string]any)
	if p["valueString"] != "done later" {
		t.Fatalf("job output: %v", job)
	}

	// A bot that fails leaves its outcome in the job.
	bad := newBot(t, su, pid, "failing", "", `exports.handler = async () => { throw new Error('no luck'); };`, "failing.js")
	job = runAsync(t, su, bad, "x")
	if job["status"] != "error" {
		t.Fatalf("job: %v", job)
	}
	p = job["output"].(map[string]any)["parameter"].([]any)[0].(map[string]any)
	if p["name"] != "outcome" || !strings.Contains(string(mustJSON(p["resource"])), "no luck") {
		t.Fatalf("job output: %v", job)
	}

	// The job holds the bot's answer to its caller: another member of the
	// project who is not an admin neither reads nor finds it (issue 29
	// item 7); the caller and the project's admins do.
	admin := projectAdmin(t, su, pid, "async-admin-"+pid+"@example.com")
	client := func(name string) string {
		c := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": name}))
		expect(t, c, 201)
		return clientToken(t, c.json(t)["id"].(string), c.json(t)["secret"].(string))
	}
	caller, other := client("caller"), client("bystander")
	jobID := runAsync(t, caller, id, "mine")["id"].(string)
	for _, c := range []struct {
		who, tok string
		status   int
	}{{"caller", caller, 200}, {"admin", admin, 200}, {"another member", other, 404}} {
		expect(t, do(t, "GET", "fhir/R4/job/"+jobID+"/status", c.tok, "", nil), c.status)
		expect(t, do(t, "GET", "fhir/R4/AsyncJob/"+jobID, c.tok, "", nil), c.status)
		r := do(t, "GET", "fhir/R4/AsyncJob?_id="+jobID, c.tok, "", nil)
		expect(t, r, 200)
		if _, entries := bundleOf(t, r); (len(entries) == 1) != (c.status == 200) {
			t.Fatalf("%s finds %d jobs", c.who, len(entries))
		}
	}
}

// runAsync runs a bot with Prefer: respond-async and returns its AsyncJob
// once the job has ended.
func runAsync(t *testing.T, tok, bot, input string) map[string]any {
	t.Helper()
	r := do(t, "POST", "fhir/R4/Bot/"+bot+"/$execute", tok, "text/plain", []byte(input), "Prefer", "respond-async")
	expect(t, r, 202)
	loc := r.header.Get("Content-Location")
	if !strings.Contains(loc, "fhir/R4/job/") {
		t.Fatalf("Content-Location %q", loc)
	}
	path := loc[strings.Index(loc, "fhir/R4/"):]
	var job map[string]any
	ended := waitUntil(15*time.Second, func() bool {
		r = do(t, "GET", path, tok, "", nil)
		expect(t, r, 200)
		job = r.json(t)
		return job["status"] != "accepted" && job["status"] != "active"
	})
	if !ended {
		t.Fatalf("job never ended: %s", r.body)
	}
	return job
}
