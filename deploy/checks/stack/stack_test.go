package stack

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/deploy/checks/internal/deployfiles"
	"github.com/pinion-health/pinion/gateway"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/services/botexec"
	fhirsvc "github.com/pinion-health/pinion/services/fhir"
	"github.com/pinion-health/pinion/services/identity"
	"github.com/pinion-health/pinion/services/membership"
)

// violations records what the NATS server logs about refused publishes and
// subscriptions (it tells the offending client too, but the clients here
// are the services' own, which only log it).
type violations struct {
	mu    sync.Mutex
	lines []string
}

func (v *violations) record(format string, args ...any) {
	if line := fmt.Sprintf(format, args...); strings.Contains(line, "Violation") {
		v.mu.Lock()
		v.lines = append(v.lines, line)
		v.mu.Unlock()
	}
}

func (v *violations) Noticef(string, ...any)         {}
func (v *violations) Debugf(string, ...any)          {}
func (v *violations) Tracef(string, ...any)          {}
func (v *violations) Warnf(format string, a ...any)  { v.record(format, a...) }
func (v *violations) Errorf(format string, a ...any) { v.record(format, a...) }
func (v *violations) Fatalf(format string, a ...any) { v.record(format, a...) }
func (v *violations) all() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.lines...)
}
func (v *violations) reset()     { v.mu.Lock(); v.lines = nil; v.mu.Unlock() }
func (v *violations) count() int { v.mu.Lock(); defer v.mu.Unlock(); return len(v.lines) }
func (v *violations) has(subject string) bool {
	return strings.Contains(strings.Join(v.all(), "\n"), subject)
}
func (v *violations) String() string { return strings.Join(v.all(), "\n") }
func (v *violations) waitFor(subject string) bool {
	return waitUntil(2*time.Second, func() bool { return v.has(subject) })
}

// waitUntil polls ok until it holds or d has passed, and reports whether
// it held: the package's one wait on a condition.
func waitUntil(d time.Duration, ok func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ok() {
			return true
		}
	}
	return ok()
}

// quiet drops a test connection's asynchronous errors: the refusals it
// provokes on purpose are read from the server's log instead.
var quiet = nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})

// startNATS runs a NATS server from deploy/docker/nats.conf, on a free
// loopback port with its store in a temporary directory; everything else
// (JetStream settings, limits, users, permissions) is the file's.
func startNATS(t *testing.T, root string, env map[string]string) (*server.Server, *violations) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	o, err := deployfiles.NATS(root)
	if err != nil {
		t.Fatal(err)
	}
	o.Host, o.Port, o.HTTPPort = "127.0.0.1", server.RANDOM_PORT, 0
	o.Cluster, o.Routes = server.ClusterOpts{}, nil // alone, not compose's cluster
	o.StoreDir = t.TempDir()
	o.NoSigs = true
	ns, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	v := &violations{}
	ns.SetLoggerV2(v, false, false, false)
	go ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		t.Fatal("nats: not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns, v
}

// process is one Pinion process started in this test, as its main would.
type process struct {
	conns *infra.Conns
	stop  func()
}

// startProcess wires one process exactly as its cmd/<name>/main.go does,
// from the settings env gives it.
func startProcess(t *testing.T, name string, env map[string]string) (*process, string) {
	t.Helper()
	cfg, err := config.LoadFrom(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("process", name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := infra.Options{NATSURL: cfg.NATSURL, Name: name, Log: log}
	if name != "gateway" {
		o.MongoURI, o.Database = cfg.MongoURI, cfg.MongoDatabase
	}
	c, err := infra.Open(ctx, o)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	p := &process{conns: c}
	type service interface {
		Start(context.Context) error
		Stop(context.Context) error
	}
	var svc service
	switch name {
	case "gateway":
		view, err := c.Sessions.Watch(context.Background())
		if err != nil {
			t.Fatalf("gateway: %v", err)
		}
		gw := gateway.New(gateway.NewConfig(cfg), c.NC, view, log)
		ln, err := net.Listen("tcp", cfg.Addr)
		if err != nil {
			t.Fatal(err)
		}
		gctx, gcancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = gw.Listen(gctx, ln) }()
		p.stop = func() { gcancel(); <-done; view.Close(); c.Close() }
		return p, "http://" + ln.Addr().String() + "/"
	case "identity":
		svc, err = identity.FromConfig(cfg, c, log)
	case "membership":
		svc, err = membership.FromConfig(cfg, c, log)
	case "fhir":
		svc, err = fhirsvc.FromConfig(cfg, c, log)
	case "botexec":
		svc, err = botexec.FromConfig(cfg, c, log)
	default:
		t.Fatalf("unknown process %s", name)
	}
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	p.stop = func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = svc.Stop(sctx)
		c.Close()
	}
	return p, ""
}

