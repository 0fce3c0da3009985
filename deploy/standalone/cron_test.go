package standalone

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/services/botexec"
)

// stackClock is the scheduled bots' clock in TestScheduledBot.
type stackClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stackClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *stackClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// A bot with Bot.cronString runs on its schedule, with two botexec
// instances, once per tick: as its own membership (it writes an
// Observation), with the Bot as its input, recorded by an AuditEvent that
// says it was scheduled. Schedules are refused at write when they do not
// parse, or when the project's features lack cron.
func TestScheduledBot(t *testing.T) {
	st := ownStack(t, nil)
	su := superToken(t)
	clk := &stackClock{now: time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)}

	// Two botexec instances on the test's clock, in place of the stack's.
	if err := st.StopService("botexec"); err != nil {
		t.Fatal(err)
	}
	build := func() (infra.Service, error) {
		bc := botexec.NewConfig(testConfig(t.TempDir(), nil))
		bc.JS, bc.EventStream = st.conns.JS, infra.ResourceStream
		bc.CronClock, bc.CronPoll = clk, 20*time.Millisecond
		return botexec.New(bc, st.conns.NC, st.conns.Repo, st.conns.Sessions, slog.New(slog.NewTextHandler(io.Discard, nil))), nil
	}
	st.services["botexec"].build = build
	if err := st.StartService(context.Background(), "botexec"); err != nil {
		t.Fatal(err)
	}
	second, _ := build()
	if err := second.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Stop(context.Background()) })

	r := do(t, "POST", "admin/Project", su, "application/json", mustJSON(map[string]any{"resourceType": "Project", "name": "Cron", "features": []any{"bots", "cron"}}))
	expect(t, r, 201)
	pid := r.json(t)["id"].(string)
	r = do(t, "POST", "admin/Project", su, "application/json", mustJSON(map[string]any{"resourceType": "Project", "name": "No cron", "features": []any{"bots"}}))
	expect(t, r, 201)
	plain := r.json(t)["id"].(string)

	r = do(t, "POST", "admin/projects/"+plain+"/bot", su, "application/json", mustJSON(map[string]any{"name": "b", "cronString": "* * * * *"}))
	expect(t, r, 400)
	if !strings.Contains(r.outcomeText(t), "cron") {
		t.Fatalf("refusal without the feature: %s", r.body)
	}
	r = do(t, "POST", "admin/projects/"+pid+"/bot", su, "application/json", mustJSON(map[string]any{"name": "b", "cronString": "* * * *"}))
	expect(t, r, 400)
	if !strings.Contains(r.outcomeText(t), "Bot.cronString") {
		t.Fatalf("refusal of a bad cron string: %s", r.body)
	}

	code := `export async function handler(medplum, event) {
  await medplum.createResource({resourceType: 'Observation', status: 'final',
    code: {text: 'tick'}, valueString: event.input.resourceType + '/' + event.input.id + ' ' + event.contentType});
  return 'ok';
}`
	bot := newBot(t, su, pid, "ticker", "", code, "ticker.ts")
	r = do(t, "GET", "fhir/R4/Bot/"+bot, su, "", nil)
	expect(t, r, 200)
	body := r.json(t)
	body["cronString"] = "* * * * *"
	r = do(t, "PUT", "fhir/R4/Bot/"+bot, su, "application/fhir+json", mustJSON(body))
	expect(t, r, 200)
	body["cronString"] = "60 * * * *"
	r = do(t, "PUT", "fhir/R4/Bot/"+bot, su, "application/fhir+json", mustJSON(body))
	expect(t, r, 400)

	count := func(path string) int {
		r := do(t, "GET", path, su, "", nil)
		expect(t, r, 200)
		n, _ := r.json(t)["total"].(float64)
		return int(n)
	}
	// The clock moves once the schedule holds the bot (its first run is
	// counted from the clock when it is taken up).
	kv, err := st.conns.JS.KeyValue(context.Background(), "pinion_bot_cron")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the bot to be scheduled", func() bool {
		_, err := kv.Get(context.Background(), bot)
		return err == nil
	})
	ticks := "fhir/R4/Observation?_project=" + pid + "&code:text=tick&_total=accurate"
	audits := "fhir/R4/AuditEvent?entity=Bot/" + bot + "&type=execute&_total=accurate" // runs, not changes of the bot
	for i := 1; i <= 3; i++ {
		clk.Add(time.Minute)
		if !waitUntil(20*time.Second, func() bool { return count(ticks) >= i && count(audits) >= i }) {
			t.Fatalf("tick %d: %d runs, %d audit events", i, count(ticks), count(audits))
		}
	}
	r = do(t, "GET", ticks, su, "", nil)
	expect(t, r, 200)
	entries, _ := r.json(t)["entry"].([]any)
	if len(entries) != 3 {
		t.Fatalf("%d runs for 3 ticks: %s", len(entries), r.body)
	}
	for _, e := range entries {
		res := e.(map[string]any)["resource"].(map[string]any)
		if res["valueString"] != "Bot/"+bot+" application/fhir+json" {
			t.Fatalf("a run's input: %v", res["valueString"])
		}
		if by, _ := res["meta"].(map[string]any)["author"].(map[string]any)["reference"].(string); by != "Bot/"+bot {
			t.Fatalf("a run wrote as %q, not as the bot", by)
		}
	}
	r = do(t, "GET", audits, su, "", nil)
	for _, e := range r.json(t)["entry"].([]any) {
		ev := e.(map[string]any)["resource"].(map[string]any)
		sub, _ := ev["subtype"].([]any)
		if len(sub) != 1 || sub[0].(map[string]any)["code"] != "scheduled" {
			t.Fatalf("a scheduled run's AuditEvent: %v", ev)
		}
	}
}
