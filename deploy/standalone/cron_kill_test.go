package standalone

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/testenv/loopback"
	"github.com/pinion-health/pinion/services/botexec"
	"github.com/pinion-health/pinion/services/botexec/worker"
)

// cronHelperEnv makes this test binary a botexec process (the botexec
// command's main, with a fast clock for the scheduler) instead of the
// tests: its value is the clock's epoch, in Unix nanoseconds.
const cronHelperEnv = "PINION_TEST_CRON_HELPER"

// cronWarp is how much faster than real time the helpers' scheduler clock
// runs: a cron minute is ten real seconds. The bot names its tick from the
// time its run starts, so a run must start within its tick: at five
// seconds a tick, a loaded machine (CI runs the process tests beside the
// browser tests) sometimes started one late and named the next tick.
const cronWarp = 6

// warpClock runs cronWarp times faster than the system's from epoch. Every
// process given the same epoch reads the same time.
type warpClock struct{ epoch time.Time }

func (c warpClock) Now() time.Time {
	return c.epoch.Add(time.Since(c.epoch) * cronWarp)
}

func init() {
	epoch := os.Getenv(cronHelperEnv)
	if epoch == "" {
		return
	}
	// The helper's bot workers are this binary again, with its environment.
	worker.MainIfWorker()
	ns, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, cronHelperEnv, "is not a time:", err)
		os.Exit(2)
	}
	clk := warpClock{epoch: time.Unix(0, ns)}
	infra.RunService("botexec", func(cfg *config.Config, c *infra.Conns, log *slog.Logger) (infra.Service, error) {
		bc := botexec.NewConfig(cfg)
		bc.JS, bc.EventStream = c.JS, infra.ResourceStream
		bc.CronClock, bc.CronPoll = clk, 10*time.Millisecond
		return botexec.New(bc, c.NC, c.Repo, c.Sessions, log), nil
	})
	os.Exit(0)
}

