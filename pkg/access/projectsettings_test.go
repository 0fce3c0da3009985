package access

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// TestAdminProjectSettings: a project's admin updates, through the gate
// the fhir service uses, their Project's defaultPatientAccessPolicy and
// the settings Pinion reads, and nothing else (403 naming the field);
// members and admins of other projects change nothing.
func TestAdminProjectSettings(t *testing.T) {
	ctx := context.Background()
	r := testenv.New(t).Repo
	pid, other := uuid.NewString(), uuid.NewString()
	for _, id := range []string{pid, other} {
		if _, err := r.Create(ctx, repo.AllProjects, map[string]any{"resourceType": "Project", "name": "Clinic " + id[:4],
			"owner": ref("User/owner"), "features": []any{"bots"}, "superAdmin": false,
			"setting": []any{map[string]any{"name": "theme", "valueString": "blue"}}},
			repo.WriteOptions{ID: id, Project: id}); err != nil {
			t.Fatal(err)
		}
	}
	policy := func(project string) string {
		out, err := r.Create(ctx, repo.Scope{Project: project}, map[string]any{"resourceType": "AccessPolicy", "name": "patients",
			"resource": []any{map[string]any{"resourceType": "Patient", "criteria": "Patient?_id=%patient.id"}}}, repo.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return "AccessPolicy/" + out.ID
	}
	own, foreign := policy(pid), policy(other)

	principal := func(project string, admin bool) *bus.Principal {
		return &bus.Principal{User: "User/u1", Profile: "Practitioner/a", Project: project, Membership: "m1", Admin: admin}
	}
	admin := compile(t, principal(pid, true), nil, nil)
	// current is the admin's Project as they read it, to change and send back.
	current := func(t *testing.T) map[string]any {
		t.Helper()
		res, err := admin.Gate(r, "Project", pid).Read(ctx, pid)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(res.JSON, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	update := func(pol *Policy, body map[string]any) error {
		if err := pol.AllowResource("Project", pid, Update); err != nil {
			return err
		}
		_, err := pol.Gate(r, "Project", pid).Update(ctx, Update, body, repo.WriteOptions{})
		return err
	}
	withSettings := func(m map[string]any, s ...any) map[string]any {
		m["setting"] = append(m["setting"].([]any), s...)
		return m
	}
	setting := func(name string, v bool) map[string]any { return map[string]any{"name": name, "valueBoolean": v} }

	allowed := []struct {
		name   string
		change func(map[string]any) map[string]any
	}{
		{"patient sign-up policy", func(m map[string]any) map[string]any { m["defaultPatientAccessPolicy"] = ref(own); return m }},
		{"settings Pinion reads", func(m map[string]any) map[string]any {
			return withSettings(m, setting("mfaRequired", true), setting("requireVerifiedEmail", true))
		}},
		{"a setting changed", func(m map[string]any) map[string]any {
			for _, s := range m["setting"].([]any) {
				if s := s.(map[string]any); s["name"] == "mfaRequired" {
					s["valueBoolean"] = false
				}
			}
			return m
		}},
		{"hidden fields sent are put back", func(m map[string]any) map[string]any { m["superAdmin"] = true; return m }},
		{"name and description", func(m map[string]any) map[string]any {
			m["name"], m["description"] = "Renamed", "A clinic"
			return m
		}},
		{"external sign-in required", func(m map[string]any) map[string]any {
			return withSettings(m, setting("requireExternalSignIn", true))
		}},
	}
	for _, c := range allowed {
		t.Run("allowed: "+c.name, func(t *testing.T) {
			if err := update(admin, c.change(current(t))); err != nil {
				t.Fatal(err)
			}
		})
	}
	stored, err := r.Read(ctx, repo.AllProjects, "Project", pid)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Name       string          `json:"name"`
		Policy     *fhir.Reference `json:"defaultPatientAccessPolicy"`
		SuperAdmin bool            `json:"superAdmin"`
		Setting    []struct {
			Name  string `json:"name"`
			Value *bool  `json:"valueBoolean"`
		} `json:"setting"`
	}
	if err := json.Unmarshal(stored.JSON, &got); err != nil {
		t.Fatal(err)
	}
	if got.Policy == nil || got.Policy.Reference != own || got.SuperAdmin || len(got.Setting) != 4 || got.Name != "Renamed" ||
		got.Setting[1].Name != "mfaRequired" || *got.Setting[1].Value || !*got.Setting[2].Value ||
		got.Setting[3].Name != "requireExternalSignIn" || !*got.Setting[3].Value {
		t.Fatalf("stored %s", stored.JSON)
	}

	refused := []struct {
		name, expr string
		change     func(map[string]any) map[string]any
	}{
		{"checkReferencesOnWrite", "checkReferencesOnWrite", func(m map[string]any) map[string]any { m["checkReferencesOnWrite"] = true; return m }},
		{"owner", "owner", func(m map[string]any) map[string]any { m["owner"] = ref("User/u1"); return m }},
		{"features", "features", func(m map[string]any) map[string]any { m["features"] = []any{"bots", "cron"}; return m }},
		{"features removed", "features", func(m map[string]any) map[string]any { delete(m, "features"); return m }},
		{"systemSetting", "systemSetting", func(m map[string]any) map[string]any {
			m["systemSetting"] = []any{setting("x", true)}
			return m
		}},
		{"another setting", "setting", func(m map[string]any) map[string]any { return withSettings(m, setting("theme2", true)) }},
		{"another setting removed", "setting", func(m map[string]any) map[string]any {
			m["setting"] = m["setting"].([]any)[1:]
			return m
		}},
	}
	for _, c := range refused {
		t.Run("refused: "+c.name, func(t *testing.T) {
			err := update(admin, c.change(current(t)))
			fe := fhir.AsError(err)
			if err == nil || fe.Status != 403 || len(fe.Outcome.Issue[0].Expression) != 1 || fe.Outcome.Issue[0].Expression[0] != c.expr {
				t.Fatalf("%v, want 403 naming %s", err, c.expr)
			}
		})
	}
	t.Run("refused: another project's policy", func(t *testing.T) {
		m := current(t)
		m["defaultPatientAccessPolicy"] = ref(foreign)
		if status(update(admin, m)) != 400 {
			t.Fatalf("%v, want 400", update(admin, m))
		}
	})
	t.Run("refused: members and other admins", func(t *testing.T) {
		m := current(t)
		m["defaultPatientAccessPolicy"] = ref(foreign)
		if err := update(compile(t, principal(pid, false), nil, nil), m); status(err) != 403 {
			t.Errorf("member: %v, want 403", err)
		}
		if err := update(compile(t, principal(other, true), nil, nil), m); status(err) != 404 {
			t.Errorf("another project's admin: %v, want 404", err)
		}
		if err := admin.AllowResource("Project", pid, Delete); status(err) != 403 {
			t.Errorf("delete: %v, want 403", err)
		}
	})
}
