package botexec

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// benchCronBots is how many bots BenchmarkScheduler10kBots schedules.
const benchCronBots = 10_000

// shiftedClock is the system's clock moved by an offset the benchmark
// sets: time runs at its real speed, and a minute's tick comes when the
// benchmark wants it rather than when the wall clock's does.
type shiftedClock struct{ offset atomic.Int64 }

func (c *shiftedClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// real is when the clock shows t.
func (c *shiftedClock) real(t time.Time) time.Time { return t.Add(-time.Duration(c.offset.Load())) }

// BenchmarkScheduler10kBots measures the scheduling overhead of 10,000 bots
// all due every minute, with two instances sharing the schedule at the
// production poll (1 s), on real time: how long the Bot events take to
// fill the bucket, then, for one tick, each run's lateness from the moment
// it fell due to the moment an instance had claimed and started it, and
// that each ran once. The run itself is a no-op: its cost is the sandbox's
// (pinion-bench's bots op). Bounded by about two minutes. Run it with
//
//	cd services/botexec && go test -run '^$' -bench Scheduler10kBots -benchtime 1x .
func BenchmarkScheduler10kBots(b *testing.B) {
	ctx := context.Background()
	env := testenv.New(b)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := env.Repo.Create(ctx, repo.AllProjects, map[string]any{"resourceType": "Project", "name": "bench", "features": []any{"bots", "cron"}}, repo.WriteOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < benchCronBots; i += 500 {
		list := make([]map[string]any, 0, 500)
		for range 500 {
			list = append(list, map[string]any{"resourceType": "Bot", "name": "tick", "cronString": "* * * * *"})
		}
		if err := env.Repo.CreateMany(ctx, repo.Scope{Project: p.ID}, "Bot", list, repo.WriteOptions{Project: p.ID}); err != nil {
			b.Fatal(err)
		}
	}
	// The clock starts just after a minute's tick: a whole minute for the
	// bucket to fill before the next one.
	clk := &shiftedClock{}
	now := time.Now()
	clk.offset.Store(int64(now.Truncate(time.Minute).Add(time.Minute + time.Second).Sub(now)))

	// The runs of the tick measured (due at from), by bot.
	var mu sync.Mutex
	var from time.Time
	late := map[string]time.Duration{}
	twice := 0
	fire := func(_ context.Context, bot, _ string, due time.Time) {
		d := time.Since(clk.real(due))
		mu.Lock()
		defer mu.Unlock()
		if from.IsZero() || !due.Equal(from) {
			return
		}
		if _, ok := late[bot]; ok {
			twice++
		}
		late[bot] = d
	}
	b.ResetTimer()
	t0 := time.Now()
	var ss []*scheduler
	for range 2 {
		s := newScheduler(env.JS, env.Repo, testenv.ResourceStream, clk, 0, fire, log)
		if err := s.Start(ctx); err != nil {
			b.Fatal(err)
		}
		defer s.Stop()
		ss = append(ss, s)
	}
	// Polled here rather than with testenv.Eventually, whose limit is
	// shorter than filling the bucket with 10,000 bots can take.
	for deadline := time.Now().Add(2 * time.Minute); held(ss[0]) < benchCronBots || held(ss[1]) < benchCronBots; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d bots scheduled", held(ss[0]), benchCronBots)
		}
	}
	filled := time.Since(t0)
	// Move the clock to a second before the next tick (never past it: the
	// runs it holds are due then).
	next := clk.Now().Truncate(time.Minute).Add(time.Minute)
	if wait := next.Sub(clk.Now()); wait > time.Second {
		clk.offset.Add(int64(wait - time.Second))
	}
	mu.Lock()
	from = next
	mu.Unlock()
	// Until every bot has run, or the tick after it falls due: the
	// measure's window, not a wait that fails (the bots that did not run
	// in it are reported below).
	end := clk.real(next.Add(time.Minute))
	for ; time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		n := len(late)
		mu.Unlock()
		if n == benchCronBots {
			break
		}
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	if twice > 0 {
		b.Fatalf("%d bots ran twice for one tick", twice)
	}
	got := make([]time.Duration, 0, len(late))
	for _, d := range late {
		got = append(got, d)
	}
	slices.Sort(got)
	if len(got) < benchCronBots {
		b.Logf("only %d of %d bots ran within their minute", len(got), benchCronBots)
	}
	if len(got) == 0 {
		b.Fatal("no run")
	}
	q := func(f float64) float64 { return got[int(f*float64(len(got)-1))].Seconds() * 1000 }
	b.ReportMetric(filled.Seconds(), "s-to-schedule")
	b.ReportMetric(float64(len(got)), "runs-in-minute")
	b.ReportMetric(q(0.5), "ms-late-p50")
	b.ReportMetric(q(0.99), "ms-late-p99")
	b.ReportMetric(q(1), "ms-late-max")
}
