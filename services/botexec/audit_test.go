package botexec

import (
	"encoding/json"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

func TestMaskSecrets(t *testing.T) {
	secrets := map[string]any{
		"KEY":   map[string]any{"name": "KEY", "valueString": `a"b<c>\d`},
		"PORT":  map[string]any{"name": "PORT", "valueInteger": float64(8443)},
		"BIG":   map[string]any{"name": "BIG", "valueDecimal": float64(12345678)},
		"FLAG":  map[string]any{"name": "FLAG", "valueBoolean": true},
		"SHORT": map[string]any{"name": "SHORT", "valueString": "abc"},
	}
	cases := map[string]string{
		`key a"b<c>\d`:            `key ****`,
		`{"k":"a\"b<c>\\d"}`:      `{"k":"****"}`,
		`port 8443, big 12345678`: `port ****, big ****`,
		`flag true, short abc`:    `flag true, short abc`,
	}
	for in, want := range cases {
		if got := maskSecrets(in, secrets); got != want {
			t.Errorf("maskSecrets(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAuditRecord(t *testing.T) {
	start := time.Date(2026, 3, 4, 5, 6, 7, 100, time.FixedZone("CET", 3600))
	end := start.Add(1500 * time.Millisecond)
	b := &bot{ID: "b1", Project: "p1", Name: "echo"}
	requester := &bus.Principal{Profile: "Practitioner/1", Project: "p1"}
	runAs := &bus.Principal{Profile: "Bot/b1", Project: "p1"}
	secrets := map[string]any{"KEY": map[string]any{"name": "KEY", "valueString": "s3cr3t"}}
	long := strings.Repeat("a", maxAuditLog) + "the end"
	cases := []struct {
		name    string
		res     sandbox.Result
		outcome string
		desc    string // "" for none
	}{
		{"success", sandbox.Result{Kind: sandbox.KindString, Log: "hello\nworld"}, "0", "hello\nworld"},
		{"success without log", sandbox.Result{Kind: sandbox.KindUndefined}, "0", ""},
		{"failure", sandbox.Result{Log: "trying", Err: &sandbox.BotError{Message: "boom"}}, "4", "trying\nError: boom"},
		{"failure without log", sandbox.Result{Err: &sandbox.BotError{Message: "boom"}}, "4", "\nError: boom"},
		{"limit", sandbox.Result{Err: &sandbox.BotError{Message: "Bot timed out", Limit: sandbox.LimitTimeout}}, "4", "\nError: Bot timed out"},
		{"secrets masked", sandbox.Result{Log: "key s3cr3t", Err: &sandbox.BotError{Message: "GET https://x/?k=s3cr3t"}}, "4", "key ****\nError: GET https://x/?k=****"},
		{"log at the bound", sandbox.Result{Log: long[:maxAuditLog]}, "0", long[:maxAuditLog]},
		{"log past the bound keeps its tail", sandbox.Result{Log: long}, "0", long[len(long)-maxAuditLog:]},
		{"error past the bound kept", sandbox.Result{Log: long, Err: &sandbox.BotError{Message: "boom"}}, "4", (long + "\nError: boom")[len(long)+len("\nError: boom")-maxAuditLog:]},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := auditRecord(b, requester, runAs, start, end, &tc.res, secrets)
			want := map[string]any{
				"resourceType": "AuditEvent",
				"type":         map[string]any{"system": "https://medplum.com/CodeSystem/audit-event", "code": "execute"},
				"recorded":     "2026-03-04T04:06:08.5000001Z",
				"period":       map[string]any{"start": "2026-03-04T04:06:07.0000001Z", "end": "2026-03-04T04:06:08.5000001Z"},
				"outcome":      tc.outcome,
				"agent": []any{
					map[string]any{"who": map[string]any{"reference": "Practitioner/1"}, "requestor": true},
					map[string]any{"who": map[string]any{"reference": "Bot/b1"}, "requestor": false},
				},
				"source": map[string]any{"observer": map[string]any{"reference": "Bot/b1"}},
				"entity": []any{map[string]any{
					"what": map[string]any{"reference": "Bot/b1"},
					"role": map[string]any{"system": "http://terminology.hl7.org/CodeSystem/object-role", "code": "4", "display": "Domain Resource"},
				}},
			}
			if tc.desc != "" {
				want["outcomeDesc"] = tc.desc
			}
			// The typed record writes the JSON the map it replaced wrote.
			m, err := resource.Map(ev)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(m)
			wantJSON, _ := json.Marshal(want)
			if string(got) != string(wantJSON) {
				t.Fatalf("%s\nwant %s", got, wantJSON)
			}
			if len(ev.OutcomeDesc) > maxAuditLog {
				t.Fatalf("outcomeDesc of %d bytes", len(ev.OutcomeDesc))
			}
		})
	}
}

func TestByProject(t *testing.T) {
	evs := map[int]*resource.AuditEvent{}
	ev := func(n int) *resource.AuditEvent {
		if evs[n] == nil {
			evs[n] = &resource.AuditEvent{Outcome: strconv.Itoa(n)}
		}
		return evs[n]
	}
	batch := []auditEvent{
		{project: "p1", bot: "b1", ev: ev(1)},
		{project: "p2", bot: "b2", ev: ev(2)},
		{project: "p1", bot: "b3", ev: ev(3)},
		{project: "p1", bot: "b1", ev: ev(4)},
	}
	want := map[string][]*resource.AuditEvent{"p1": {ev(1), ev(3), ev(4)}, "p2": {ev(2)}}
	if got := byProject(batch); !reflect.DeepEqual(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
	if got := byProject(nil); len(got) != 0 {
		t.Fatalf("%v", got)
	}
}

// auditQueueOf is a Service with only its audit queue, holding n events.
func auditQueueOf(n int) *Service {
	s := &Service{audits: make(chan auditEvent, 2*auditBatch), auditQuit: make(chan struct{})}
	for i := range n {
		s.audits <- auditEvent{project: "p1", bot: "b" + strconv.Itoa(i)}
	}
	return s
}

func TestDrainAudits(t *testing.T) {
	cases := []struct{ queued, held, want int }{
		{0, 0, 0},
		{3, 0, 3},
		{3, 2, 5},
		{auditBatch, 0, auditBatch},
		{auditBatch + 100, 0, auditBatch},
		{100, auditBatch - 10, auditBatch},
		{5, auditBatch, auditBatch},
	}
	for _, tc := range cases {
		s := auditQueueOf(tc.queued)
		batch := s.drain(make([]auditEvent, tc.held))
		if len(batch) != tc.want || len(s.audits) != tc.queued-(tc.want-tc.held) {
			t.Errorf("%d queued, %d held: batch of %d, %d left; want %d", tc.queued, tc.held, len(batch), len(s.audits), tc.want)
		}
	}
}

func TestGatherAudits(t *testing.T) {
	t.Run("full batch taken as it is", func(t *testing.T) {
		s := auditQueueOf(5)
		if batch := s.gather(make([]auditEvent, auditBatch)); len(batch) != auditBatch || len(s.audits) != 5 {
			t.Fatalf("batch of %d, %d left", len(batch), len(s.audits))
		}
	})
	t.Run("up to a batch", func(t *testing.T) {
		s := auditQueueOf(auditBatch + 7)
		if batch := s.gather(make([]auditEvent, 1)); len(batch) != auditBatch || len(s.audits) != 8 {
			t.Fatalf("batch of %d, %d left", len(batch), len(s.audits))
		}
	})
	t.Run("told to quit: what is queued", func(t *testing.T) {
		s := auditQueueOf(0)
		close(s.auditQuit)
		// Queued after the quit: still written.
		s.audits <- auditEvent{project: "p1"}
		s.audits <- auditEvent{project: "p2"}
		batch := s.gather(make([]auditEvent, 1))
		if len(batch) != 3 || len(s.audits) != 0 {
			t.Fatalf("batch of %d, %d left", len(batch), len(s.audits))
		}
	})
	t.Run("nothing more", func(t *testing.T) {
		s := auditQueueOf(0)
		if batch := s.gather(make([]auditEvent, 1)); len(batch) != 1 {
			t.Fatalf("batch of %d", len(batch))
		}
	})
}

// Told to quit with nothing queued, a writer returns without writing.
func TestWriteAuditsQuits(t *testing.T) {
	s := auditQueueOf(0)
	close(s.auditQuit)
	s.auditWG.Add(1)
	s.writeAudits() // returns: with a write to make, the nil repo would panic
	s.auditWG.Wait()
}

// audit never blocks the execution: with the queue full the event is
// dropped (and logged).
func TestAuditQueueFull(t *testing.T) {
	s := &Service{audits: make(chan auditEvent, 1), log: slog.New(slog.DiscardHandler)}
	b := &bot{ID: "b1", Project: "p1"}
	p := &bus.Principal{Profile: "Practitioner/1"}
	for range 3 {
		s.audit(b, p, p, time.Now(), &sandbox.Result{}, nil, "", time.Time{})
	}
	a := <-s.audits
	if a.project != "p1" || a.bot != "b1" || a.ev.ResourceType != "AuditEvent" || len(s.audits) != 0 {
		t.Fatalf("%+v", a)
	}
}

// auditEventTrigger and auditEventDestination, as Medplum reads them.
func TestAuditTriggerAndDestination(t *testing.T) {
	p := &bus.Principal{Profile: "Practitioner/1"}
	failed := &sandbox.Result{Err: &sandbox.BotError{Message: "boom"}}
	logged := &sandbox.Result{Log: "hello"}
	cases := []struct {
		trigger string
		dest    []string
		res     *sandbox.Result
		want    int
	}{
		{"", nil, &sandbox.Result{}, 1},
		{"always", nil, &sandbox.Result{}, 1},
		{"never", nil, failed, 0},
		{"on-error", nil, &sandbox.Result{}, 0},
		{"on-error", nil, failed, 1},
		{"on-output", nil, &sandbox.Result{}, 0},
		{"on-output", nil, logged, 1},
		{"always", []string{"log"}, failed, 0},
		{"always", []string{"log", "resource"}, failed, 1},
	}
	for _, c := range cases {
		s := &Service{audits: make(chan auditEvent, 4), log: slog.New(slog.DiscardHandler)}
		b := &bot{ID: "b1", Project: "p1", AuditTrigger: c.trigger, AuditDestination: c.dest}
		s.audit(b, p, p, time.Now(), c.res, nil, "", time.Time{})
		if len(s.audits) != c.want {
			t.Errorf("trigger %q, destinations %v, error %v, log %q: %d AuditEvents, want %d",
				c.trigger, c.dest, c.res.Err != nil, c.res.Log, len(s.audits), c.want)
		}
	}
}

// A run a subscription started names it as a second entity, written as
// the subscriptions package builds it.
func TestAuditSubscriberEntity(t *testing.T) {
	s := &Service{audits: make(chan auditEvent, 1), log: slog.New(slog.DiscardHandler)}
	p := &bus.Principal{Profile: "Practitioner/1"}
	s.audit(&bot{ID: "b1", Project: "p1"}, p, p, time.Now(), &sandbox.Result{}, nil, "Subscription/s1", time.Time{})
	m, err := resource.Map((<-s.audits).ev)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(m["entity"])
	want := `[{"role":{"code":"4","display":"Domain Resource","system":"http://terminology.hl7.org/CodeSystem/object-role"},"what":{"reference":"Bot/b1"}},` +
		`{"role":{"code":"9","display":"Subscriber"},"what":{"reference":"Subscription/s1"}}]`
	if string(got) != want {
		t.Fatalf("entity %s\nwant %s", got, want)
	}
}
