package standalone

import (
	"bufio"
	"encoding/json"
	"fmt"

	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/testenv"
	"github.com/pinion-health/pinion/pkg/testenv/loopback"
)

// TestMultiProcess builds every binary, runs NATS and FerretDB (pinion
// infra), each service and the gateway as separate processes, runs the
// main story over HTTP, then kills the fhir process with SIGKILL: requests
// fail cleanly (503, never a hang) and succeed again once it is back.
func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts six processes; skipped with -short")
	}
	parallelIn(t, processStacks)
	bin := buildBinaries(t)
	data := t.TempDir()
	natsAddr, httpAddr := loopback.FreeAddr(t), loopback.FreeAddr(t)
	urls := natsURLs(t, data, natsAddr)
	common := []string{
		"PINION_DATA_DIR=" + data, "PINION_LOG_LEVEL=warn", "PINION_LOG_FORMAT=json",
		"PINION_SUPERADMIN_CLIENT_ID=" + saID, "PINION_SUPERADMIN_CLIENT_SECRET=" + saSec,
		"PINION_AUTH_RATE_LIMIT=0", "PINION_REQUEST_TIMEOUT=5s",
	}
	infra := start(t, bin, "pinion", append(common, "PINION_NATS_LISTEN="+natsAddr), "infra")
	defer stopProc(infra)
	waitPort(t, natsAddr)
	waitSocket(t, ferretSocket(data))
	// The services log at info, so that their own lines (not only
	// RunService's) show which format they were built with.
	svcEnv := append(common, "PINION_MONGODB_URI="+ferretURI(data), "PINION_ADDR="+httpAddr, "PINION_LOG_LEVEL=info",
		"PINION_REST_HOOK_ALLOW_PRIVATE=true")
	envOf := func(name string, extra ...string) []string {
		return append(append(append([]string{}, svcEnv...), "PINION_NATS_URL="+urls[name]), extra...)
	}
	procs := map[string]*exec.Cmd{}
	adminAddr := loopback.FreeAddr(t)
	for _, name := range []string{"fhir", "identity", "membership", "botexec", "gateway"} {
		env := envOf(name)
		if name == "gateway" {
			env = envOf(name, "PINION_ADMIN_ADDR="+adminAddr)
		}
		procs[name] = start(t, bin, name, env)
	}
	// A second identity instance: the two share token requests (one queue
	// group), so a client's secret must change in both at once.
	procs["identity 2"] = start(t, bin, "identity", envOf("identity"))
	defer func() {
		for _, p := range procs {
			stopProc(p)
		}
	}()
	own := "http://" + httpAddr + "/"
	defer useBase(t, own)()
	waitReadyAt(t, own)

	// The main story, over HTTP, across processes. The invite runs every
	// step with each process's own NATS permissions, the e-mail step too:
	// its end is announced only once the e-mail is queued.
	pid, su := adminProject(t, "Multi-process")
	r := do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Multi", "lastName", "Process", "email", "mp@example.com", "password", "multi process"))
	expect(t, r, 200)
	user := signIn(t, "mp@example.com", "multi process", "", "openid")["access_token"].(string)
	r = do(t, "POST", "fhir/R4/Patient", user, "application/fhir+json", patient("Across"))
	expect(t, r, 201)
	id := r.json(t)["id"].(string)
	r = do(t, "GET", "fhir/R4/Patient/"+id, user, "", nil, "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	expect(t, r, 200)
	if r.header.Get("traceparent") != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("trace context not carried: %q", r.header.Get("traceparent"))
	}
	// The gateway's admin port serves Prometheus metrics of what it answered.
	resp, err := client.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`pinion_http_requests_total{method="GET",route="/fhir/R4/:type/:id",status="200"}`, "pinion_bus_request_duration_seconds_bucket"} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// Rotation across identity instances: once both have cached the client,
	// the new secret works on either at once, and a retired one on neither.
	r = do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", []byte(`{"name":"replicated"}`))
	expect(t, r, 201)
	cid, old := r.json(t)["id"].(string), r.json(t)["secret"].(string)
	tokens := func(secret string, want int) {
		t.Helper()
		for i := 0; i < 20; i++ {
			if s := tokenStatus(t, cid, secret); s != want {
				t.Fatalf("token %d: %d, want %d", i, s, want)
			}
		}
	}
	tokens(old, 200)
	r = do(t, "POST", "fhir/R4/ClientApplication/"+cid+"/$rotate-secret", su, "application/json", []byte(`{"secret":"`+old+`"}`))
	expect(t, r, 200)
	fresh := r.json(t)["secret"].(string)
	tokens(fresh, 200)
	expect(t, do(t, "POST", "fhir/R4/ClientApplication/"+cid+"/$rotate-secret", su, "application/json", []byte(`{"retiringSecret":"`+old+`"}`)), 200)
	// The retirement reaches the other instance by a NATS message, not
	// within the answer: wait until twenty requests in a row, over both
	// instances, are refused.
	testenv.Eventually(t, "the retired secret refused by every identity instance", func() bool {
		for i := 0; i < 20; i++ {
			if tokenStatus(t, cid, old) != 401 {
				return false
			}
		}
		return true
	})

	// Every process logs in the format it was configured with: a service
	// built apart from its settings (it once logged through slog's text
	// default when run as its own process) shows up as a plain-text line.
	for _, name := range []string{"fhir", "identity", "membership", "botexec", "gateway"} {
		if n, plain := procLogs.counts(name); n == 0 || plain > 0 {
			t.Errorf("%s logged %d JSON lines and %d others, want only JSON", name, n, plain)
		}
	}
	if n, _ := procLogs.counts("identity"); n > 0 && !procLogs.saw("identity", `"service":"identity"`) {
		t.Error("the identity service's own lines never reached the process log")
	}

	// Subscriptions: deliveries survive a crash of the service making them.
	deliveriesSurviveCrash(t, user, func() {
		if err := procs["botexec"].Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, _ = procs["botexec"].Process.Wait()
		procs["botexec"] = start(t, bin, "botexec", envOf("botexec"))
	})

	// Kill the fhir service outright: answers are a prompt 503, not a hang.
	if err := procs["fhir"].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = procs["fhir"].Process.Wait()
	t0 := time.Now()
	r = do(t, "GET", "fhir/R4/Patient/"+id, user, "", nil)
	if r.status != 503 && r.status != 504 {
		t.Fatalf("with fhir down: %d %s", r.status, r.body)
	}
	if time.Since(t0) > 7*time.Second {
		t.Fatalf("answer took %v", time.Since(t0))
	}
	// Back again: the same request succeeds, and the data is there.
	procs["fhir"] = start(t, bin, "fhir", envOf("fhir"))
	recovered := waitUntil(30*time.Second, func() bool {
		r = do(t, "GET", "fhir/R4/Patient/"+id, user, "", nil)
		return r.status == 200
	})
	if !recovered {
		t.Fatalf("fhir did not recover: %d %s", r.status, r.body)
	}
}

