// Package standalone runs all of Pinion in one process: an embedded NATS
// server with JetStream, the embedded SQLite store (or an embedded FerretDB,
// the MongoDB wire protocol, with PINION_STORE=ferretdb), the four services
// and the gateway. Setting PINION_NATS_URL or PINION_MONGODB_URI uses
// external servers instead of the embedded ones.
package standalone

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/gateway"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/dirlock"
	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/metrics"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/botexec"
	fhirsvc "github.com/pinion-health/pinion/services/fhir"
	"github.com/pinion-health/pinion/services/identity"
	"github.com/pinion-health/pinion/services/identity/clients"
	"github.com/pinion-health/pinion/services/membership"
)

// Stack is a running standalone Pinion.
type Stack struct {
	// Addr is where the gateway listens.
	Addr string
	// SuperAdmin is the super-admin client; Secret is set only when this
	// start generated it.
	SuperAdmin clients.SuperAdmin

	log      *slog.Logger
	lock     *dirlock.Lock
	ns       *server.Server
	ferret   *embedded.FerretDB
	conns    *infra.Conns
	view     *session.View
	services map[string]*service
	cancel   context.CancelFunc
	done     chan error
}

// NATSServer is the embedded NATS server, for tools that run the stack in
// their own process and look at the bus (the bench holds back deliveries
// to measure a write without them).
func (s *Stack) NATSServer() *server.Server { return s.ns }

// Start brings the whole stack up and returns once the gateway listens.
func Start(ctx context.Context, cfg *config.Config, log *slog.Logger) (_ *Stack, err error) {
	st := &Stack{log: log, done: make(chan error, 1)}
	defer func() {
		if err != nil {
			st.shutdown()
		}
	}()
	// One process per data directory: two would write the same files. The
	// lock comes before the port so that a second `make run` names the
	// process holding the directory rather than only a taken port.
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", cfg.DataDir, err)
	}
	if st.lock, err = dirlock.Acquire(cfg.DataDir); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (PINION_ADDR): %w", cfg.Addr, err)
	}
	st.Addr = ln.Addr().String()
	if cfg.BaseURLDerived {
		// PINION_ADDR with port 0: links must name the port we got.
		cfg.BaseURL = config.DeriveBaseURL(st.Addr)
	}

	natsURL := cfg.NATSURL
	var inProc nats.InProcessConnProvider
	if natsURL == "" {
		if st.ns, _, natsURL, err = startNATS(cfg, true, log); err != nil {
			ln.Close()
			return nil, err
		}
		inProc = st.ns
	}
	o := infra.Options{NATSURL: natsURL, InProcess: inProc, Name: "pinion-standalone",
		MongoURI: cfg.MongoURI, Database: cfg.MongoDatabase, Replicas: cfg.NATSReplicas, Log: log}
	switch {
	case cfg.MongoURI != "":
	case cfg.Store == "ferretdb":
		if st.ferret, err = startFerretDB(cfg, log); err != nil {
			ln.Close()
			return nil, err
		}
		o.MongoURI = st.ferret.URI
	default:
		if err := refuseFerretData(cfg.DataDir); err != nil {
			ln.Close()
			return nil, err
		}
		o.SQLitePath, o.SQLiteSync = filepath.Join(cfg.DataDir, "pinion.db"), cfg.SQLiteSync
	}
	st.conns, err = infra.Open(ctx, o)
	if err != nil {
		ln.Close()
		return nil, err
	}
	c := st.conns

	var id *identity.Service
	st.services = map[string]*service{
		"fhir": {build: func() (infra.Service, error) { return fhirsvc.FromConfig(cfg, c, log) }},
		"identity": {build: func() (infra.Service, error) {
			var err error
			id, err = identity.FromConfig(cfg, c, log)
			return id, err
		}},
		"membership": {build: func() (infra.Service, error) { return membership.FromConfig(cfg, c, log) }},
		"botexec":    {build: func() (infra.Service, error) { return botexec.FromConfig(cfg, c, log) }},
	}
	for _, name := range serviceOrder {
		if err := st.StartService(ctx, name); err != nil {
			ln.Close()
			return nil, err
		}
	}
	st.SuperAdmin = id.SuperAdmin

	if st.view, err = c.Sessions.Watch(ctx); err != nil {
		ln.Close()
		return nil, fmt.Errorf("session view: %w", err)
	}
	gw := gateway.New(gateway.NewConfig(cfg), c.NC, st.view, log)
	gctx, cancel := context.WithCancel(context.Background())
	st.cancel = cancel
	if err := metrics.Serve(gctx, cfg.AdminAddr, log); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen on %s (PINION_ADMIN_ADDR): %w", cfg.AdminAddr, err)
	}
	go func() { st.done <- gw.Listen(gctx, ln) }()
	return st, nil
}

