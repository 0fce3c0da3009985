package projects

import (
	"context"
	"log/slog"
	"testing"

	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// Two processes project one membership at once: the one that read it
// before an admin demoted and then removed the member must not write its
// entry last. testHookProjected runs the other process's projection of
// the newer membership between the first's read and its write.
func TestProjectorAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	env := testenv.New(t)
	a := &Projector{repo: env.Repo, sessions: env.Sessions, log: slog.Default()}
	b := &Projector{repo: env.Repo, sessions: env.Sessions, log: slog.Default()}
	t.Cleanup(func() { testHookProjected = nil })
	sc := repo.Scope{Project: "p1"}
	if _, err := env.Repo.Create(ctx, repo.AllProjects, map[string]any{"resourceType": "Project", "name": "One"}, repo.WriteOptions{ID: "p1", Project: "p1"}); err != nil {
		t.Fatal(err)
	}
	doc := map[string]any{"resourceType": "ProjectMembership", "project": map[string]any{"reference": "Project/p1"},
		"user": map[string]any{"reference": "User/u1"}, "profile": map[string]any{"reference": "Practitioner/x"}, "admin": true}
	pm, err := env.Repo.Create(ctx, sc, doc, repo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.membership(ctx, pm.ID); err != nil {
		t.Fatal(err)
	}
	// meanwhile has change made to the membership, and b project it, once,
	// while a is between its read and its write.
	meanwhile := func(change func()) {
		testHookProjected = func(id string) {
			testHookProjected = nil
			change()
			if _, err := b.membership(ctx, id); err != nil {
				t.Error(err)
			}
		}
	}

	meanwhile(func() {
		doc["id"], doc["admin"] = pm.ID, false
		if _, err := env.Repo.Update(ctx, sc, doc, repo.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := a.membership(ctx, pm.ID); err != nil {
		t.Fatal(err)
	}
	if m, err := env.Sessions.GetMembership(ctx, pm.ID); err != nil || m.Admin {
		t.Fatalf("demoted while another process read the membership: entry %+v, %v", m, err)
	}

	meanwhile(func() {
		if err := env.Repo.Delete(ctx, sc, "ProjectMembership", pm.ID); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := a.membership(ctx, pm.ID); err != nil {
		t.Fatal(err)
	}
	if m, err := env.Sessions.GetMembership(ctx, pm.ID); err == nil {
		t.Fatalf("removed while another process read the membership: entry %+v", m)
	}
}
