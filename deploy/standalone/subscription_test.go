package standalone

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/subscription"
	"github.com/pinion-health/pinion/pkg/testenv"
	"github.com/pinion-health/pinion/services/botexec/subscriptions"
)

// hook is a rest-hook endpoint on loopback that records what it is sent
// and answers with status.
type hook struct {
	srv      *httptest.Server
	mu       sync.Mutex
	status   int
	delay    time.Duration // before answering
	received chan hookCall
}

type hookCall struct {
	header http.Header
	body   []byte
	at     time.Time
}

func newHook(t *testing.T, status int) *hook {
	h := &hook{status: status, received: make(chan hookCall, 1000)}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.received <- hookCall{header: r.Header.Clone(), body: b, at: time.Now()}
		h.mu.Lock()
		st, delay := h.status, h.delay
		h.mu.Unlock()
		time.Sleep(delay) // the endpoint's latency, set by the test: not a wait
		w.WriteHeader(st)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// next waits for the next call, failing after wait.
func (h *hook) next(t *testing.T, wait time.Duration) hookCall {
	t.Helper()
	select {
	case c := <-h.received:
		return c
	case <-time.After(wait):
		t.Fatalf("no rest-hook call within %s", wait)
	}
	return hookCall{}
}

// none checks that no call comes within wait.
func (h *hook) none(t *testing.T, wait time.Duration) {
	t.Helper()
	select {
	case c := <-h.received:
		t.Fatalf("unexpected rest-hook call: %s %s", c.header.Get("X-Medplum-Interaction"), c.body)
	case <-time.After(wait):
	}
}

// deliveryMessages counts a project's messages on the delivery stream by
// kind (pending, retry, dead), waiting up to 5 s for them to be want.
func deliveryMessages(t *testing.T, pid string, want map[string]uint64) {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(stack.NATSServer()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, subscriptions.DeliveryStream)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]uint64
	held := waitUntil(5*time.Second, func() bool {
		got = map[string]uint64{}
		for _, kind := range []string{"pending", "retry", "dead"} {
			info, err := st.Info(ctx, jetstream.WithSubjectFilter("pinion.deliveries."+kind+"."+pid+".>"))
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range info.State.Subjects {
				got[kind] += n
			}
		}
		return got["pending"] == want["pending"] && got["retry"] == want["retry"] && got["dead"] == want["dead"]
	})
	if !held {
		t.Fatalf("delivery stream holds %v of the project's messages, want %v", got, want)
	}
}

func newSubscription(t *testing.T, tok, criteria, endpoint string, extra ...map[string]any) string {
	t.Helper()
	body := map[string]any{
		"resourceType": "Subscription", "status": "active", "reason": "test", "criteria": criteria,
		"channel": map[string]any{"type": "rest-hook", "endpoint": endpoint},
	}
	var ext []any
	for _, e := range extra {
		if h, ok := e["header"]; ok {
			body["channel"].(map[string]any)["header"] = h
			continue
		}
		ext = append(ext, e)
	}
	if len(ext) > 0 {
		body["extension"] = ext
	}
	r := do(t, "POST", "fhir/R4/Subscription", tok, "application/fhir+json", mustJSON(body))
	expect(t, r, 201)
	return r.json(t)["id"].(string)
}

func newPatient(t *testing.T, tok, family string) map[string]any {
	t.Helper()
	r := do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "Patient", "name": []any{map[string]any{"family": family}},
	}))
	expect(t, r, 201)
	return r.json(t)
}

// audits lists the AuditEvents about a subscription (as the super admin),
// waiting until there are at least want.
func audits(t *testing.T, sub string, want int) []map[string]any {
	t.Helper()
	su := superToken(t)
	var entries []map[string]any
	waitUntil(10*time.Second, func() bool {
		r := do(t, "GET", "fhir/R4/AuditEvent?entity=Subscription/"+sub+"&_count=100", su, "", nil)
		expect(t, r, 200)
		_, entries = bundleOf(t, r)
		return len(entries) >= want
	}) // fewer after the wait: the callers say what they wanted
	return entries
}

func TestSubscriptionRestHook(t *testing.T) {
	pid, tok := project(t, "Rest hooks")
	h := newHook(t, 200)
	sub := newSubscription(t, tok, "Patient?name=ali", h.srv.URL+"/hook",
		map[string]any{"header": []any{"Authorization: Bearer abc", "X-Tenant: t:1"}},
		map[string]any{"url": subscription.ExtSecret, "valueString": "shh"})

	alice := newPatient(t, tok, "Alice")
	c := h.next(t, 5*time.Second)
	var got map[string]any
	if err := json.Unmarshal(c.body, &got); err != nil || got["id"] != alice["id"] {
		t.Fatalf("body %s, want Patient %v", c.body, alice["id"])
	}
	wantHeaders := map[string]string{
		"Content-Type":           "application/fhir+json",
		"X-Medplum-Subscription": sub,
		"X-Medplum-Interaction":  "create",
		"Authorization":          "Bearer abc",
		"X-Tenant":               "t:1",
		"X-Signature":            subscription.Signature("shh", c.body),
	}
	for k, v := range wantHeaders {
		if c.header.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, c.header.Get(k), v)
		}
	}
	// The trace the gateway started for the write goes on with the hook.
	if tp := c.header.Get("traceparent"); len(tp) != 55 || c.header.Get("X-Trace-Id") != tp {
		t.Errorf("traceparent %q, X-Trace-Id %q: want the write's trace in both", tp, c.header.Get("X-Trace-Id"))
	}

	// Bob does not meet the criteria; the next call is Alice's update,
	// with the trace its request named.
	newPatient(t, tok, "Bob")
	alice["active"] = true
	const trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	expect(t, do(t, "PUT", "fhir/R4/Patient/"+alice["id"].(string), tok, "application/fhir+json", mustJSON(alice), "traceparent", trace), 200)
	c = h.next(t, 5*time.Second)
	if c.header.Get("X-Medplum-Interaction") != "update" || !strings.Contains(string(c.body), `"active":true`) {
		t.Fatalf("second call: %s %s, want Alice's update", c.header.Get("X-Medplum-Interaction"), c.body)
	}
	if c.header.Get("traceparent") != trace || c.header.Get("X-Trace-Id") != trace {
		t.Errorf("update's hook: traceparent %q, X-Trace-Id %q, want %s", c.header.Get("traceparent"), c.header.Get("X-Trace-Id"), trace)
	}

	expect(t, do(t, "DELETE", "fhir/R4/Patient/"+alice["id"].(string), tok, "", nil), 200)
	c = h.next(t, 5*time.Second)
	if c.header.Get("X-Medplum-Interaction") != "delete" || string(c.body) != "{}" ||
		c.header.Get("X-Medplum-Deleted-Resource") != "Patient/"+alice["id"].(string) {
		t.Fatalf("delete call: %v %s", c.header, c.body)
	}
	h.none(t, 300*time.Millisecond)

	// Deliveries made are not kept.
	deliveryMessages(t, pid, nil)

	// Each attempt is an AuditEvent of the subscription's project.
	entries := audits(t, sub, 3)
	if len(entries) != 3 {
		t.Fatalf("%d AuditEvents, want 3", len(entries))
	}
	for _, e := range entries {
		if e["outcome"] != "0" || e["outcomeDesc"] != "Attempt 0 received status 200" {
			t.Errorf("AuditEvent outcome %v %q", e["outcome"], e["outcomeDesc"])
		}
	}
}

func TestSubscriptionInteractionAndRetries(t *testing.T) {
	pid, tok := project(t, "Retries")
	h := newHook(t, 500)
	sub := newSubscription(t, tok, "Patient", h.srv.URL,
		map[string]any{"url": subscription.ExtInteraction, "valueCode": "create"},
		map[string]any{"url": subscription.ExtMaxAttempts, "valueInteger": 2})
	p := newPatient(t, tok, "Retry")
	// The first attempt and two retries, a second then two apart.
	var at []time.Time
	for i := 0; i < 3; i++ {
		at = append(at, h.next(t, 6*time.Second).at)
	}
	if d := at[1].Sub(at[0]); d < 900*time.Millisecond || d > 4*time.Second {
		t.Errorf("first retry after %s, want about 1 s", d)
	}
	if d := at[2].Sub(at[1]); d < 1800*time.Millisecond || d > 5*time.Second {
		t.Errorf("second retry after %s, want about 2 s", d)
	}
	// An update is not an interaction the subscription asks for.
	p["active"] = false
	expect(t, do(t, "PUT", "fhir/R4/Patient/"+p["id"].(string), tok, "application/fhir+json", mustJSON(p)), 200)
	h.none(t, 1500*time.Millisecond)

	entries := audits(t, sub, 4)
	var failed, dead int
	for _, e := range entries {
		switch e["outcome"] {
		case "4":
			failed++
		case "8":
			dead++
			if !strings.HasPrefix(e["outcomeDesc"].(string), "Dead letter after 3 attempts") {
				t.Errorf("dead letter says %q", e["outcomeDesc"])
			}
		}
	}
	if failed != 3 || dead != 1 {
		t.Fatalf("%d failed attempts and %d dead letters, want 3 and 1", failed, dead)
	}
	// Of the delivery and its retries, only the dead letter is kept.
	deliveryMessages(t, pid, map[string]uint64{"dead": 1})
}

