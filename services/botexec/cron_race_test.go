package botexec

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// Two instances handle events of one bot at once: the one that read the
// older bot must not overwrite the key the other wrote from the newer one.
// testHookSynced runs the second instance's sync of a newer bot between
// the first's read and its write.
func TestSchedulerSyncRace(t *testing.T) {
	ctx := context.Background()
	env := testenv.New(t)
	kv, err := env.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: cronBucket})
	if err != nil {
		t.Fatal(err)
	}
	clk := &testClock{now: time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)}
	instance := func() *scheduler {
		s := newScheduler(env.JS, env.Repo, testenv.ResourceStream, clk, time.Second, nil, slog.Default())
		s.kv = kv
		return s
	}
	a, b := instance(), instance()
	t.Cleanup(func() { testHookSynced = nil })
	p, err := env.Repo.Create(ctx, repo.AllProjects, map[string]any{"resourceType": "Project", "name": "p", "features": []any{"bots", "cron"}}, repo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scope := repo.Scope{Project: p.ID}
	write := func(id, cron string) string {
		t.Helper()
		bot := map[string]any{"resourceType": "Bot", "name": "b"}
		if cron != "" {
			bot["cronString"] = cron
		}
		var res *repo.Resource
		var err error
		if id == "" {
			res, err = env.Repo.Create(ctx, scope, bot, repo.WriteOptions{Project: p.ID})
		} else {
			bot["id"] = id
			res, err = env.Repo.Update(ctx, scope, bot, repo.WriteOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		return res.ID
	}
	// meanwhile has the bot written as next, and b sync it, once, while a
	// is between its read and its write.
	meanwhile := func(next string) {
		testHookSynced = func(id string) {
			testHookSynced = nil
			write(id, next)
			if err := b.sync(ctx, id); err != nil {
				t.Error(err)
			}
		}
	}
	spec := func(id string) string {
		t.Helper()
		e, err := kv.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		var ce cronEntry
		if err := json.Unmarshal(e.Value(), &ce); err != nil {
			t.Fatal(err)
		}
		return ce.Spec
	}

	// Made without a schedule, then given one.
	id := write("", "")
	meanwhile("* * * * *")
	if err := a.sync(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := spec(id); got != "* * * * *" {
		t.Fatalf("a bot given a schedule while another instance read it unscheduled: key %q", got)
	}

	// Scheduled, changed, then unscheduled.
	write(id, "*/5 * * * *")
	meanwhile("")
	if err := a.sync(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := spec(id); got != "" {
		t.Fatalf("a bot whose schedule was removed while another instance read it changed: key %q", got)
	}

	// Scheduled anew, changed, then deleted while a reads the change.
	write(id, "0 * * * *")
	if err := a.sync(ctx, id); err != nil || spec(id) != "0 * * * *" {
		t.Fatalf("scheduled: %v, key %q", err, spec(id))
	}
	write(id, "30 * * * *")
	testHookSynced = func(id string) {
		testHookSynced = nil
		if err := env.Repo.Delete(ctx, scope, "Bot", id); err != nil {
			t.Error(err)
		}
		if err := b.sync(ctx, id); err != nil {
			t.Error(err)
		}
	}
	if err := a.sync(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := spec(id); got != "" {
		t.Fatalf("a bot deleted while another instance read it: key %q", got)
	}
}
