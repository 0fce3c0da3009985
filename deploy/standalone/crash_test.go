package standalone

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/deploy/standalone/load"
	"github.com/pinion-health/pinion/pkg/testenv/loopback"
)

var loadDuration = flag.Duration("load.duration", 24*time.Second, "how long TestCrashRecovery drives load (make load runs it longer)")

// TestCrashRecovery runs a mixed load through the multi-process stack while
// it kills, with SIGKILL, one process at a time — each service, the
// gateway, NATS and FerretDB — and restarts it. Afterwards every
// acknowledged write must be there, no invite may be half done, no address
// may have two users or memberships, and no request may have hung.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a multi-process stack under load; skipped with -short")
	}
	parallelIn(t, processStacks)
	bin := buildBinaries(t)
	data := t.TempDir()
	natsAddr, httpAddr := loopback.FreeAddr(t), loopback.FreeAddr(t)
	urls := natsURLs(t, data, natsAddr)
	common := []string{
		"PINION_DATA_DIR=" + data, "PINION_LOG_LEVEL=error", "PINION_LOG_FORMAT=json",
		"PINION_SUPERADMIN_CLIENT_ID=" + saID, "PINION_SUPERADMIN_CLIENT_SECRET=" + saSec,
		"PINION_AUTH_RATE_LIMIT=0", "PINION_REQUEST_TIMEOUT=5s",
		"PINION_NATS_LISTEN=" + natsAddr, "PINION_MONGODB_URI=" + ferretURI(data), "PINION_ADDR=" + httpAddr,
	}
	type proc struct {
		bin  string
		args []string
	}
	procs := map[string]proc{
		"nats": {bin: "pinion", args: []string{"nats"}}, "ferretdb": {bin: "pinion", args: []string{"ferretdb"}},
		"fhir": {bin: "fhir"}, "identity": {bin: "identity"}, "membership": {bin: "membership"},
		"botexec": {bin: "botexec"}, "gateway": {bin: "gateway"},
	}
	order := []string{"nats", "ferretdb", "fhir", "identity", "membership", "botexec", "gateway"}
	// The infra processes run with only their own listen setting.
	envFor := func(name string) []string {
		env := []string{}
		for _, e := range common {
			if name == "ferretdb" && strings.HasPrefix(e, "PINION_NATS_LISTEN") {
				continue
			}
			if (name == "nats" || name == "ferretdb") && strings.HasPrefix(e, "PINION_MONGODB_URI") {
				continue
			}
			env = append(env, e)
		}
		if name != "nats" && name != "ferretdb" {
			env = append(env, "PINION_NATS_URL="+urls[name]) // each process as its own user
		}
		return env
	}
	running := map[string]*supervised{}
	for _, name := range order {
		p := procs[name]
		running[name] = supervise(t, bin, p.bin, envFor(name), p.args...)
		if name == "nats" {
			waitPort(t, natsAddr)
		}
		if name == "ferretdb" {
			waitSocket(t, ferretSocket(data))
		}
	}
	defer func() {
		for _, name := range order {
			running[name].stop()
		}
	}()
	own := "http://" + httpAddr + "/"
	defer useBase(t, own)()
	waitReadyAt(t, own)
	pid, su := adminProject(t, "Crash")
	bot := newBot(t, su, pid, "echo", "", `exports.handler = async (m, e) => e.input;`, "echo.js")

	cfg := load.Config{Base: own, ClientID: saID, Secret: saSec, ProjectID: pid, BotID: bot,
		Workers: 6, Duration: *loadDuration, MaxOps: 1_000_000, Deadline: 20 * time.Second}
	done := make(chan *load.Result)
	go func() { done <- load.Run(context.Background(), cfg) }()

	// One fault at a time, spread over the run, each process in turn: the
	// gaps are the load between faults, the schedule under test, not waits.
	faults := 0
	gap := *loadDuration / time.Duration(len(order)+1)
	for _, name := range []string{"fhir", "identity", "membership", "botexec", "gateway", "nats", "ferretdb"} {
		time.Sleep(gap)
		running[name].kill() // the supervisor starts it again
		faults++
	}
	res := <-done
	waitReadyAt(t, own)

	// Invites settle: each is done or failed with a reason, none pending.
	pending, failed, doneN := settleInvites(t, urls["membership"])
	rep := load.Verify(context.Background(), cfg, res)
	s := res.Stats
	after := 0
	if n := len(s.PerSecond); n > 3 {
		for _, c := range s.PerSecond[n-3:] {
			after += c
		}
		after /= 3
	}
	t.Logf("load %s, %d workers: %d operations, %d acknowledged (%d writes checked), %d refused with a status, %d without a response (gateway down), %d hangs",
		*loadDuration, cfg.Workers, s.Ops, s.Acked, rep.Checked, s.Refused, s.NoResponse, s.Hangs)
	t.Logf("faults injected: %d (SIGKILL of each of %v); writes lost: %d; duplicate users: %d; duplicate memberships: %d",
		faults, order, rep.Lost, rep.DuplicateUsers, rep.DuplicateMembers)
	t.Logf("throughput %.0f acknowledged ops/s overall, %d/s over the last 3 s; p50 %v, p99 %v; statuses %v",
		float64(s.Acked)/loadDuration.Seconds(), after, s.Percentile(.5), s.Percentile(.99), s.ByStatus)
	restarts := 0
	for _, p := range running {
		restarts += p.restarts()
	}
	t.Logf("invites: %d done, %d failed with a reason, %d still pending; %d process restarts", doneN, failed, pending, restarts)
	if rep.Lost > 0 || rep.DuplicateUsers > 0 || rep.DuplicateMembers > 0 {
		t.Errorf("%s", strings.Join(rep.Problems, "\n"))
	}
	if s.Hangs > 0 {
		t.Errorf("%d requests hung past %v", s.Hangs, cfg.Deadline)
	}
	if pending > 0 {
		t.Errorf("%d invites still pending", pending)
	}
	if s.Acked == 0 {
		t.Error("nothing was acknowledged")
	}
	auditSurvived(t, su, pid, res)
}

