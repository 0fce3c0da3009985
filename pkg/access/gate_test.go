package access

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/testenv"
)

func TestGate(t *testing.T) {
	ctx := context.Background()
	r := testenv.New(t).Repo
	sys := func(project string) repo.Scope { return repo.Scope{Project: project} }
	mk := func(project string, res map[string]any) string {
		t.Helper()
		out, err := r.Create(ctx, sys(project), res, repo.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out.ID
	}
	me := mk(project, map[string]any{"resourceType": "Patient", "gender": "female", "birthDate": "1970-01-01"})
	other := mk(project, map[string]any{"resourceType": "Patient", "gender": "male"})
	elsewhere := mk("p2", map[string]any{"resourceType": "Patient", "gender": "female"})
	mine := mk(project, map[string]any{"resourceType": "Observation", "status": "final",
		"code": map[string]any{"text": "x"}, "subject": ref("Patient/" + me)})
	theirs := mk(project, map[string]any{"resourceType": "Observation", "status": "final",
		"code": map[string]any{"text": "y"}, "subject": ref("Patient/" + other)})

	policy := map[string]any{"resourceType": "AccessPolicy", "resource": []any{
		map[string]any{"resourceType": "Patient", "criteria": "Patient?_id=%patient.id", "hiddenFields": []any{"birthDate"}},
		map[string]any{"resourceType": "Observation", "criteria": "Observation?subject=%patient",
			"interaction": []any{"read", "search", "create", "update"}},
	}}
	pol, err := Compile(member("Patient/"+me),
		js(map[string]any{"profile": ref("Patient/" + me), "accessPolicy": ref("AccessPolicy/a")}),
		map[string][]byte{"AccessPolicy/a": js(policy)})
	if err != nil {
		t.Fatal(err)
	}
	patients, observations := pol.Gate(r, "Patient", ""), pol.Gate(r, "Observation", "")

	t.Run("reads", func(t *testing.T) {
		got, err := patients.Read(ctx, me)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		_ = json.Unmarshal(got.JSON, &m)
		if _, ok := m["birthDate"]; ok || m["gender"] != "female" {
			t.Fatalf("hidden field returned or field lost: %s", got.JSON)
		}
		for _, id := range []string{other, elsewhere, "no-such-id"} {
			if _, err := patients.Read(ctx, id); !errors.Is(err, fhir.ErrNotFound) {
				t.Errorf("read of %s: %v, want 404", id, err)
			}
		}
		if _, err := patients.History(ctx, other); !errors.Is(err, fhir.ErrNotFound) {
			t.Errorf("history of a hidden patient: %v, want 404", err)
		}
	})

	t.Run("reach: as stored, for a service that acts on it", func(t *testing.T) {
		got, err := patients.Reach(ctx, Read, me)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(got.JSON) || !contains(got.JSON, "birthDate") {
			t.Fatalf("reach redacted the resource: %s", got.JSON)
		}
		if _, err := patients.Reach(ctx, Read, other); !errors.Is(err, fhir.ErrNotFound) {
			t.Errorf("reach of a hidden patient: %v, want 404", err)
		}
		if _, err := observations.Reach(ctx, Delete, mine); !errors.Is(err, fhir.ErrForbidden) {
			t.Errorf("reach for a delete the policy does not grant: %v, want 403", err)
		}
		if _, err := pol.Gate(r, "Practitioner", "").Reach(ctx, Read, me); !errors.Is(err, fhir.ErrForbidden) {
			t.Errorf("reach of a type the policy does not name: %v, want 403", err)
		}
	})

	t.Run("searches see only what the criteria allow", func(t *testing.T) {
		q, err := search.Parse("Observation", url.Values{"_total": {"accurate"}})
		if err != nil {
			t.Fatal(err)
		}
		page, err := observations.Search(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Resources) != 1 || page.Resources[0].ID != mine || page.Total != 1 {
			t.Fatalf("search found %d (total %d), want only %s", len(page.Resources), page.Total, mine)
		}
		q, _ = search.Parse("Patient", url.Values{"birthdate": {"1970-01-01"}})
		if _, err := patients.Search(ctx, q); err == nil {
			t.Fatal("a search on a hidden field was answered")
		}
	})

	t.Run("writes are checked before and after", func(t *testing.T) {
		obs := func(subject string) map[string]any {
			return map[string]any{"resourceType": "Observation", "status": "final",
				"code": map[string]any{"text": "z"}, "subject": ref("Patient/" + subject)}
		}
		if _, err := observations.Create(ctx, obs(me), repo.WriteOptions{}); err != nil {
			t.Fatalf("create within the criteria: %v", err)
		}
		if _, err := observations.Create(ctx, obs(other), repo.WriteOptions{}); !errors.Is(err, fhir.ErrForbidden) {
			t.Fatalf("create outside the criteria: %v, want 403", err)
		}
		moved := obs(other)
		moved["id"] = mine
		if _, err := observations.Update(ctx, Update, moved, repo.WriteOptions{}); !errors.Is(err, fhir.ErrForbidden) {
			t.Fatalf("update moving a resource out of the criteria: %v, want 403", err)
		}
		hidden := obs(other)
		hidden["id"] = theirs
		if _, err := observations.Update(ctx, Update, hidden, repo.WriteOptions{}); !errors.Is(err, fhir.ErrNotFound) {
			t.Fatalf("update of a hidden resource: %v, want 404", err)
		}
		if _, err := observations.Current(ctx, Delete, mine); !errors.Is(err, fhir.ErrForbidden) {
			t.Fatalf("delete not granted: %v, want 403", err)
		}
		cur, _ := r.Read(ctx, sys(project), "Observation", theirs)
		if cur.VersionID == "" {
			t.Fatal("the hidden resource was lost")
		}
	})

	t.Run("content the server sets", func(t *testing.T) {
		admin, err := Compile(&bus.Principal{User: "User/a", Profile: "Practitioner/a", Project: project, Admin: true}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		app := map[string]any{"resourceType": "ClientApplication", "secret": "chosen"}
		if _, err := admin.Gate(r, "ClientApplication", "").Create(ctx, app, repo.WriteOptions{}); !errors.Is(err, fhir.ErrBadRequest) {
			t.Fatalf("a client secret written through the gate: %v, want 400", err)
		}
	})
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }
