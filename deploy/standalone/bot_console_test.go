package standalone

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A bot's page in the console, in Chromium: its schedule (a bad cron
// string refused with the API's own words, a good one saved with its zone,
// its next run as the scheduler holds it), its deployed versions and a
// rollback to an older one (a new version running the old code), its own
// secrets (names listed, values never shown; removable), and its latest
// runs, a scheduled one marked as such.
func TestBotConsoleInBrowser(t *testing.T) {
	parallelIn(t, browsers)
	su := superToken(t)
	r := do(t, "POST", "admin/Project", su, "application/json", mustJSON(map[string]any{"resourceType": "Project", "name": "Bot console", "features": []any{"bots", "cron"}}))
	expect(t, r, 201)
	pid := r.json(t)["id"].(string)
	admin := "bot-console-" + pid + "@example.com"
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Bo", "lastName", "Tadmin",
		"email", admin, "password", "bot console password", "admin", true)
	bot := newBot(t, su, pid, "console ticker", "", `export async function handler() { return 'one'; }`, "index.ts")
	expect(t, do(t, "POST", "fhir/R4/Bot/"+bot+"/$deploy", su, "application/json",
		mustJSON(map[string]any{"code": `export async function handler() { return 'two'; }`, "filename": "index.ts"})), 200)
	execute := func() string {
		t.Helper()
		r := do(t, "POST", "fhir/R4/Bot/"+bot+"/$execute", su, "application/json", []byte(`{}`))
		expect(t, r, 200)
		return strings.Trim(string(r.body), `"`)
	}

	ctx, consoleURL := consoleSignIn(t, admin, "bot console password")
	botURL := consoleURL + "/bots/" + bot
	run(t, ctx, chromedp.Navigate(botURL), chromedp.WaitVisible(chromedp.ID("cron")))
	if text := pageText(t, ctx); !strings.Contains(text, "Not scheduled.") {
		t.Fatalf("a bot without a schedule: %s", text)
	}

	// A bad schedule: refused beside the field, in the API's words.
	body := do(t, "GET", "fhir/R4/Bot/"+bot, su, "", nil).json(t)
	body["cronString"] = "61 * * * *"
	r = do(t, "PUT", "fhir/R4/Bot/"+bot, su, "application/fhir+json", mustJSON(body))
	expect(t, r, 400)
	refusal := r.outcomeText(t)
	run(t, ctx, chromedp.SendKeys(chromedp.ID("cron"), "61 * * * *"),
		chromedp.Click(chromedp.Search(`//button[.="Save schedule"]`)))
	waitText(t, ctx, refusal)
	if v := get(t, ctx, chromedp.AttributeValue(chromedp.ID("cron"), "aria-invalid")).Value; v != "true" {
		t.Fatalf("the refused field is not marked: %q", v)
	}

	// A good one, in a zone: stored as CRON_TZ=<zone> <cron>; the next run
	// is the scheduler's, shown once it has taken the bot up.
	run(t, ctx, chromedp.SetValue(chromedp.ID("cron"), "* * * * *"), chromedp.SetValue(chromedp.ID("zone"), "Europe/Paris"),
		chromedp.Click(chromedp.Search(`//button[.="Save schedule"]`)))
	waitText(t, ctx, "The schedule was saved.")
	if got := do(t, "GET", "fhir/R4/Bot/"+bot, su, "", nil).json(t)["cronString"]; got != "CRON_TZ=Europe/Paris * * * * *" {
		t.Fatalf("Bot.cronString %v", got)
	}
	var next string
	eventually(t, 20*time.Second, "the scheduler to take the bot up (its next run)", func() bool {
		r := do(t, "GET", "admin/projects/"+pid+"/bot/"+bot+"/schedule", su, "", nil)
		expect(t, r, 200)
		next, _ = r.json(t)["next"].(string)
		return next != ""
	})
	if at, err := time.Parse(time.RFC3339, next); err != nil || at.Second() != 0 || at.Before(time.Now().Add(-time.Minute)) || at.After(time.Now().Add(2*time.Minute)) {
		t.Fatalf("next run %q (%v), want the next minute", next, err)
	}
	// A tick may pass between the two reads: the page shows the next run
	// read before it or after it.
	run(t, ctx, chromedp.Navigate(botURL), chromedp.WaitVisible(chromedp.ID("next-run")))
	shown := get(t, ctx, chromedp.Text(chromedp.ID("next-run")))
	after, _ := do(t, "GET", "admin/projects/"+pid+"/bot/"+bot+"/schedule", su, "", nil).json(t)["next"].(string)
	if shown != "Next run: "+next+" (UTC)." && shown != "Next run: "+after+" (UTC)." {
		t.Fatalf("the page's next run %q, want %s or %s", shown, next, after)
	}
	if v := get(t, ctx, chromedp.Value(chromedp.ID("zone"))); v != "Europe/Paris" {
		t.Fatalf("zone field %q", v)
	}
	shot(t, ctx, "console-bot-schedule")

	// Versions: the current one and the first, which rolls back.
	// Every version here was deployed as index.ts: one a row.
	rows := func() int {
		return strings.Count(get(t, ctx, chromedp.Text(chromedp.CSS("#versions tbody"))), "index.ts")
	}
	if n := rows(); n != 2 {
		t.Fatalf("%d deployed versions listed, want 2: %s", n, pageText(t, ctx))
	}
	if execute() != "two" {
		t.Fatal("the current version is not the second")
	}
	run(t, ctx, chromedp.Click(chromedp.Search(`//button[.="Roll back to this version"]`)))
	waitText(t, ctx, "deployed again, as a new version")
	if got := execute(); got != "one" {
		t.Fatalf("after the rollback the bot answered %q", got)
	}
	if n := rows(); n != 3 {
		t.Fatalf("%d deployed versions after the rollback, want 3: %s", n, pageText(t, ctx))
	}

	// Its own secrets: the name is listed, the value never shown.
	run(t, ctx, chromedp.SendKeys(chromedp.ID("secret-name"), "LAB_TOKEN"),
		chromedp.SendKeys(chromedp.ID("secret-value"), "v4lue-never-shown"),
		chromedp.Click(chromedp.Search(`//button[.="Save secret"]`)))
	text := waitText(t, ctx, "The bot's secrets were saved.")
	html := get(t, ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if !strings.Contains(text, "LAB_TOKEN") || strings.Contains(html, "v4lue-never-shown") {
		t.Fatalf("after saving a secret: %s", text)
	}
	r = do(t, "GET", "admin/projects/"+pid+"/bot/"+bot+"/secrets", su, "", nil)
	if !strings.Contains(string(r.body), "v4lue-never-shown") {
		t.Fatalf("the secret was not stored: %s", r.body)
	}
	shot(t, ctx, "console-bot-versions-secrets")
	run(t, ctx, chromedp.Click(chromedp.Search(`//button[@name="remove" and @value="LAB_TOKEN"]`)))
	waitText(t, ctx, "No secrets of its own.")
	r = do(t, "GET", "admin/projects/"+pid+"/bot/"+bot+"/secrets", su, "", nil)
	if strings.TrimSpace(string(r.body)) != "[]" {
		t.Fatalf("after removing the secret: %s", r.body)
	}

	// The scheduled run of the minute shows in the latest runs, marked as
	// scheduled, beside the runs on request.
	// The page lists the runs' AuditEvents: wait for the scheduled run's,
	// then load the page once.
	eventually(t, 90*time.Second, "the AuditEvent of a scheduled run", func() bool {
		r := do(t, "GET", "fhir/R4/AuditEvent?entity=Bot/"+bot+"&_count=100", su, "", nil)
		expect(t, r, 200)
		_, entries := bundleOf(t, r)
		for _, e := range entries {
			if sub, _ := e["subtype"].([]any); len(sub) == 1 && sub[0].(map[string]any)["code"] == "scheduled" {
				return true
			}
		}
		return false
	})
	run(t, ctx, chromedp.Navigate(botURL), chromedp.WaitVisible(chromedp.ID("runs")))
	if text := pageText(t, ctx); !strings.Contains(text, "scheduled, due ") || !strings.Contains(text, "on request") {
		t.Fatalf("no scheduled run listed beside the runs on request: %s", text)
	}
	shot(t, ctx, "console-bot-runs")
}