func TestComposeStackOnEmbeddedServers(t *testing.T) {
	root, err := deployfiles.Root()
	if err != nil {
		t.Fatal(err)
	}
	project, err := deployfiles.Compose(context.Background(), root, nil)
	if err != nil {
		t.Fatal(err)
	}
	// One server stands in for compose's cluster (streams on one server).
	ns, violations := startNATS(t, root, deployfiles.Env(deployfiles.NATSServers(project)[0]))
	ferret, err := embedded.StartFerretDB(embedded.FerretOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ferret.Close)

	// Each process gets its compose environment, with the compose service
	// names (nats, mongo) pointed at the servers of this test.
	dataDir := t.TempDir()
	envOf := func(name string) map[string]string {
		env := deployfiles.Env(project.Services[name])
		urls, err := deployfiles.NATSURLs(env["PINION_NATS_URL"])
		if err != nil {
			t.Fatal(err)
		}
		u := urls[0]
		u.Host = ns.Addr().String()
		env["PINION_NATS_URL"] = u.String()
		env["PINION_NATS_REPLICAS"] = "1"
		if env["PINION_MONGODB_URI"] != "" {
			env["PINION_MONGODB_URI"] = ferret.URI
		}
		if env["PINION_DATA_DIR"] != "" {
			env["PINION_DATA_DIR"] = dataDir
		}
		if name == "gateway" {
			env["PINION_ADDR"] = "127.0.0.1:0"
			// A refused publish shows as a request nobody answers: fail fast.
			env["PINION_REQUEST_TIMEOUT"] = "10s"
		}
		env["PINION_LOG_LEVEL"] = "warn"
		return env
	}
	// fhir first, as the standalone stack starts them.
	var base string
	for _, name := range []string{"fhir", "identity", "membership", "botexec", "gateway"} {
		p, addr := startProcess(t, name, envOf(name))
		t.Cleanup(p.stop)
		if addr != "" {
			base = addr
		}
	}
	c := newClient(t, base)
	c.waitReady(30 * time.Second)
	id := envOf("identity")
	t.Cleanup(func() {
		if t.Failed() && violations.count() > 0 {
			t.Logf("nats.conf refused:\n%s", violations)
		}
	})

	t.Run("story", func(t *testing.T) {
		c.t = t
		runStory(t, c, id["PINION_SUPERADMIN_CLIENT_ID"], id["PINION_SUPERADMIN_CLIENT_SECRET"], storyOptions{
			mailDir: func() []string {
				m, _ := filepath.Glob(filepath.Join(dataDir, "mail", "*.eml"))
				return m
			},
		})
		if n := violations.count(); n > 0 {
			t.Errorf("the story needed %d publishes or subscriptions that nats.conf refuses:\n%s", n, violations)
		}
	})

	// And the permissions hold: connected as a service, another service's
	// requests and the gateway's rights are refused.
	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			user, subject string
		}{
			{"identity", bus.SubjectOf("GET", "/fhir/R4/:type/:id")},
			{"fhir", bus.SubjectOf("POST", "/oauth2/token")},
			{"botexec", bus.SubjectOf("POST", "/admin/projects/:projectId/invite")},
			{"membership", bus.SubjectOf("POST", "/fhir/R4/Bot/:id/$deploy")},
		} {
			violations.reset()
			nc, err := nats.Connect(envOf(tc.user)["PINION_NATS_URL"], nats.Name("deploy-checks"), quiet)
			if err != nil {
				t.Fatal(err)
			}
			_, err = nc.Request(tc.subject, nil, 500*time.Millisecond)
			nc.Close()
			if err == nil || !violations.waitFor(tc.subject) {
				t.Errorf("%s may send %s (err %v)", tc.user, tc.subject, err)
			}
		}
		// The gateway writes no events and no session state.
		violations.reset()
		nc, err := nats.Connect(envOf("gateway")["PINION_NATS_URL"], nats.Name("deploy-checks"), quiet)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{bus.EventSubject("Patient", "update"), "$KV.pinion_memberships.x"} {
			_ = nc.Publish(s, nil)
			_ = nc.Flush()
			if !violations.waitFor(s) {
				t.Errorf("the gateway may publish %s", s)
			}
		}
		nc.Close()
		// No user, no connection.
		if nc, err := nats.Connect("nats://" + ns.Addr().String()); err == nil {
			nc.Close()
			t.Error("an anonymous connection is accepted")
		}
	})
}