// refuseFerretData stops the SQLite store from starting empty beside the
// data of the earlier default, an embedded FerretDB: the data would seem
// lost. This version does not read that data (its credentials and search
// fields are stored differently now), and it is not migrated.
func refuseFerretData(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "pinion.db")); err == nil {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "db")); err != nil {
		return nil
	}
	return fmt.Errorf("data directory %s holds a FerretDB store (%s) written by an earlier Pinion, whose default store was FerretDB; "+
		"this version neither reads nor migrates it. Export what you need with the earlier version (GET the resources through its API), "+
		"then start this one on a new PINION_DATA_DIR and load them again (POST a transaction Bundle per batch)",
		dir, filepath.Join(dir, "db"))
}

// Wait blocks until the gateway stops or ctx ends, then shuts down.
func (st *Stack) Wait(ctx context.Context) error {
	var err error
	select {
	case err = <-st.done:
	case <-ctx.Done():
	}
	st.shutdown()
	return err
}

// Close shuts the stack down: gateway first, then services, then servers.
func (st *Stack) Close() { st.shutdown() }

func (st *Stack) shutdown() {
	if st.cancel != nil {
		st.cancel()
		select {
		case <-st.done:
		case <-time.After(15 * time.Second):
		}
		st.cancel = nil
	}
	for i := len(serviceOrder) - 1; i >= 0; i-- {
		if err := st.StopService(serviceOrder[i]); err != nil && !errors.Is(err, context.Canceled) {
			st.log.Warn("service stop", "service", serviceOrder[i], "err", err)
		}
	}
	if st.view != nil {
		st.view.Close()
		st.view = nil
	}
	if st.conns != nil {
		st.conns.Close()
		st.conns = nil
	}
	if st.ferret != nil {
		st.ferret.Close()
		st.ferret = nil
	}
	if st.ns != nil {
		st.ns.Shutdown()
		st.ns.WaitForShutdown()
		st.ns = nil
	}
	if st.lock != nil {
		_ = st.lock.Release()
		st.lock = nil
	}
}

// service is one of the stack's services: how to build it, and the running
// instance if any.
type service struct {
	build   func() (infra.Service, error)
	running infra.Service
}

// serviceOrder starts fhir first: the others' bootstrap writes resources
// the fhir service's indexes serve.
var serviceOrder = []string{"fhir", "identity", "membership", "botexec"}

// StartService builds and starts a service (again, after StopService: the
// crash tests use this to show that sagas resume).
func (st *Stack) StartService(ctx context.Context, name string) error {
	s := st.services[name]
	if s == nil || s.running != nil {
		return fmt.Errorf("service %s: unknown or already running", name)
	}
	inst, err := s.build()
	if err != nil {
		return fmt.Errorf("build %s: %w", name, err)
	}
	if err := inst.Start(ctx); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	s.running = inst
	return nil
}

// StopService stops a running service, leaving its queue-group seat and its
// durable consumers' pending steps for the next instance.
func (st *Stack) StopService(name string) error {
	s := st.services[name]
	if s == nil || s.running == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), infra.StopTimeout)
	defer cancel()
	err := s.running.Stop(ctx)
	s.running = nil
	return err
}