// One project's failing endpoint does not hold up another's deliveries:
// deliveries waiting for a retry are not counted among those in progress,
// of which the deliverer takes only so many at once.
func TestSubscriptionRetriesDoNotHoldUpOthers(t *testing.T) {
	_, failingTok := project(t, "Failing endpoint")
	var failed atomic.Int64
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		failed.Add(1)
		w.WriteHeader(500)
	}))
	t.Cleanup(failing.Close)
	// Ten attempts: the retries wait from 1 s to over 4 min.
	sub := newSubscription(t, failingTok, "Patient", failing.URL, map[string]any{"url": subscription.ExtMaxAttempts, "valueInteger": 9})
	t.Cleanup(func() {
		// The retries still scheduled find no subscription, and end,
		// rather than load the tests that follow for minutes.
		expect(t, do(t, "DELETE", "fhir/R4/Subscription/"+sub, failingTok, "", nil), 200)
	})
	const writes = 300 // more than the deliverer takes at once
	for i := 0; i < writes; i++ {
		newPatient(t, failingTok, "Failing")
	}
	if !waitUntil(20*time.Second, func() bool { return failed.Load() >= writes }) {
		t.Fatalf("%d first attempts of %d writes in 20 s", failed.Load(), writes)
	}
	anotherProjectDelivers(t, fmt.Sprintf("%d deliveries retrying", writes))
}

// anotherProjectDelivers checks that a new project's rest-hook is called
// within 5 s of its write while the deliverer is busy as described.
func anotherProjectDelivers(t *testing.T, busy string) {
	t.Helper()
	_, tok := project(t, "Working beside "+busy)
	h := newHook(t, 200)
	newSubscription(t, tok, "Patient", h.srv.URL)
	start := time.Now()
	newPatient(t, tok, "Working")
	c := h.next(t, 5*time.Second)
	t.Logf("another project's delivery came %s after its write, beside %s", c.at.Sub(start), busy)
}

// One project's hanging endpoint leaves a share of the delivery workers
// (16 of 64) free, and another project's deliveries go on meanwhile.
func TestSubscriptionHangingEndpointKeepsToItsShare(t *testing.T) {
	_, hangingTok := project(t, "Hanging endpoint")
	var inFlight, most atomic.Int64
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(200)
	}))
	t.Cleanup(hanging.Close)
	sub := newSubscription(t, hangingTok, "Patient", hanging.URL)
	t.Cleanup(func() {
		// The deliveries still put off find no subscription, and end.
		expect(t, do(t, "DELETE", "fhir/R4/Subscription/"+sub, hangingTok, "", nil), 200)
		close(release)
	})
	const writes = 100 // more than the instance's 64 delivery workers
	for i := 0; i < writes; i++ {
		newPatient(t, hangingTok, "Hanging")
	}
	if !waitUntil(10*time.Second, func() bool { return inFlight.Load() >= 48 }) {
		t.Fatalf("%d deliveries reached the hanging endpoint in 10 s", inFlight.Load())
	}
	anotherProjectDelivers(t, fmt.Sprintf("%d deliveries hanging", inFlight.Load()))
	if n := most.Load(); n != 48 {
		t.Errorf("the hanging endpoint had %d deliveries at once, want 48 (all but a share of the 64 workers)", n)
	}
}

