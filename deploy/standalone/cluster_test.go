package standalone

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/deploy/standalone/load"
	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/testenv/loopback"
)

var scaleDuration = flag.Duration("scale.duration", 0, "TestScaleOut's load per configuration (make load sets it; 0 skips the test)")

// serviceKinds are the processes a cluster runs n instances of.
var serviceKinds = []string{"fhir", "identity", "membership", "botexec", "gateway"}

// clusterStack is a NATS cluster (embedded servers on loopback, each with
// its own directory, every stream on all of them), one FerretDB and n
// instances of each service and of the gateway, every process supervised:
// a killed one is started again, as Kubernetes would.
type clusterStack struct {
	nats     []*supervised
	ferret   *supervised
	services map[string][]*supervised
	admin    map[string][]string // each instance's admin address, by kind
	bases    []string            // each gateway's base URL
	urls     map[string]string   // each NATS user's URL: every server
}

// startCluster starts servers NATS servers (one: no cluster) and n
// instances of each service, and waits until every instance has started.
func startCluster(t *testing.T, bin string, n, servers int) *clusterStack {
	t.Helper()
	root := t.TempDir()
	var dirs []string
	for i := 0; i < servers; i++ {
		dirs = append(dirs, filepath.Join(root, fmt.Sprintf("n%d", i)))
	}
	pw, err := embedded.NATSPasswords(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	// The servers share one passwords file: a process may connect to any.
	b, _ := os.ReadFile(filepath.Join(dirs[0], embedded.NATSPasswordsFile))
	for _, d := range dirs[1:] {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, embedded.NATSPasswordsFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := &clusterStack{services: map[string][]*supervised{}, admin: map[string][]string{}, urls: map[string]string{}}
	var clients, routes []string
	for range dirs {
		clients, routes = append(clients, loopback.FreeAddr(t)), append(routes, loopback.FreeAddr(t))
	}
	logs := []string{"PINION_LOG_LEVEL=error", "PINION_LOG_FORMAT=json"}
	// CLUSTER_DEBUG=<level> shows every process's log at that level.
	if os.Getenv("CLUSTER_DEBUG") != "" {
		logs = []string{"PINION_LOG_LEVEL=" + os.Getenv("CLUSTER_DEBUG"), "PINION_LOG_FORMAT=text"}
	}
	for i, d := range dirs {
		env := append([]string{"PINION_DATA_DIR=" + d, "PINION_NATS_LISTEN=" + clients[i]}, logs...)
		if servers > 1 {
			env = append(env, "PINION_NATS_CLUSTER_LISTEN="+routes[i], "PINION_NATS_ROUTES="+strings.Join(routes, ","))
		}
		c.nats = append(c.nats, supervise(t, bin, "pinion", env, "nats"))
	}
	store := filepath.Join(root, "store")
	c.ferret = supervise(t, bin, "pinion", append([]string{"PINION_DATA_DIR=" + store}, logs...), "ferretdb")
	t.Cleanup(c.stop)
	for _, a := range clients {
		waitPort(t, a)
	}
	waitSocket(t, ferretSocket(store))
	for _, name := range embedded.NATSUserNames {
		var us []string
		for _, a := range clients {
			us = append(us, "nats://"+name+":"+pw[name]+"@"+a)
		}
		c.urls[name] = strings.Join(us, ",")
	}
	// One public base URL (the token issuer) for every process, as behind
	// a load balancer: the first gateway's address.
	gateways := make([]string, n)
	for i := range gateways {
		gateways[i] = loopback.FreeAddr(t)
		c.bases = append(c.bases, "http://"+gateways[i]+"/")
	}
	for i := 0; i < n; i++ {
		for _, kind := range serviceKinds {
			admin := loopback.FreeAddr(t)
			env := append([]string{"PINION_DATA_DIR=" + filepath.Join(root, fmt.Sprintf("%s%d", kind, i)),
				"PINION_NATS_URL=" + c.urls[kind], "PINION_NATS_REPLICAS=" + strconv.Itoa(servers), "PINION_MONGODB_URI=" + ferretURI(store),
				"PINION_ADMIN_ADDR=" + admin, "PINION_BASE_URL=" + c.bases[0],
				"PINION_SUPERADMIN_CLIENT_ID=" + saID, "PINION_SUPERADMIN_CLIENT_SECRET=" + saSec,
				"PINION_AUTH_RATE_LIMIT=0", "PINION_REQUEST_TIMEOUT=5s"}, logs...)
			if kind == "gateway" {
				env = append(env, "PINION_ADDR="+gateways[i])
			}
			c.services[kind] = append(c.services[kind], supervise(t, bin, kind, env))
			c.admin[kind] = append(c.admin[kind], admin)
		}
	}
	t0 := time.Now()
	for _, b := range c.bases {
		waitLive(t, b+"readyz")
	}
	t.Logf("gateways ready in %v", time.Since(t0))
	// Every instance has started (connected and built), not only one of
	// each kind: a test that counts failures starts from a whole cluster.
	for _, kind := range serviceKinds {
		for _, a := range c.admin[kind] {
			waitLive(t, "http://"+a+"/livez")
		}
	}
	return c
}

// waitLive waits until url answers 200.
func waitLive(t *testing.T, url string) {
	t.Helper()
	eventually(t, 60*time.Second, url+" to answer 200", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// restarts counts the processes' restarts so far.
func (c *clusterStack) restarts() int {
	n := 0
	for _, p := range append(append([]*supervised{}, c.nats...), c.ferret) {
		n += p.restarts()
	}
	for _, ps := range c.services {
		for _, p := range ps {
			n += p.restarts()
		}
	}
	return n
}

func (c *clusterStack) stop() {
	for _, kind := range serviceKinds {
		for _, p := range c.services[kind] {
			p.stop()
		}
	}
	c.ferret.stop()
	for _, p := range c.nats {
		p.stop()
	}
}

// waitCurrent waits until every stream (and bucket) has a leader and all
// three replicas current: a restarted server has caught up, so another
// may be lost without losing the majority.
func (c *clusterStack) waitCurrent() (time.Duration, error) {
	t0 := time.Now()
	if len(c.nats) == 1 {
		return 0, nil
	}
	nc, err := nats.Connect(c.urls["identity"], nats.MaxReconnects(-1))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	behind := ""
	current := waitUntil(90*time.Second, func() bool {
		behind = ""
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		streams := js.ListStreams(ctx)
		n := 0
		for s := range streams.Info() {
			n++
			cl := s.Cluster
			if cl == nil || cl.Leader == "" || len(cl.Replicas) != len(c.nats)-1 {
				behind = s.Config.Name + " has no leader or too few replicas"
				continue
			}
			for _, r := range cl.Replicas {
				if !r.Current || r.Offline {
					behind = s.Config.Name + " on " + r.Name + " is behind"
				}
			}
		}
		if streams.Err() != nil {
			behind = streams.Err().Error()
		}
		cancel()
		return behind == "" && n > 0
	})
	if !current {
		return 0, fmt.Errorf("the cluster did not catch up: %s", behind)
	}
	return time.Since(t0), nil
}

// cpuSeconds reads a process's CPU time from its admin port's metrics.
func cpuSeconds(admin string) float64 {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "process_cpu_seconds_total "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// processCPU is one process's CPU time so far.
type processCPU struct {
	name    string
	seconds float64
}

// cpu is every process's CPU time so far, in a fixed order.
func (c *clusterStack) cpu() []processCPU {
	var out []processCPU
	for _, kind := range serviceKinds {
		for i, a := range c.admin[kind] {
			out = append(out, processCPU{fmt.Sprintf("%s %d", kind, i+1), cpuSeconds(a)})
		}
	}
	for i, p := range c.nats {
		out = append(out, processCPU{fmt.Sprintf("nats %d", i+1), p.cpuSeconds()})
	}
	return append(out, processCPU{"ferretdb", c.ferret.cpuSeconds()})
}

// cpuSeconds is the CPU time of the running process (Linux: /proc), for
// the processes without an admin port.
func (p *supervised) cpuSeconds() float64 {
	p.mu.Lock()
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Fields after the command name (in parentheses): utime and stime are
	// the 12th and 13th, in clock ticks of 1/100 s.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// settleInvites waits until no invite is pending and counts them by end.
func settleInvites(t *testing.T, natsURL string) (pending, failed, done int) {
	t.Helper()
	nc, err := nats.Connect(natsURL) // the invite records are the membership service's
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), invite.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	var unexplained []string
	waitUntil(90*time.Second, func() bool {
		pending, failed, done, unexplained = 0, 0, 0, nil
		keys, _ := kv.ListKeys(context.Background())
		for k := range keys.Keys() {
			e, err := kv.Get(context.Background(), k)
			if err != nil {
				continue
			}
			var rec invite.Record
			_ = json.Unmarshal(e.Value(), &rec)
			switch rec.Status {
			case "pending":
				pending++
			case "failed":
				failed++
				if rec.Failure == nil || rec.Failure.Err().Message() == "" {
					unexplained = append(unexplained, rec.ID)
				}
			default:
				done++
			}
		}
		return pending == 0
	}) // still pending after the wait: the callers report it
	for _, id := range unexplained {
		t.Errorf("invite %s failed without a reason", id)
	}
	return pending, failed, done
}

// driveCluster runs the load package's mix through every gateway at once
// (workers each) until stop is closed, and returns each gateway's run.
func driveCluster(t *testing.T, c *clusterStack, pid, bot string, workers int, botsOnly bool, stop <-chan struct{}) ([]load.Config, []*load.Result) {
	t.Helper()
	var cfgs []load.Config
	for i, b := range c.bases {
		cfgs = append(cfgs, load.Config{Base: b, ClientID: saID, Secret: saSec, ProjectID: pid, BotID: bot,
			Workers: workers, Duration: 3 * time.Minute, MaxOps: 1_000_000, Deadline: 20 * time.Second, Tag: fmt.Sprintf("g%d-", i),
			BotsOnly: botsOnly})
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stop; cancel() }()
	results := make([]*load.Result, len(cfgs))
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Add(1)
		go func(i int) { defer wg.Done(); results[i] = load.Run(ctx, cfgs[i]) }(i)
	}
	wg.Wait()
	return cfgs, results
}

// clusterProject makes the project and echo bot the load runs in. A
// service instance takes requests a moment after its admin port answers
// (its subscriptions reach the other NATS servers over the routes), so
// these first requests are retried while they answer 503.
func clusterProject(t *testing.T, c *clusterStack, name string) (string, string) {
	t.Helper()
	defer useBase(t, c.bases[0])()
	// untilServed sends a request again while it is answered 503, and
	// gives the first other answer, or the last 503 after 30 s.
	untilServed := func(send func() *response) *response {
		var r *response
		waitUntil(30*time.Second, func() bool { r = send(); return r.status != 503 })
		return r
	}
	call := func(method, path, token string, body any, want int) map[string]any {
		r := untilServed(func() *response { return do(t, method, path, token, "application/json", mustJSON(body)) })
		expect(t, r, want)
		return r.json(t)
	}
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {saID}, "client_secret": {saSec}}
	r := untilServed(func() *response {
		return do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	})
	if r.status != 200 {
		t.Fatalf("token: %d %s", r.status, r.body)
	}
	su := r.json(t)["access_token"].(string)
	pid := call("POST", "admin/Project", su, map[string]any{"resourceType": "Project", "name": name}, 201)["id"].(string)
	bot := call("POST", "admin/projects/"+pid+"/bot", su, map[string]any{"name": "echo"}, 201)["id"].(string)
	call("POST", "fhir/R4/Bot/"+bot+"/$deploy", su, map[string]any{"code": `exports.handler = async (m, e) => e.input;`, "filename": "echo.js"}, 200)
	call("POST", "fhir/R4/Bot/"+bot+"/$execute", su, map[string]any{"warm": true}, 200)
	return pid, bot
}

// TestClusterRecovery runs the services as two instances each, on a
// three-server NATS cluster with every stream and bucket on three
// servers, under a mixed load through both gateways. It kills one NATS
// server with SIGKILL, then (once it has caught up) another, then one
// instance of each service and a gateway. Every acknowledged write must be
// there afterwards, nothing doubled, no request hung, no invite left
// pending; what failed during each fault is reported.
func TestClusterRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-server NATS cluster and ten service processes; skipped with -short")
	}
	parallelIn(t, processStacks)
	bin := buildBinaries(t)
	c := startCluster(t, bin, 2, 3)
	if _, err := c.waitCurrent(); err != nil {
		t.Fatal(err)
	}
	pid, bot := clusterProject(t, c, "Cluster")
	atStart := c.restarts()

	type fault struct {
		what string
		at   time.Duration
	}
	var faults []fault
	t0 := time.Now()
	stop := make(chan struct{})
	// The faults' schedule: the sleeps are the spans of load between
	// faults, which the test measures, not waits for something to happen.
	go func() {
		defer close(stop)
		mark := func(what string) { faults = append(faults, fault{what, time.Since(t0)}) }
		time.Sleep(4 * time.Second)
		mark("none")
		for i := 0; i < 2; i++ {
			time.Sleep(4 * time.Second)
			c.nats[i].kill() // restarted by its supervisor
			mark(fmt.Sprintf("NATS server %d killed", i+1))
			// Two seconds of load while the server is down and starting
			// again, before the catch-up is awaited: until the restarted
			// server answers its leaders, they report its replicas from
			// its last contact before the kill, as current.
			time.Sleep(2 * time.Second)
			caught, err := c.waitCurrent()
			if err != nil {
				t.Error(err)
				return
			}
			t.Logf("NATS server %d: the cluster was current again %v after its restart began", i+1, caught+2*time.Second)
			mark("recovered")
		}
		for _, kind := range serviceKinds {
			time.Sleep(3 * time.Second)
			c.services[kind][0].kill()
			mark(kind + " instance 1 killed")
		}
		time.Sleep(5 * time.Second)
		mark("end")
	}()
	cfgs, results := driveCluster(t, c, pid, bot, 3, false, stop)
	for _, b := range c.bases {
		waitReadyAt(t, b)
	}
	pending, failed, doneN := settleInvites(t, c.urls["membership"])

	total := load.Stats{ByStatus: map[int]int{}}
	var lost, dupUsers, dupMembers, checked int
	var problems []string
	failedAt, ackedAt := map[int]int{}, map[int]int{}
	for i, res := range results {
		rep := load.Verify(context.Background(), cfgs[i], res)
		checked += rep.Checked
		lost, dupUsers, dupMembers = lost+rep.Lost, dupUsers+rep.DuplicateUsers, dupMembers+rep.DuplicateMembers
		problems = append(problems, rep.Problems...)
		s := res.Stats
		total.Ops, total.Acked, total.Refused, total.NoResponse, total.Hangs = total.Ops+s.Ops, total.Acked+s.Acked, total.Refused+s.Refused, total.NoResponse+s.NoResponse, total.Hangs+s.Hangs
		for sec, n := range s.FailedPerSecond {
			failedAt[sec] += n
		}
		for sec, n := range s.PerSecond {
			ackedAt[sec] += n
		}
		total.Latencies = append(total.Latencies, s.Latencies...)
		for st, n := range s.ByStatus {
			total.ByStatus[st] += n
		}
	}
	t.Logf("%d operations through 2 gateways: %d acknowledged (%d writes checked), %d refused with a status, %d unanswered, %d hung; p50 %v, p99 %v; statuses %v",
		total.Ops, total.Acked, checked, total.Refused, total.NoResponse, total.Hangs, total.Percentile(.5), total.Percentile(.99), total.ByStatus)
	t.Logf("lost writes: %d; duplicate users: %d; duplicate memberships: %d; invites %d done, %d failed with a reason, %d pending",
		lost, dupUsers, dupMembers, doneN, failed, pending)
	// Failures by phase: from each fault to the next.
	for i := 0; i+1 < len(faults); i++ {
		failed, acked := 0, 0
		for sec := int(faults[i].at.Seconds()); sec < int(faults[i+1].at.Seconds()); sec++ {
			failed, acked = failed+failedAt[sec], acked+ackedAt[sec]
		}
		t.Logf("  %-28s %5.1fs..%5.1fs: %4d acknowledged, %3d failed", faults[i].what, faults[i].at.Seconds(), faults[i+1].at.Seconds(), acked, failed)
	}
	t.Logf("%d process restarts at start, %d during the load (7 faults)", atStart, c.restarts()-atStart)
	if lost > 0 || dupUsers > 0 || dupMembers > 0 {
		t.Errorf("%s", strings.Join(problems, "\n"))
	}
	if total.Hangs > 0 {
		t.Errorf("%d requests hung past 20s", total.Hangs)
	}
	if pending > 0 {
		t.Errorf("%d invites still pending", pending)
	}
	if total.Acked == 0 {
		t.Error("nothing was acknowledged")
	}
}

// scaleGrowth is how many Patients the store holds before TestScaleOut
// measures: a store in use is not empty, and its searches cost more.
const scaleGrowth = 1000

// growCluster loads n Patients into the super admin's project (where the
// load writes and searches) in transaction Bundles of 250, through the
// first gateway.
func growCluster(t *testing.T, c *clusterStack, n int) {
	t.Helper()
	defer useBase(t, c.bases[0])()
	su := superToken(t)
	t0 := time.Now()
	for from := 0; from < n; from += 250 {
		var entries []any
		for k := from; k < min(from+250, n); k++ {
			entries = append(entries, map[string]any{"request": map[string]any{"method": "POST", "url": "Patient"},
				"resource": map[string]any{"resourceType": "Patient", "name": []any{map[string]any{"family": fmt.Sprintf("Grown%d", k%97), "given": []any{fmt.Sprint(k)}}}}})
		}
		r := do(t, "POST", "fhir/R4/", su, "application/fhir+json", mustJSON(map[string]any{"resourceType": "Bundle", "type": "transaction", "entry": entries}))
		expect(t, r, 200)
	}
	t.Logf("grown by %d Patients in %v", n, time.Since(t0).Round(time.Millisecond))
}

// TestScaleOut drives the same load against one instance of each service
// and against two, on a three-server cluster (streams on three servers)
// and, for what replication costs, on one server, each after growing the
// store by scaleGrowth Patients; it reports the throughput of each and
// each process's CPU time. make load runs it
// (-scale.duration).
func TestScaleOut(t *testing.T) {
	if *scaleDuration == 0 {
		t.Skip("make load runs it, with -scale.duration")
	}
	bin := buildBinaries(t)
	for _, run := range []struct{ instances, servers int }{{1, 1}, {2, 1}, {1, 3}, {2, 3}} {
		c := startCluster(t, bin, run.instances, run.servers)
		if _, err := c.waitCurrent(); err != nil {
			t.Fatal(err)
		}
		pid, bot := clusterProject(t, c, fmt.Sprintf("Scale %d", run.instances))
		growCluster(t, c, scaleGrowth)
		for _, botsOnly := range []bool{false, true} {
			before := c.cpu()
			stop := make(chan struct{})
			time.AfterFunc(*scaleDuration, func() { close(stop) })
			// The same 8 clients in every run, spread over the gateways.
			_, results := driveCluster(t, c, pid, bot, 8/run.instances, botsOnly, stop)
			acked, failed := 0, 0
			var all load.Stats
			for _, r := range results {
				acked, failed = acked+r.Stats.Acked, failed+r.Stats.Ops-r.Stats.Acked
				all.Latencies = append(all.Latencies, r.Stats.Latencies...)
			}
			var cpu []string
			for i, v := range c.cpu() {
				cpu = append(cpu, fmt.Sprintf("%s %.1fs", v.name, v.seconds-before[i].seconds))
			}
			mix := "mixed load"
			if botsOnly {
				mix = "bot runs only"
			}
			t.Logf("%s, %d instance(s) of each service, %d NATS server(s): %.0f acknowledged ops/s, %d failed; p50 %v, p99 %v; CPU during the run: %s",
				mix, run.instances, run.servers, float64(acked)/scaleDuration.Seconds(), failed, all.Percentile(.5), all.Percentile(.99), strings.Join(cpu, ", "))
			if failed > 0 {
				t.Errorf("%d operations failed", failed)
			}
		}
		c.stop()
	}
}
