package botexec

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/testenv"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

// testClock is a clock the test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fired records the runs the schedulers start.
type fired struct {
	mu   sync.Mutex
	runs []firedRun
}

type firedRun struct {
	by, bot string
	due     time.Time
}

func (f *fired) fire(by string) cronFire {
	return func(_ context.Context, bot, _ string, due time.Time) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.runs = append(f.runs, firedRun{by, bot, due})
	}
}

func (f *fired) snapshot() []firedRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]firedRun(nil), f.runs...)
}

func held(s *scheduler) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// together has every scheduler claim what is due at once, as instances
// whose polls fall together do.
func together(ss ...*scheduler) {
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(s.claimDue)
	}
	wg.Wait()
}

// settled says whether every scheduler holds the bot's latest entry and
// none has a run due: after that no claim of an earlier tick can succeed.
func settled(ctx context.Context, kv jetstream.KeyValue, now time.Time, id string, ss ...*scheduler) bool {
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		for _, s := range ss {
			s.mu.Lock()
			_, held := s.entries[id]
			s.mu.Unlock()
			if held {
				return false
			}
		}
		return true
	}
	if err != nil {
		return false
	}
	for _, s := range ss {
		s.mu.Lock()
		h, ok := s.entries[id]
		good := ok && h.rev == e.Revision() && h.Next.After(now)
		s.mu.Unlock()
		if !good {
			return false
		}
	}
	return true
}

