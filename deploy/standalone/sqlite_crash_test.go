package standalone

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/deploy/standalone/load"
	"github.com/pinion-health/pinion/pkg/testenv/loopback"
)

// TestStandaloneCrash drives load through one standalone process on the
// default SQLite store and kills it with SIGKILL twice mid-load; a
// supervisor starts it again on the same data directory (the kernel drops
// the dead process's directory lock). Every acknowledged write must be
// there afterwards: a write is acknowledged only after its transaction
// commits, and SQLite's write-ahead log survives a process crash.
func TestStandaloneCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a standalone process under load; skipped with -short")
	}
	parallelIn(t, processStacks)
	bin := buildBinaries(t)
	data, httpAddr := t.TempDir(), loopback.FreeAddr(t)
	env := []string{
		"PINION_DATA_DIR=" + data, "PINION_ADDR=" + httpAddr, "PINION_LOG_LEVEL=error",
		"PINION_SUPERADMIN_CLIENT_ID=" + saID, "PINION_SUPERADMIN_CLIENT_SECRET=" + saSec,
		"PINION_AUTH_RATE_LIMIT=0", "PINION_REQUEST_TIMEOUT=5s",
	}
	pinion := supervise(t, bin, "pinion", env)
	defer pinion.stop()
	own := "http://" + httpAddr + "/"
	defer useBase(t, own)()
	waitReadyAt(t, own)
	pid, su := adminProject(t, "SQLite crash")
	bot := newBot(t, su, pid, "echo", "", `exports.handler = async (m, e) => e.input;`, "echo.js")

	duration := 12 * time.Second
	cfg := load.Config{Base: own, ClientID: saID, Secret: saSec, ProjectID: pid, BotID: bot,
		Workers: 6, Duration: duration, MaxOps: 1_000_000, Deadline: 20 * time.Second}
	done := make(chan *load.Result)
	go func() { done <- load.Run(context.Background(), cfg) }()
	const kills = 2
	for i := 0; i < kills; i++ {
		time.Sleep(duration / (kills + 1)) // the kills' schedule, spread over the load: not a wait
		pinion.kill()
	}
	res := <-done
	waitReadyAt(t, own)
	rep := load.Verify(context.Background(), cfg, res)
	s := res.Stats
	n := pinion.restarts()
	t.Logf("load %s, %d workers: %d operations, %d acknowledged (%d writes checked), %d refused, %d without a response; %d restarts after SIGKILL",
		duration, cfg.Workers, s.Ops, s.Acked, rep.Checked, s.Refused, s.NoResponse, n)
	t.Logf("writes lost: %d; duplicate users: %d; duplicate memberships: %d; hangs: %d",
		rep.Lost, rep.DuplicateUsers, rep.DuplicateMembers, s.Hangs)
	if n < kills {
		t.Errorf("%d restarts, want %d: the kills did not land", n, kills)
	}
	if rep.Checked == 0 {
		t.Error("no acknowledged write to check")
	}
	if rep.Lost > 0 || rep.DuplicateUsers > 0 || rep.DuplicateMembers > 0 {
		t.Errorf("%s", strings.Join(rep.Problems, "\n"))
	}
	if s.Hangs > 0 {
		t.Errorf("%d requests hung past %v", s.Hangs, cfg.Deadline)
	}
}
