package standalone

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/testenv"
)

// policyClient makes an access policy in a project and a client under it,
// and returns the client's token.
func policyClient(t *testing.T, su, pid string, resources ...map[string]any) string {
	t.Helper()
	rs := make([]any, len(resources))
	for i, r := range resources {
		rs[i] = r
	}
	r := do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "test policy", "meta": map[string]any{"project": pid}, "resource": rs}))
	expect(t, r, 201)
	r = do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{
		"name": "policy client", "accessPolicy": map[string]any{"reference": "AccessPolicy/" + r.json(t)["id"].(string)}}))
	expect(t, r, 201)
	return clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
}

// Every way to find, run or change a bot goes through the caller's access
// policy, as a FHIR read or update of it does; so does an async job's status.
func TestBotPathsHonourPolicy(t *testing.T) {
	pid, su := adminProject(t, "bot policy paths")
	visible := newBot(t, su, pid, "visible", "https://example.com/bots|visible", `exports.handler = async () => 'visible';`, "v.js")
	hidden := newBot(t, su, pid, "hidden", "https://example.com/bots|hidden", `exports.handler = async () => 'hidden';`, "h.js")
	tok := policyClient(t, su, pid, map[string]any{"resourceType": "Bot", "criteria": "Bot?name=visible", "readonly": true})

	expect(t, do(t, "GET", "fhir/R4/Bot/"+hidden, tok, "", nil), 404)
	cases := []struct {
		name, path string
		status     int
	}{
		{"visible by id", "Bot/" + visible + "/$execute", 200},
		{"visible by identifier", "Bot/$execute?identifier=https://example.com/bots|visible", 200},
		{"hidden by id", "Bot/" + hidden + "/$execute", 404},
		{"hidden by identifier", "Bot/$execute?identifier=https://example.com/bots|hidden", 404},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, do(t, "POST", "fhir/R4/"+tc.path, tok, "text/plain", []byte("x")), tc.status)
		})
	}
	t.Run("deploy needs update", func(t *testing.T) {
		expect(t, do(t, "POST", "fhir/R4/Bot/"+visible+"/$deploy", tok, "application/json", []byte(`{"code":"exports.handler = async () => 1;"}`)), 403)
		expect(t, do(t, "POST", "fhir/R4/Bot/"+hidden+"/$deploy", tok, "application/json", []byte(`{"code":"exports.handler = async () => 1;"}`)), 404)
	})
	t.Run("job status", func(t *testing.T) {
		// Another member of the project starts a job; the client may read
		// Bots, not AsyncJobs, so it may not read that job's status either.
		r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "starter"}))
		expect(t, r, 201)
		starter := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
		r = do(t, "POST", "fhir/R4/Bot/"+visible+"/$execute", starter, "text/plain", []byte("x"), "Prefer", "respond-async")
		expect(t, r, 202)
		job := r.header.Get("Content-Location")
		job = job[strings.Index(job, "fhir/R4/"):]
		id := job[len("fhir/R4/job/"):strings.LastIndex(job, "/status")]
		expect(t, do(t, "GET", "fhir/R4/AsyncJob/"+id, tok, "", nil), 403)
		expect(t, do(t, "GET", job, tok, "", nil), 403)
		expect(t, do(t, "GET", job, starter, "", nil), 200)
	})
}

// readPatient is a bot that reads the Patient its input names, or says why not.
const readPatient = `exports.handler = async (medplum, event) => {
	try { return (await medplum.readResource('Patient', event.input)).name[0].family; }
	catch (e) { return 'refused: ' + e.message; }
};`

// A bot never reaches outside its own project, whoever runs it: a super
// admin running a runAsUser bot lends it nothing beyond the bot's project.
func TestRunAsUserStaysInItsProject(t *testing.T) {
	pid, su := adminProject(t, "run as user")
	other, _ := adminProject(t, "run as user, elsewhere")
	r := do(t, "POST", "fhir/R4/Patient", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "Patient", "meta": map[string]any{"project": other}, "name": []any{map[string]any{"family": "Elsewhere"}}}))
	expect(t, r, 201)
	foreign := r.json(t)["id"].(string)
	reader := newBot(t, su, pid, "reader", "", readPatient, "reader.js", "runAsUser", true)
	r = do(t, "POST", "fhir/R4/Bot/"+reader+"/$execute", su, "text/plain", []byte(foreign))
	expect(t, r, 200)
	if !strings.HasPrefix(string(r.body), "refused") {
		t.Fatalf("a runAsUser bot run by a super admin read another project's patient: %s", r.body)
	}
	// And a bot in the super admin's own project does not act as one either.
	local := newBot(t, su, saProject(t, su), "sa reader", "", readPatient, "reader.js", "runAsUser", true)
	r = do(t, "POST", "fhir/R4/Bot/"+local+"/$execute", su, "text/plain", []byte(foreign))
	expect(t, r, 200)
	if !strings.HasPrefix(string(r.body), "refused") {
		t.Fatalf("a bot ran as a super admin: %s", r.body)
	}
}

// saProject is the super admin's own project.
func saProject(t *testing.T, su string) string {
	t.Helper()
	r := do(t, "GET", "auth/me", su, "", nil)
	expect(t, r, 200)
	return r.json(t)["project"].(map[string]any)["id"].(string)
}