// auditSurvived checks the audit trail after the crashes: nothing lost
// (each Patient read answered 200 is named by a patient-read event, each
// membership an invite acknowledged by a member-invited one) and the
// project's chain whole.
func auditSurvived(t *testing.T, su, pid string, res *load.Result) {
	t.Helper()
	// A writer killed holding a batch leaves it to be delivered again once
	// its acknowledgement is overdue (30 s): events may still be on their
	// way, not lost.
	lost := 0
	eventually(t, 90*time.Second, "every acknowledged request's event stored", func() bool {
		named := map[string]bool{}
		for _, kind := range []string{"patient-read", "member-invited"} {
			// The load's patients are in the super admin's own project, its
			// invites in pid: every project's events (the super admin's search).
			q := url.Values{"subtype": {"https://pinion.health/fhir/CodeSystem/audit-event|" + kind}, "_count": {"1000"}}
			for next := "fhir/R4/AuditEvent?" + q.Encode(); next != ""; {
				r := do(t, "GET", next, su, "", nil)
				_, found := bundleOf(t, r)
				for _, ev := range found {
					for _, e := range ev["entity"].([]any) {
						if w, ok := e.(map[string]any)["what"].(map[string]any); ok {
							named[w["reference"].(string)] = true
						}
					}
				}
				next = ""
				for _, l := range r.json(t)["link"].([]any) {
					if u := l.(map[string]any)["url"].(string); l.(map[string]any)["relation"] == "next" {
						next = u[strings.Index(u, "fhir/R4/"):]
					}
				}
			}
		}
		lost = 0
		for _, id := range res.Reads {
			if !named["Patient/"+id] {
				lost++
			}
		}
		for _, w := range res.Writes {
			if w.Kind == "membership" && !named["ProjectMembership/"+w.ID] {
				lost++
			}
		}
		return lost == 0
	})
	t.Logf("audit trail: %d reads and %d invites checked, every one recorded", len(res.Reads), len(res.Emails))
	projects := []string{pid}
	if len(res.Reads) > 0 {
		r := do(t, "GET", "fhir/R4/Patient/"+res.Reads[0], su, "", nil)
		expect(t, r, 200)
		projects = append(projects, r.json(t)["meta"].(map[string]any)["project"].(string))
	}
	for _, p := range projects {
		// A part of the chain at a time, as the endpoint answers a long one.
		for from, timeouts := "", 0; ; {
			r := do(t, "GET", "admin/super/audit/verify?project="+p+from, su, "", nil)
			if r.status == 504 && timeouts < 5 {
				timeouts++ // the store slow under the suite's load: ask again
				continue
			}
			expect(t, r, 200)
			rep := r.json(t)
			if next, ok := rep["next"].(float64); ok && rep["break"] == nil {
				from = fmt.Sprintf("&from=%d", int64(next))
				continue
			}
			if rep["whole"] != true {
				t.Errorf("after the crashes, project %s's chain: %s", p, r.body)
			}
			break
		}
	}
}