func TestSubscriptionRunsBot(t *testing.T) {
	pid, su := adminProject(t, "Subscribed bots")
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "writer"}))
	expect(t, r, 201)
	tok := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	// The bot records what it was given as a Basic it writes as itself.
	bot := newBot(t, su, pid, "recorder", "", `exports.handler = async (medplum, event) => {
		const input = event.input;
		const target = input.deletedResource ?? input;
		await medplum.createResource({resourceType: 'Basic', code: {text: event.traceId},
			identifier: [{system: 'seen', value: (input.deletedResource ? 'deleted:' : 'changed:') + target.id}]});
	};`, "recorder.js")
	sub := newSubscription(t, tok, "Patient", "Bot/"+bot)
	recorded := func(want string) map[string]any {
		t.Helper()
		var found []map[string]any
		seen := waitUntil(10*time.Second, func() bool {
			r := do(t, "GET", "fhir/R4/Basic?identifier=seen|"+want, tok, "", nil)
			expect(t, r, 200)
			_, found = bundleOf(t, r)
			return len(found) == 1
		})
		if !seen {
			t.Fatalf("the bot never recorded %s; its audit: %v", want, audits(t, sub, 0))
		}
		return found[0]
	}
	p := newPatient(t, tok, "Botty")
	id := p["id"].(string)
	// The delete waits for the create's run: a create not yet delivered
	// when its resource is deleted is dropped (Medplum's rule), which once
	// made this test flaky.
	recorded("changed:" + id)
	// The bot's event.traceId is the write's trace.
	const trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	expect(t, do(t, "DELETE", "fhir/R4/Patient/"+id, tok, "", nil, "traceparent", trace), 200)
	if got := recorded("deleted:" + id)["code"]; got.(map[string]any)["text"] != trace {
		t.Errorf("the bot's event.traceId: %v, want the delete's trace %s", got, trace)
	}
	// The bot's own AuditEvents name the subscription.
	if n := len(audits(t, sub, 2)); n != 2 {
		t.Fatalf("%d bot AuditEvents name the subscription, want 2", n)
	}
}

// $resend, Medplum's resendSubscriptions: an admin has a resource sent
// again to the subscriptions it meets (as an update unless told), or to
// one of them; the resource is not changed, and others may not ask.
func TestSubscriptionResend(t *testing.T) {
	pid, su := adminProject(t, "Resend")
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "writer"}))
	expect(t, r, 201)
	tok := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	p := newPatient(t, tok, "Resent") // before any subscription: nothing sent
	id := p["id"].(string)
	// Writes are stamped to the millisecond, and a subscription written in
	// the change's millisecond is sent it: wait for the next one.
	written, _ := time.Parse(time.RFC3339Nano, p["meta"].(map[string]any)["lastUpdated"].(string))
	testenv.Eventually(t, "the next millisecond", func() bool { return time.Now().Truncate(time.Millisecond).After(written) })
	h, h2 := newHook(t, 200), newHook(t, 200)
	sub := newSubscription(t, tok, "Patient", h.srv.URL)
	newSubscription(t, tok, "Patient", h2.srv.URL)
	path := "fhir/R4/Patient/" + id + "/$resend"

	expect(t, do(t, "POST", path, tok, "application/json", []byte(`{}`)), 403)
	admin := projectAdmin(t, su, pid, "resend-admin@example.com")
	for i, asker := range []string{admin, su} { // a second resend is sent again, not taken for a duplicate
		expect(t, do(t, "POST", path, asker, "application/json", []byte(`{}`)), 200)
		for _, hk := range []*hook{h, h2} {
			c := hk.next(t, 5*time.Second)
			var got map[string]any
			_ = json.Unmarshal(c.body, &got)
			if c.header.Get("X-Medplum-Interaction") != "update" || got["id"] != id {
				t.Fatalf("resend %d: %s %s", i, c.header.Get("X-Medplum-Interaction"), c.body)
			}
		}
	}
	expect(t, do(t, "POST", path, su, "application/json", mustJSON(map[string]any{"interaction": "delete", "subscription": "Subscription/" + sub})), 200)
	c := h.next(t, 5*time.Second)
	if c.header.Get("X-Medplum-Interaction") != "delete" || string(c.body) != "{}" || c.header.Get("X-Medplum-Deleted-Resource") != "Patient/"+id {
		t.Fatalf("resent delete: %v %s", c.header, c.body)
	}
	h2.none(t, 500*time.Millisecond)

	expectOutcome(t, do(t, "POST", path, su, "application/json", []byte(`{"interaction":"patch"}`)), 400, "Invalid interaction: patch", "interaction")
	expect(t, do(t, "POST", path, su, "application/json", []byte(`{"interaction":`)), 400)
	expect(t, do(t, "POST", path, su, "text/plain", []byte(`{}`)), 415)
	expect(t, do(t, "POST", "fhir/R4/Patient/00000000-0000-4000-8000-000000000001/$resend", su, "application/json", []byte(`{}`)), 404)
	// Another project's admin does not reach the resource.
	other, _ := adminProject(t, "Resend elsewhere")
	expect(t, do(t, "POST", path, projectAdmin(t, su, other, "resend-other@example.com"), "application/json", []byte(`{}`)), 404)
	r = do(t, "GET", "fhir/R4/Patient/"+id, tok, "", nil)
	expect(t, r, 200)
	if v := r.json(t)["meta"].(map[string]any)["versionId"]; v != p["meta"].(map[string]any)["versionId"] {
		t.Fatalf("the resource changed: version %v", v)
	}
}