// A scheduled bot with two botexec processes, one of them killed with
// SIGKILL while a run is in flight. A tick is claimed before it runs, so
// the tick the killed process had claimed runs at most once (its run is
// lost, never repeated by the other); every other tick, before and after
// the kill, runs exactly once.
func TestScheduledBotAcrossKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven processes; skipped with -short")
	}
	// Mostly waiting on ticks ten seconds apart, so beside the other
	// parallel tests rather than in processStacks' queue.
	t.Parallel()
	bin := buildBinaries(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	natsAddr, httpAddr := loopback.FreeAddr(t), loopback.FreeAddr(t)
	urls := natsURLs(t, data, natsAddr)
	common := []string{
		"PINION_DATA_DIR=" + data, "PINION_LOG_LEVEL=warn", "PINION_LOG_FORMAT=json",
		"PINION_SUPERADMIN_CLIENT_ID=" + saID, "PINION_SUPERADMIN_CLIENT_SECRET=" + saSec,
		"PINION_AUTH_RATE_LIMIT=0", "PINION_REQUEST_TIMEOUT=5s",
	}
	infraProc := start(t, bin, "pinion", append(common, "PINION_NATS_LISTEN="+natsAddr), "infra")
	defer stopProc(infraProc)
	waitPort(t, natsAddr)
	waitSocket(t, ferretSocket(data))
	svcEnv := append(common, "PINION_MONGODB_URI="+ferretURI(data), "PINION_ADDR="+httpAddr)
	envOf := func(name string, extra ...string) []string {
		return append(append(append([]string{}, svcEnv...), "PINION_NATS_URL="+urls[name]), extra...)
	}
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			stopProc(p)
		}
	}()
	for _, name := range []string{"fhir", "identity", "membership", "gateway"} {
		procs = append(procs, start(t, bin, name, envOf(name)))
	}
	epoch := time.Now()
	clk := warpClock{epoch: epoch}
	helperEnv := envOf("botexec", cronHelperEnv+"="+strconv.FormatInt(epoch.UnixNano(), 10))
	killed := start(t, filepath.Dir(self), filepath.Base(self), helperEnv)
	survivor := start(t, filepath.Dir(self), filepath.Base(self), helperEnv)
	procs = append(procs, killed, survivor)
	own := "http://" + httpAddr + "/"
	defer useBase(t, own)()
	waitReadyAt(t, own)

	su := superToken(t)
	r := do(t, "POST", "admin/Project", su, "application/json", mustJSON(map[string]any{"resourceType": "Project", "name": "Cron kill", "features": []any{"bots", "cron"}}))
	expect(t, r, 201)
	pid := r.json(t)["id"].(string)
	// The run names its tick from the scheduler's clock (it starts well
	// within the ten seconds a tick lasts), once as it starts and once as
	// it ends, 1.5 s later: a kill in between leaves a start alone.
	code := fmt.Sprintf(`export async function handler(medplum) {
  const warped = %d + (Date.now() - %d) * %d;
  const tick = new Date(Math.floor(warped / 60000) * 60000).toISOString();
  const mark = (text) => medplum.createResource({resourceType: 'Observation', status: 'final', code: {text}, valueString: tick});
  await mark('started');
  await new Promise(r => setTimeout(r, 1500));
  await mark('done');
  return tick;
}`, epoch.UnixMilli(), epoch.UnixMilli(), cronWarp)
	bot := newBot(t, su, pid, "ticker", "", code, "ticker.ts")
	r = do(t, "GET", "fhir/R4/Bot/"+bot, su, "", nil)
	expect(t, r, 200)
	body := r.json(t)
	body["cronString"] = "* * * * *"
	expect(t, do(t, "PUT", "fhir/R4/Bot/"+bot, su, "application/fhir+json", mustJSON(body)), 200)

	// marks are the ticks of the runs' marks of one kind, with repeats.
	marks := func(text string) []string {
		t.Helper()
		r := do(t, "GET", "fhir/R4/Observation?"+url.Values{"_project": {pid}, "code:text": {text}, "_count": {"1000"}}.Encode(), su, "", nil)
		expect(t, r, 200)
		var out []string
		entries, _ := r.json(t)["entry"].([]any)
		for _, e := range entries {
			out = append(out, e.(map[string]any)["resource"].(map[string]any)["valueString"].(string))
		}
		sort.Strings(out)
		return out
	}
	eventually(t, 90*time.Second, "two ticks' runs", func() bool { return len(marks("done")) >= 2 })
	// SIGKILL one instance while a run is in flight: whichever of the two
	// claimed it, the assertions below hold.
	eventually(t, 60*time.Second, "a run in flight", func() bool { return len(marks("started")) > len(marks("done")) })
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = killed.Process.Wait()
	killedAt := clk.Now()
	doneAtKill := len(marks("done"))
	eventually(t, 120*time.Second, "three ticks' runs after the kill", func() bool { return len(marks("done")) >= doneAtKill+3 })
	// A graceful stop drains the survivor's run, if one is in flight.
	stopProc(survivor)

	started, done := marks("started"), marks("done")
	count := func(list []string) map[string]int {
		m := map[string]int{}
		for _, s := range list {
			m[s]++
		}
		return m
	}
	startedBy, doneBy := count(started), count(done)
	for tick, n := range startedBy {
		if n > 1 {
			t.Errorf("tick %s started %d times", tick, n)
		}
	}
	first, err := time.Parse(time.RFC3339, done[0])
	if err != nil {
		t.Fatal(err)
	}
	last, _ := time.Parse(time.RFC3339, done[len(done)-1])
	var lost []time.Time
	for tick := first; !tick.After(last); tick = tick.Add(time.Minute) {
		if doneBy[tick.UTC().Format("2006-01-02T15:04:05.000Z")] != 1 {
			lost = append(lost, tick)
		}
	}
	switch {
	case len(lost) > 1:
		t.Fatalf("%d ticks did not run once: %v\nstarted %v\ndone %v", len(lost), lost, started, done)
	case len(lost) == 1:
		// Only the tick the killed instance had claimed, in flight at the kill.
		if d := killedAt.Sub(lost[0]); d < 0 || d > 2*time.Minute {
			t.Fatalf("tick %v was lost, but the kill was at %v\nstarted %v\ndone %v", lost[0], killedAt, started, done)
		}
		t.Logf("the killed instance had claimed the tick of %v: not run again", lost[0])
	default:
		t.Logf("the surviving instance had claimed the tick in flight at %v", killedAt)
	}
	if n := len(started) - len(done); n > len(lost) {
		t.Fatalf("%d runs started and never ended, %d ticks lost", n, len(lost))
	}
}
