package infra_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/testenv"
	"github.com/pinion-health/pinion/pkg/testenv/loopback"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// started is a service that says when Run starts and stops it.
type started struct{ start, stop chan struct{} }

func (s started) Start(context.Context) error { close(s.start); return nil }
func (s started) Stop(context.Context) error  { close(s.stop); return nil }

// Run serves until its context ends, not only until Start returns (run_test.go
// covers what it returns and Stop's deadline).
func TestRunServesUntilItsContextEnds(t *testing.T) {
	t.Parallel() // shares nothing: no server, no global
	s := started{start: make(chan struct{}), stop: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- infra.Run(ctx, s) }()
	<-s.start
	select {
	case <-s.stop:
		t.Fatal("stopped before its context ended")
	case err := <-done:
		t.Fatalf("Run returned %v before its context ended", err)
	default:
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testenv.WaitLimit):
		t.Fatal("Run did not return after its context ended")
	}
	select {
	case <-s.stop:
	default:
		t.Fatal("Run returned without stopping the service")
	}
}

// inProcessNATS is an embedded NATS server only this process can reach.
func inProcessNATS(t *testing.T) *server.Server {
	t.Helper()
	ns, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

// Open on SQLite gives a process its repository, whose writes reach the
// resource stream, and its session buckets; Close releases the store, so
// the next process opens it and finds what was written.
func TestOpenSQLite(t *testing.T) {
	ns := inProcessNATS(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "pinion.db")
	open := func() *infra.Conns {
		c, err := infra.Open(ctx, infra.Options{NATSURL: "nats://in-process", InProcess: ns, Name: "infra-test",
			SQLitePath: path, SQLiteSync: "off", Log: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := open()
	if c.Repo == nil || c.Sessions == nil || c.Store == nil || c.JS == nil {
		t.Fatalf("handles missing: %+v", c)
	}
	res, err := c.Repo.Create(ctx, repo.AllProjects, map[string]any{"resourceType": "Patient"}, repo.WriteOptions{Project: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.JS.Stream(ctx, infra.ResourceStream)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the write's event on the resource stream", func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs >= 1
	})
	nc, store := c.NC, c.Store
	c.Close()
	testenv.Eventually(t, "the connection to close", nc.IsClosed)
	if _, err := store.Get(ctx, "Patient", res.ID); err == nil {
		t.Error("the store still reads after Close")
	}

	c = open()
	defer c.Close()
	if _, err := c.Repo.Read(ctx, repo.AllProjects, "Patient", res.ID); err != nil {
		t.Fatalf("after reopening: %v", err)
	}
}

// A process with no store (the gateway) gets the bus and the sessions only.
func TestOpenWithoutStore(t *testing.T) {
	ns := inProcessNATS(t)
	c, err := infra.Open(context.Background(), infra.Options{NATSURL: "nats://in-process", InProcess: ns, Name: "infra-test", Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if c.Repo != nil || c.Store != nil || c.Sessions == nil || c.NC == nil {
		t.Errorf("handles %+v, want the bus and sessions alone", c)
	}
	c.Close()
	testenv.Eventually(t, "the connection to close", c.NC.IsClosed)
}

// childEnv marks the test binary run as a service process by
// TestRunServiceProcess.
const childEnv = "PINION_INFRA_TEST_CHILD"

// A service run with RunService starts, and on SIGTERM stops, closes its
// connections and returns, so its process exits 0; one without its
// settings exits 2, saying which.
func TestRunServiceProcess(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		var conns *infra.Conns
		infra.RunService("infra-test", func(_ *config.Config, c *infra.Conns, _ *slog.Logger) (infra.Service, error) {
			if c.Repo == nil {
				return nil, errors.New("no repository")
			}
			conns = c
			return printer{}, nil
		})
		fmt.Println("RunService returned; NATS closing:", conns.NC.IsDraining() || conns.NC.IsClosed())
		return
	}
	dir := t.TempDir()
	ferret, err := embedded.StartFerretDB(embedded.FerretOptions{Dir: filepath.Join(dir, "db"), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ferret.Close)
	passwords := map[string]string{}
	for _, name := range embedded.NATSUserNames {
		passwords[name] = "pw-" + name
	}
	users, err := embedded.NATSUsers(passwords)
	if err != nil {
		t.Fatal(err)
	}
	addr := loopback.FreeAddr(t)
	ns, err := embedded.StartNATS(embedded.NATSOptions{Dir: filepath.Join(dir, "nats"), Addr: addr, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)

	t.Run("stops on SIGTERM", func(t *testing.T) {
		cmd, lines := child(t, "PINION_NATS_URL=nats://membership:pw-membership@"+addr, "PINION_MONGODB_URI="+ferret.URI,
			"PINION_MONGODB_DATABASE=infra_test")
		waitLine(t, lines, "msg=started")
		waitLine(t, lines, "serving")
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waitLine(t, lines, "stopped")
		waitLine(t, lines, "RunService returned; NATS closing: true")
		if err := wait(t, cmd); err != nil {
			t.Fatalf("the process ended with %v, want exit 0", err)
		}
	})
	t.Run("without its settings", func(t *testing.T) {
		cmd, lines := child(t)
		waitLine(t, lines, "infra-test: PINION_NATS_URL and PINION_MONGODB_URI must be set")
		var exit *exec.ExitError
		if err := wait(t, cmd); !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Fatalf("the process ended with %v, want exit status 2", err)
		}
	})
}

// printer is the child's service: it says when it starts and stops.
type printer struct{}

func (printer) Start(context.Context) error { fmt.Println("serving"); return nil }
func (printer) Stop(context.Context) error  { fmt.Println("stopped"); return nil }

// child runs this test binary as a service process with these settings
// (and no other PINION_ ones), and returns its output, line by line.
func child(t *testing.T, env ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunServiceProcess$", "-test.count=1")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PINION_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, append(env, childEnv+"=1")...)
	// The child holds the only write end: its output ends when it does.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = r.Close() })
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return cmd, lines
}

// waitLine reads output until a line that contains want.
func waitLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	deadline := time.After(3 * testenv.WaitLimit) // a cold start opens FerretDB's collections
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the process ended before printing %q", want)
			}
			if strings.Contains(l, want) {
				return
			}
			t.Log(l)
		case <-deadline:
			t.Fatalf("no line with %q", want)
		}
	}
}

// wait waits for the process to end, for a bounded time.
func wait(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(testenv.WaitLimit):
		t.Fatal("the process did not end")
		return nil
	}
}