func TestSubscriptionIsolation(t *testing.T) {
	pid, su := adminProject(t, "Sub isolation")
	// The author may read only Patients named Visible.
	author := policyClient(t, su, pid, map[string]any{"resourceType": "Patient", "criteria": "Patient?name=visible"},
		map[string]any{"resourceType": "Subscription"})
	_, other := project(t, "Sub isolation, other")
	h := newHook(t, 200)
	newSubscription(t, author, "Patient", h.srv.URL)
	newPatient(t, other, "Visible") // another project's
	// The project's own, written by the super admin into the project.
	for _, name := range []string{"Hidden", "Visible"} {
		r := do(t, "POST", "fhir/R4/Patient", su, "application/fhir+json", mustJSON(map[string]any{
			"resourceType": "Patient", "name": []any{map[string]any{"family": name}}, "meta": map[string]any{"project": pid},
		}))
		expect(t, r, 201)
	}
	c := h.next(t, 5*time.Second)
	if !strings.Contains(string(c.body), `"Visible"`) || !strings.Contains(string(c.body), pid) {
		t.Fatalf("delivered %s, want the project's visible Patient only", c.body)
	}
	h.none(t, 500*time.Millisecond)
}

func TestSubscriptionRefusesPrivateAddresses(t *testing.T) {
	parallelIn(t, ownStacks)
	parallelStack(t, map[string]string{"PINION_REST_HOOK_ALLOW_PRIVATE": "false"})
	_, tok := project(t, "SSRF")
	h := newHook(t, 200)
	sub := newSubscription(t, tok, "Patient", h.srv.URL, map[string]any{"url": subscription.ExtMaxAttempts, "valueInteger": 0})
	newPatient(t, tok, "Nosy")
	entries := audits(t, sub, 2)
	h.none(t, 200*time.Millisecond)
	var refused bool
	for _, e := range entries {
		if e["outcome"] == "4" && strings.Contains(e["outcomeDesc"].(string), "loopback, link-local or private") {
			refused = true
		}
	}
	if !refused {
		t.Fatalf("no refused attempt among %v", entries)
	}
}

func TestSubscriptionWriteChecks(t *testing.T) {
	_, tok := project(t, "Sub checks")
	for _, c := range []struct {
		criteria, endpoint, want, expr string
	}{
		{"Patient?nope=1", "https://example.com/h", "Invalid criteria", "Subscription.criteria"},
		{"Nothing", "https://example.com/h", "Unknown resource type", "Subscription.criteria"},
		{"Patient", "ftp://example.com/h", "http(s) URL or Bot", "Subscription.channel.endpoint"},
	} {
		r := do(t, "POST", "fhir/R4/Subscription", tok, "application/fhir+json", mustJSON(map[string]any{
			"resourceType": "Subscription", "status": "active", "reason": "x", "criteria": c.criteria,
			"channel": map[string]any{"type": "rest-hook", "endpoint": c.endpoint},
		}))
		expectOutcome(t, r, 400, "", c.expr)
		if !strings.Contains(r.outcomeText(t), c.want) {
			t.Errorf("%s %s: %q, want %q", c.criteria, c.endpoint, r.outcomeText(t), c.want)
		}
	}
}

