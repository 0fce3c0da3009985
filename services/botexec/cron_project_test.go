package botexec

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// A bot whose schedule was written while its project lacked the cron
// feature is scheduled when the project gains it, and unscheduled when
// the project loses it; a deleted bot's own secrets leave the store.
func TestSchedulerFollowsProjectAndBotDeletes(t *testing.T) {
	ctx := context.Background()
	env := testenv.New(t)
	clk := &testClock{now: time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)}
	var f fired
	s := newScheduler(env.JS, env.Repo, testenv.ResourceStream, clk, 5*time.Millisecond, f.fire("a"), slog.Default())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)

	p, err := env.Repo.Create(ctx, repo.AllProjects, map[string]any{"resourceType": "Project", "name": "p", "features": []any{"bots"}}, repo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bot, err := env.Repo.Create(ctx, repo.Scope{Project: p.ID}, map[string]any{"resourceType": "Bot", "name": "b", "cronString": "* * * * *"}, repo.WriteOptions{Project: p.ID})
	if err != nil {
		t.Fatal(err)
	}
	// A bot written after it, with no schedule: its event is handled after
	// the first bot's, so once it is, the first bot's was too.
	other, err := env.Repo.Create(ctx, repo.Scope{Project: p.ID}, map[string]any{"resourceType": "Bot", "name": "other"}, repo.WriteOptions{Project: p.ID})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Repo.SetSecret(ctx, botSecretsKey(other.ID), []byte(`[{"name":"k","valueString":"v"}]`)); err != nil {
		t.Fatal(err)
	}
	if err := env.Repo.Delete(ctx, repo.Scope{Project: p.ID}, "Bot", other.ID); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the deleted bot's secrets to go", func() bool {
		_, err := env.Repo.Secret(ctx, botSecretsKey(other.ID))
		return errors.Is(err, store.ErrNotFound)
	})
	scheduled := func() bool {
		_, err := s.kv.Get(ctx, bot.ID)
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	if scheduled() {
		t.Fatal("a bot of a project without cron was scheduled")
	}

	setFeatures := func(features ...any) {
		t.Helper()
		if _, err := env.Repo.Update(ctx, repo.AllProjects, map[string]any{"resourceType": "Project", "id": p.ID, "name": "p", "features": features}, repo.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setFeatures("bots", "cron")
	testenv.Eventually(t, "the bot to be scheduled with its project", scheduled)
	testenv.Eventually(t, "the instance to hold it", func() bool { return held(s) == 1 })
	clk.Add(time.Minute)
	testenv.Eventually(t, "its run", func() bool { return len(f.snapshot()) == 1 })

	setFeatures("bots")
	testenv.Eventually(t, "the schedule to end with the feature", func() bool { return !scheduled() })
}
