package standalone

import (
	"testing"
	"time"
)

// GET .../bot/:botId/schedule answers what the scheduler holds, for the
// project's admins only: nothing for a bot without a schedule, the
// schedule and its next minute for one with it; a member who is no admin
// is refused, and a bot of another project is not found.
func TestBotScheduleRoute(t *testing.T) {
	su := superToken(t)
	r := do(t, "POST", "admin/Project", su, "application/json", mustJSON(map[string]any{"resourceType": "Project", "name": "Schedule route", "features": []any{"bots", "cron"}}))
	expect(t, r, 201)
	pid := r.json(t)["id"].(string)
	bot := newBot(t, su, pid, "scheduled", "", "", "")
	path := "admin/projects/" + pid + "/bot/" + bot + "/schedule"
	r = do(t, "GET", path, su, "", nil)
	expect(t, r, 200)
	if got := r.json(t); got["scheduled"] != false || got["next"] != nil {
		t.Fatalf("a bot without a schedule: %s", r.body)
	}

	body := do(t, "GET", "fhir/R4/Bot/"+bot, su, "", nil).json(t)
	body["cronString"] = "CRON_TZ=America/New_York 30 6 * * 1"
	expect(t, do(t, "PUT", "fhir/R4/Bot/"+bot, su, "application/fhir+json", mustJSON(body)), 200)
	var got map[string]any
	eventually(t, 20*time.Second, "the bot to be scheduled", func() bool {
		r = do(t, "GET", path, su, "", nil)
		expect(t, r, 200)
		got = r.json(t)
		return got["scheduled"] == true
	})
	next, err := time.Parse(time.RFC3339, got["next"].(string))
	ny, _ := time.LoadLocation("America/New_York")
	if err != nil || got["cronString"] != body["cronString"] || next.In(ny).Weekday() != time.Monday ||
		next.In(ny).Hour() != 6 || next.In(ny).Minute() != 30 || !next.After(time.Now()) || next.After(time.Now().Add(8*24*time.Hour)) {
		t.Fatalf("schedule %s (%v)", r.body, err)
	}

	// A member who is no admin; another project's admin.
	r = do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "not an admin"}))
	expect(t, r, 201)
	plain := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	expect(t, do(t, "GET", path, plain, "", nil), 403)
	other, _ := adminProject(t, "Schedule route, elsewhere")
	otherTok := projectAdmin(t, su, other, "schedule-route-"+other+"@example.com")
	expect(t, do(t, "GET", "admin/projects/"+other+"/bot/"+bot+"/schedule", otherTok, "", nil), 404)
}