// deliveriesSurviveCrash writes Patients while crash kills the service that
// delivers them (SIGKILL) and starts it again: every create must reach the
// rest-hook, and only a delivery in flight at the kill (sent, its answer
// not yet acknowledged) may come twice.
func deliveriesSurviveCrash(t *testing.T, tok string, crash func()) {
	t.Helper()
	h := newHook(t, 200)
	h.delay = 100 * time.Millisecond // so that deliveries are in flight at the kill
	newSubscription(t, tok, "Patient?name=crash", h.srv.URL,
		map[string]any{"url": subscription.ExtInteraction, "valueCode": "create"})
	const before, after = 40, 80
	want := map[string]bool{}
	for i := 0; i < before+after; i++ {
		if i == before {
			crash()
		}
		want[newPatient(t, tok, "Crash")["id"].(string)] = true
	}
	seen := map[string]int{}
	deadline := time.After(60 * time.Second)
	for len(seen) < len(want) {
		select {
		case c := <-h.received:
			var p struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(c.body, &p)
			if !want[p.ID] {
				t.Fatalf("delivered a Patient never written: %s", c.body)
			}
			seen[p.ID]++
		case <-deadline:
			t.Fatalf("%d of %d creates delivered after a crash of botexec", len(seen), len(want))
		}
	}
	h.none(t, time.Second) // no late repeats
	repeated := 0
	for _, n := range seen {
		repeated += n - 1
	}
	t.Logf("deliveries across a botexec crash: %d writes, 0 lost, %d repeated", len(want), repeated)
	if repeated > 64 { // at most the deliveries in flight at the kill
		t.Fatalf("%d deliveries repeated, more than were in flight", repeated)
	}
}

func TestSubscriptionFHIRPathCriteria(t *testing.T) {
	_, tok := project(t, "FHIRPath criteria")
	h := newHook(t, 200)
	newSubscription(t, tok, "Patient", h.srv.URL,
		map[string]any{"url": subscription.ExtFHIRPath, "valueString": "%previous.active != %current.active"})
	p := newPatient(t, tok, "Toggle") // a create: no previous active to differ from
	id := p["id"].(string)
	put := func(k string, v any) {
		p[k] = v
		expect(t, do(t, "PUT", "fhir/R4/Patient/"+id, tok, "application/fhir+json", mustJSON(p)), 200)
	}
	// Absent to false is no change in FHIRPath (empty != false is empty),
	// as in Medplum; false to true is; a change of gender is not.
	put("active", false)
	put("active", true)
	put("gender", "other")
	c := h.next(t, 5*time.Second)
	if !strings.Contains(string(c.body), `"active":true`) || strings.Contains(string(c.body), `"gender":"other"`) {
		t.Fatalf("delivered %s, want the update that set active", c.body)
	}
	h.none(t, 500*time.Millisecond)
}

// A binding token is the subscription author's alone: another member who
// may read the Subscription would otherwise receive what the author's
// policy lets through.
func TestWSBindingTokenIsTheAuthors(t *testing.T) {
	pid, su := adminProject(t, "WS binding")
	client := func(name string) string {
		r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": name}))
		expect(t, r, 201)
		return clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	}
	author, other := client("author"), client("other")
	r := do(t, "POST", "fhir/R4/Subscription", author, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "Subscription", "status": "active", "reason": "ws", "criteria": "Patient",
		"channel": map[string]any{"type": "websocket"},
	}))
	expect(t, r, 201)
	id := r.json(t)["id"].(string)
	expect(t, do(t, "GET", "fhir/R4/Subscription/"+id, other, "", nil), 200) // readable to both
	expectOutcome(t, do(t, "GET", "fhir/R4/Subscription/"+id+"/$get-ws-binding-token", other, "", nil), 403, "author")
	r = do(t, "GET", "fhir/R4/Subscription/"+id+"/$get-ws-binding-token", author, "", nil)
	expect(t, r, 200)
	if !strings.Contains(string(r.body), `"websocket-url"`) || !strings.Contains(string(r.body), `"token"`) {
		t.Fatalf("binding token answer %s", r.body)
	}
	// A token for the API it is not.
	var params struct {
		Parameter []struct{ Name, ValueString string } `json:"parameter"`
	}
	_ = json.Unmarshal(r.body, &params)
	for _, p := range params.Parameter {
		if p.Name == "token" {
			expect(t, do(t, "GET", "fhir/R4/Patient", p.ValueString, "", nil), 401)
		}
	}
}