// natsURLs are each process's address of the embedded NATS, with its own
// user: the test writes the passwords file the server then reads.
func natsURLs(t *testing.T, data, addr string) map[string]string {
	t.Helper()
	pw, err := embedded.NATSPasswords(data)
	if err != nil {
		t.Fatal(err)
	}
	urls := map[string]string{}
	for _, name := range embedded.NATSUserNames {
		urls[name] = "nats://" + name + ":" + pw[name] + "@" + addr
	}
	return urls
}

// ferretSocket is the embedded FerretDB's socket in a data directory.
func ferretSocket(data string) string { return filepath.Join(data, "db", "run", "ferretdb.sock") }

// ferretURI is the MongoDB URI of that socket.
func ferretURI(data string) string { return "mongodb://" + url.PathEscape(ferretSocket(data)) + "/" }

func waitSocket(t *testing.T, path string) {
	t.Helper()
	waitListening(t, "unix", path)
}

func waitPort(t *testing.T, addr string) {
	t.Helper()
	waitListening(t, "tcp", addr)
}

// waitListening waits until a connection to addr is accepted.
func waitListening(t *testing.T, network, addr string) {
	t.Helper()
	eventually(t, 30*time.Second, "something to listen on "+addr, func() bool {
		c, err := net.DialTimeout(network, addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

// start runs a binary with the environment; its error lines go to stderr
// (not t.Log, which must not be called once the test has ended).
func start(t *testing.T, bin, name string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(io.Reader(out))
		for s.Scan() {
			line := s.Text()
			isJSON := json.Valid([]byte(line))
			procLogs.add(name, line, isJSON)
			if strings.Contains(line, `"level":"ERROR"`) || !isJSON {
				fmt.Fprintf(os.Stderr, "%s: %s\n", name, line)
			}
		}
	}()
	return cmd
}

// procLogs counts the lines each started binary wrote, JSON or not.
var procLogs = &logCounts{json: map[string]int{}, plain: map[string]int{}, lines: map[string][]string{}}

type logCounts struct {
	mu          sync.Mutex
	json, plain map[string]int
	lines       map[string][]string // the first lines, for saw
}

func (c *logCounts) add(name, line string, isJSON bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if isJSON {
		c.json[name]++
	} else {
		c.plain[name]++
	}
	if len(c.lines[name]) < 1000 {
		c.lines[name] = append(c.lines[name], line)
	}
}

func (c *logCounts) counts(name string) (jsonLines, plain int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.json[name], c.plain[name]
}

func (c *logCounts) saw(name, part string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.lines[name] {
		if strings.Contains(l, part) {
			return true
		}
	}
	return false
}

// supervised is a process run as systemd or Kubernetes would: when it
// exits (killed, or unable to start while NATS is down) it is started
// again, until stop.
type supervised struct {
	mu       sync.Mutex
	cmd      *exec.Cmd
	stopping bool
	n        int // restarts
}

func supervise(t *testing.T, bin, name string, env []string, args ...string) *supervised {
	p := &supervised{}
	p.run(t, bin, name, env, args)
	return p
}

func (p *supervised) run(t *testing.T, bin, name string, env, args []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return
	}
	c := start(t, bin, name, env, args...)
	p.cmd = c
	go func() {
		_ = c.Wait()
		p.mu.Lock()
		again := !p.stopping
		if again {
			p.n++
		}
		p.mu.Unlock()
		if again {
			// The supervisor's pause before a restart, as a real one
			// (systemd's RestartSec) has, so a process that cannot start
			// does not spin: part of the supervision, not a wait.
			time.Sleep(300 * time.Millisecond)
			p.run(t, bin, name, env, args)
		}
	}()
}

// kill sends SIGKILL to the running process; the supervisor starts it again.
func (p *supervised) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
}

func (p *supervised) restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// stop ends the supervision and the process.
func (p *supervised) stop() {
	p.mu.Lock()
	p.stopping = true
	c := p.cmd
	p.mu.Unlock()
	stopProc(c)
}

func stopProc(c *exec.Cmd) {
	if c == nil || c.Process == nil {
		return
	}
	_ = c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.Process.Kill()
	}
}
