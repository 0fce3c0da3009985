package projects

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// projectorStack is a repository whose events reach a stream on a real
// embedded NATS server, the session store, and a running projector.
func projectorStack(t *testing.T) (*repo.Repo, *nats.Conn, *session.Store) {
	t.Helper()
	env := testenv.New(t)
	p, err := StartProjector(context.Background(), env.NC, env.JS, testenv.ResourceStream, env.Repo, env.Sessions, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return env.Repo, env.NC, env.Sessions
}

func TestProjector(t *testing.T) {
	ctx := context.Background()
	r, nc, sessions := projectorStack(t)
	sc := repo.Scope{Project: "p1"}
	if _, err := r.Create(ctx, repo.AllProjects, map[string]any{"resourceType": "Project", "name": "One"}, repo.WriteOptions{ID: "p1", Project: "p1"}); err != nil {
		t.Fatal(err)
	}
	policy, err := r.Create(ctx, sc, map[string]any{"resourceType": "AccessPolicy", "name": "office",
		"ipAccessRule": []any{map[string]any{"name": "office", "value": "10.0.0.0/8", "action": "block"}}}, repo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	membership := func(extra map[string]any) map[string]any {
		m := map[string]any{"resourceType": "ProjectMembership", "project": map[string]any{"reference": "Project/p1"},
			"user": map[string]any{"reference": "User/u1"}, "profile": map[string]any{"reference": "Practitioner/x"}}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}

	t.Run("a write by any path reaches the sessions through its event", func(t *testing.T) {
		pm, err := r.Create(ctx, sc, membership(nil), repo.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, "the entry from the event", func() bool {
			m, err := sessions.GetMembership(ctx, pm.ID)
			return err == nil && m.Active && m.Project == "p1" && m.User == "User/u1"
		})
	})

	t.Run("a handler's request answers once the entry holds", func(t *testing.T) {
		pm, err := r.Create(ctx, sc, membership(map[string]any{"admin": true}), repo.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rev, err := Project(ctx, nc, "ProjectMembership", pm.ID, "p1")
		if err != nil || rev == 0 {
			t.Fatalf("projection: rev %d, %v", rev, err)
		}
		if m, err := sessions.GetMembership(ctx, pm.ID); err != nil || !m.Admin {
			t.Fatalf("entry after the answer: %+v %v", m, err)
		}
		doc, _ := pm.Decode()
		doc["active"] = false
		if _, err := r.Update(ctx, sc, doc, repo.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := Project(ctx, nc, "ProjectMembership", pm.ID, "p1"); err != nil {
			t.Fatal(err)
		}
		if m, err := sessions.GetMembership(ctx, pm.ID); err != nil || m.Active {
			t.Fatalf("an inactive membership's entry: %+v %v", m, err)
		}
		if err := r.Delete(ctx, sc, "ProjectMembership", pm.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := Project(ctx, nc, "ProjectMembership", pm.ID, "p1"); err != nil {
			t.Fatal(err)
		}
		if _, err := sessions.GetMembership(ctx, pm.ID); !errors.Is(err, session.ErrNotFound) {
			t.Fatalf("a deleted membership's entry: %v, want none", err)
		}
	})

	t.Run("a policy's address rules follow the policy", func(t *testing.T) {
		pm, err := r.Create(ctx, sc, membership(map[string]any{"accessPolicy": map[string]any{"reference": "AccessPolicy/" + policy.ID}}), repo.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Project(ctx, nc, "ProjectMembership", pm.ID, "p1"); err != nil {
			t.Fatal(err)
		}
		if m, _ := sessions.GetMembership(ctx, pm.ID); m == nil || m.AllowsAddress("10.1.2.3") || !m.AllowsAddress("192.0.2.1") {
			t.Fatalf("address rules not projected: %+v", m)
		}
		doc, _ := policy.Decode()
		doc["ipAccessRule"] = []any{map[string]any{"name": "lab", "value": "192.0.2.0/24", "action": "block"}}
		if _, err := r.Update(ctx, sc, doc, repo.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if rev, err := Project(ctx, nc, "AccessPolicy", policy.ID, "p1"); err != nil || rev == 0 {
			t.Fatalf("policy projection: rev %d, %v", rev, err)
		}
		if m, _ := sessions.GetMembership(ctx, pm.ID); m == nil || !m.AllowsAddress("10.1.2.3") || m.AllowsAddress("192.0.2.1") {
			t.Fatalf("the policy's new rules not projected: %+v", m)
		}
	})

	t.Run("nothing else is projected", func(t *testing.T) {
		if _, err := Project(ctx, nc, "Patient", "x", "p1"); err == nil {
			t.Fatal("a Patient was projected")
		}
	})
}