// A scheduled bot runs exactly once per tick with two instances sharing
// the schedule, once (not once per missed tick) after a restart that
// missed ticks, on its new schedule from the next tick after a change,
// and never after it is deleted. A bot in a project without the cron
// feature is never scheduled.
func TestSchedulerRunsEachTickOnce(t *testing.T) {
	ctx := context.Background()
	env := testenv.New(t)
	log := slog.Default()
	clk := &testClock{now: time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)}
	var f fired
	start := func(name string) *scheduler {
		t.Helper()
		s := newScheduler(env.JS, env.Repo, testenv.ResourceStream, clk, 5*time.Millisecond, f.fire(name), log)
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}
	project := func(features ...any) string {
		p, err := env.Repo.Create(ctx, repo.AllProjects, map[string]any{"resourceType": "Project", "name": "p", "features": features}, repo.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.ID
	}
	withCron, without := project("bots", "cron"), project("bots")
	mkBot := func(p, cron string) *repo.Resource {
		b, err := env.Repo.Create(ctx, repo.Scope{Project: p}, map[string]any{"resourceType": "Bot", "name": "b", "cronString": cron}, repo.WriteOptions{Project: p})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	a, b := start("a"), start("b")
	unscheduled := mkBot(without, "* * * * *")
	bot := mkBot(withCron, "* * * * *")
	kv := a.kv
	testenv.Eventually(t, "the bot's schedule", func() bool { return settled(ctx, kv, clk.Now(), bot.ID, a, b) && held(a) == 1 })
	if _, err := kv.Get(ctx, unscheduled.ID); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a bot of a project without cron was scheduled: %v", err)
	}

	// Every minute, one run, by whichever instance claimed it.
	for i := 1; i <= 5; i++ {
		clk.Add(time.Minute)
		together(a, b)
		testenv.Eventually(t, "a run", func() bool { return len(f.snapshot()) >= i && settled(ctx, kv, clk.Now(), bot.ID, a, b) })
		runs := f.snapshot()
		if len(runs) != i {
			t.Fatalf("tick %d: %d runs: %v", i, len(runs), runs)
		}
		if want := time.Date(2026, 1, 1, 0, i, 0, 0, time.UTC); !runs[i-1].due.Equal(want) || runs[i-1].bot != bot.ID {
			t.Fatalf("tick %d ran %v, want the tick of %v", i, runs[i-1], want)
		}
	}

	// Down for ten ticks: one run at start, for the first one missed.
	a.Stop()
	b.Stop()
	clk.Add(10 * time.Minute) // 00:15:30
	c := start("c")
	testenv.Eventually(t, "the missed run", func() bool { return len(f.snapshot()) >= 6 && settled(ctx, kv, clk.Now(), bot.ID, c) })
	runs := f.snapshot()
	if len(runs) != 6 || runs[5].by != "c" || !runs[5].due.Equal(time.Date(2026, 1, 1, 0, 6, 0, 0, time.UTC)) {
		t.Fatalf("after the restart: %v, want one run of the 00:06 tick", runs)
	}
	d := start("d")
	testenv.Eventually(t, "the second instance", func() bool { return settled(ctx, kv, clk.Now(), bot.ID, c, d) })

	// Every five minutes from now: the 00:16 tick of the old schedule
	// does not run, the 00:20 one does.
	upd := map[string]any{"resourceType": "Bot", "id": bot.ID, "name": "b", "cronString": "*/5 * * * *"}
	if _, err := env.Repo.Update(ctx, repo.Scope{Project: withCron}, upd, repo.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the new schedule", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		h, ok := c.entries[bot.ID]
		return ok && h.Spec == "*/5 * * * *"
	})
	testenv.Eventually(t, "both instances to hold it", func() bool { return settled(ctx, kv, clk.Now(), bot.ID, c, d) })
	clk.Add(5 * time.Minute) // 00:20:30
	together(c, d)
	testenv.Eventually(t, "the run on the new schedule", func() bool { return len(f.snapshot()) >= 7 && settled(ctx, kv, clk.Now(), bot.ID, c, d) })
	runs = f.snapshot()
	if len(runs) != 7 || !runs[6].due.Equal(time.Date(2026, 1, 1, 0, 20, 0, 0, time.UTC)) {
		t.Fatalf("after the change: %v, want one run of the 00:20 tick", runs)
	}

	// Deleted: the schedule ends.
	if err := env.Repo.Delete(ctx, repo.Scope{Project: withCron}, "Bot", bot.ID); err != nil {
		t.Fatal(err)
	}
	// settled alone holds before the delete's event is handled too (both
	// instances hold the latest entry, not yet due): the key must be gone.
	testenv.Eventually(t, "the schedule to end", func() bool {
		_, err := kv.Get(ctx, bot.ID)
		return errors.Is(err, jetstream.ErrKeyNotFound) && settled(ctx, kv, clk.Now(), bot.ID, c, d)
	})
	clk.Add(10 * time.Minute)
	c.Stop()
	d.Stop()
	if runs := f.snapshot(); len(runs) != 7 {
		t.Fatalf("after the delete: %v", runs)
	}
}

// A scheduled run's AuditEvent says it was scheduled, and for which tick;
// others say nothing of it.
func TestAuditScheduled(t *testing.T) {
	p := &bus.Principal{Profile: "Bot/b1"}
	b := &bot{ID: "b1", Project: "p1"}
	s := &Service{audits: make(chan auditEvent, 2), log: slog.New(slog.DiscardHandler)}
	due := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	s.audit(b, p, p, time.Now(), &sandbox.Result{}, nil, "", due)
	s.audit(b, p, p, time.Now(), &sandbox.Result{}, nil, "", time.Time{})
	a, b2 := <-s.audits, <-s.audits
	scheduled, err := resource.Map(a.ev)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := resource.Map(b2.ev)
	if err != nil {
		t.Fatal(err)
	}
	sub, _ := scheduled["subtype"].([]any)
	if len(sub) != 1 || sub[0].(map[string]any)["code"] != "scheduled" ||
		!strings.Contains(sub[0].(map[string]any)["display"].(string), "2026-01-01T09:00:00Z") {
		t.Fatalf("scheduled run's subtype: %v", scheduled["subtype"])
	}
	if _, ok := plain["subtype"]; ok {
		t.Fatalf("an unscheduled run says it was scheduled: %v", plain)
	}
}
