package access

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// A Bot's schedule is checked at write: its syntax, and that its project
// has the cron and bots features.
func TestGateBotSchedule(t *testing.T) {
	ctx := context.Background()
	r := testenv.New(t).Repo
	newProject := func(features ...any) string {
		p, err := r.Create(ctx, repo.AllProjects, map[string]any{"resourceType": "Project", "name": "p", "features": features}, repo.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.ID
	}
	gate := func(project string) *Gate {
		p := &bus.Principal{User: "User/u1", Profile: "Practitioner/a", Project: project, Membership: "m1", Admin: true}
		pol, err := Compile(p, js(map[string]any{"profile": ref("Practitioner/a"), "admin": true}), nil)
		if err != nil {
			t.Fatal(err)
		}
		return pol.Gate(r, "Bot", "")
	}
	refused := func(err error, text string) {
		t.Helper()
		var fe *fhir.Error
		if !errors.As(err, &fe) || fe.Status != 400 || !strings.Contains(fe.Error(), text) {
			t.Fatalf("%v, want a 400 saying %q", err, text)
		}
	}
	bot := func(cron string) map[string]any {
		return map[string]any{"resourceType": "Bot", "name": "b", "cronString": cron}
	}

	plain := gate(newProject("bots"))
	_, err := plain.Create(ctx, bot("*/5 * * * *"), repo.WriteOptions{})
	refused(err, "features to include cron")
	b, err := plain.Create(ctx, map[string]any{"resourceType": "Bot", "name": "b"}, repo.WriteOptions{})
	if err != nil {
		t.Fatalf("a bot without a schedule: %v", err)
	}
	_, err = plain.Update(ctx, Update, map[string]any{"resourceType": "Bot", "id": b.ID, "name": "b", "cronString": "* * * * *"}, repo.WriteOptions{})
	refused(err, "features to include cron")

	cron := gate(newProject("bots", "cron"))
	_, err = cron.Create(ctx, bot("61 * * * *"), repo.WriteOptions{})
	refused(err, "Bot.cronString")
	if _, err := cron.Create(ctx, bot("CRON_TZ=Europe/Paris 0 9 * * 1-5"), repo.WriteOptions{}); err != nil {
		t.Fatalf("a valid schedule in a cron project: %v", err)
	}
}