// Bots running bots stop at a bounded depth: one request cannot fan out
// into thousands of executions.
func TestBotCallDepth(t *testing.T) {
	pid, su := adminProject(t, "bot depth")
	self := newBot(t, su, pid, "recursive", "https://example.com/bots|recursive", `exports.handler = async (medplum, event) => {
		const n = Number(event.input) + 1;
		try {
			// Two children each: without a bound, 2^n executions.
			const a = await medplum.executeBot({system: 'https://example.com/bots', value: 'recursive'}, String(n), 'text/plain');
			await medplum.executeBot({system: 'https://example.com/bots', value: 'recursive'}, String(n), 'text/plain');
			return a;
		} catch (e) {
			return 'stopped at ' + n + ': ' + e.message;
		}
	};`, "r.js", "timeout", 30)
	start := time.Now()
	r := do(t, "POST", "fhir/R4/Bot/"+self+"/$execute", su, "text/plain", []byte("0"))
	t.Logf("%d in %v: %s", r.status, time.Since(start).Round(time.Millisecond), r.body)
	expect(t, r, 200)
	if !strings.Contains(string(r.body), "stopped at 5") || !strings.Contains(string(r.body), "at most 4 deep") {
		t.Fatalf("answer %s", r.body)
	}
	// Five levels of two children: 31 executions, not thousands. Their
	// audit events are written after the answers: wait for all 31 rather
	// than for a while, which a slow write would pass without counting.
	n := 0
	testenv.Eventually(t, "the 31 executions' audit events", func() bool {
		n = count(t, su, "AuditEvent", pid)
		return n >= 31
	})
	if n > 40 {
		t.Fatalf("%d executions", n)
	}
}

// One project's bots cannot take another's turn: past its bound a project
// waits (then gets 429), while another project's bots run at once and its
// reads stay fast (before bots ran in their own processes, eight endless
// bots took another project's read median from 2 ms to 160 ms).
func TestProjectsShareBots(t *testing.T) {
	busy, su := adminProject(t, "busy bots")
	calm, calmToken := project(t, "calm bots")
	// Each spinner writes a Basic as it starts, so the test sees it running.
	spin := newBot(t, su, busy, "spinner", "", `exports.handler = async (medplum) => {
		await medplum.createResource({resourceType: 'Basic', code: {text: 'spinning'}});
		while (true) {}
	};`, "s.js", "timeout", 3)
	quick := newBot(t, su, calm, "quick", "", `exports.handler = async (m, e) => e.input;`, "q.js")
	r := do(t, "POST", "fhir/R4/Patient", calmToken, "application/fhir+json", patient("Calm"))
	expect(t, r, 201)
	pat := r.json(t)["id"].(string)

	// The calm project's latency: reads from sixteen clients at once, as an
	// application's users make them, and runs of its bot; medians.
	reads := func() time.Duration {
		var mu sync.Mutex
		var ds []time.Duration
		var wg sync.WaitGroup
		for c := 0; c < 16; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					start := time.Now()
					expect(t, do(t, "GET", "fhir/R4/Patient/"+pat, calmToken, "", nil), 200)
					mu.Lock()
					ds = append(ds, time.Since(start))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	runs := func() time.Duration {
		var ds []time.Duration
		for i := 0; i < 5; i++ {
			start := time.Now()
			expect(t, do(t, "POST", "fhir/R4/Bot/"+quick+"/$execute", su, "text/plain", []byte("calm")), 200)
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	readsBefore, runsBefore := reads(), runs()

	// Eight endless bots fill the busy project's slots; a ninth waits its
	// turn, then runs into its own timeout.
	var wg sync.WaitGroup
	statuses := make([]int, 9)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = do(t, "POST", "fhir/R4/Bot/"+spin+"/$execute", su, "text/plain", []byte("x")).status
		}()
		if i == 7 {
			eventually(t, 10*time.Second, "the first eight spinners running", func() bool { return count(t, su, "Basic", busy) == 8 })
		}
	}
	readsDuring, runsDuring := reads(), runs()
	wg.Wait()
	t.Logf("calm project, before and while the busy one spun: read median %v and %v, bot run median %v and %v; busy statuses %v",
		readsBefore.Round(time.Microsecond), readsDuring.Round(time.Microsecond), runsBefore.Round(time.Microsecond), runsDuring.Round(time.Microsecond), statuses)
	if readsDuring > 10*readsBefore+20*time.Millisecond {
		t.Errorf("the calm project's reads slowed from %v to %v", readsBefore, readsDuring)
	}
	if runsDuring > 250*time.Millisecond {
		t.Errorf("the calm project's bot took %v", runsDuring)
	}
	for i, st := range statuses {
		// Each ends at its timeout: 400 with the timeout's outcome.
		if st != 400 {
			t.Errorf("spinner %d: %d", i, st)
		}
	}
}

// Past the bound of asynchronous executions, a request is refused at once
// with 503 and Retry-After.
func TestAsyncExecutionsBounded(t *testing.T) {
	pid, su := adminProject(t, "async bound")
	nap := newBot(t, su, pid, "napper", "", `exports.handler = async () => { await new Promise(r => setTimeout(r, 1500)); return 'rested'; };`, "n.js")
	var accepted, refused int
	var retry string
	for i := 0; i < 70; i++ {
		r := do(t, "POST", "fhir/R4/Bot/"+nap+"/$execute", su, "text/plain", []byte(fmt.Sprint(i)), "Prefer", "respond-async")
		switch r.status {
		case 202:
			accepted++
		case 503:
			refused++
			retry = r.header.Get("Retry-After")
		default:
			t.Fatalf("status %d: %s", r.status, r.body)
		}
	}
	if accepted != 64 || refused != 6 || retry != "1" {
		t.Fatalf("%d accepted, %d refused (Retry-After %q)", accepted, refused, retry)
	}
}
