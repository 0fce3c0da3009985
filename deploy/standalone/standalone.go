// Package standalone runs all of Pinion in one process: an embedded NATS
// server with JetStream, an embedded FerretDB (the MongoDB wire protocol on
// SQLite files, or on PostgreSQL), the four services and the gateway.
// Setting PINION_NATS_URL or PINION_MONGODB_URI uses external servers
// instead of the embedded ones.
package standalone

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/gateway"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/mail"
	"github.com/pinion-health/pinion/pkg/metrics"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/botexec"
	"github.com/pinion-health/pinion/services/fhir"
	"github.com/pinion-health/pinion/services/identity"
	"github.com/pinion-health/pinion/services/membership"
)

// Stack is a running standalone Pinion.
type Stack struct {
	// Addr is where the gateway listens.
	Addr string
	// SuperAdmin is the super-admin client; Secret is set only when this
	// start generated it.
	SuperAdmin identity.Bootstrap

	log      *slog.Logger
	ns       *server.Server
	ferret   *embedded.FerretDB
	conns    *infra.Conns
	view     *session.View
	services map[string]*service
	cancel   context.CancelFunc
	done     chan error
}

// Start brings the whole stack up and returns once the gateway listens.
func Start(ctx context.Context, cfg *config.Config, log *slog.Logger) (_ *Stack, err error) {
	st := &Stack{log: log, done: make(chan error, 1)}
	defer func() {
		if err != nil {
			st.shutdown()
		}
	}()
	// Take the port first: a taken port is the most common start-up failure.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (PINION_ADDR): %w", cfg.Addr, err)
	}
	st.Addr = ln.Addr().String()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		ln.Close()
		return nil, fmt.Errorf("data directory %s: %w", cfg.DataDir, err)
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
	mongoURI := cfg.MongoURI
	if mongoURI == "" {
		if st.ferret, err = startFerretDB(cfg, log); err != nil {
			ln.Close()
			return nil, err
		}
		mongoURI = st.ferret.URI
	}
	st.conns, err = infra.Open(ctx, infra.Options{
		NATSURL: natsURL, InProcess: inProc, Name: "pinion-standalone",
		MongoURI: mongoURI, Database: cfg.MongoDatabase, Log: log,
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	c := st.conns

	mailer, err := mail.FromConfig(cfg.SMTPURL, cfg.DataDir)
	if err != nil {
		ln.Close()
		return nil, err
	}
	var id *identity.Service
	st.services = map[string]*service{
		"fhir": {build: func() lifecycle {
			return fhir.New(fhir.Config{BaseURL: cfg.BaseURL}, c.NC, c.JS, c.Repo, c.Sessions, log)
		}},
		"identity": {build: func() lifecycle {
			id = identity.New(identity.Config{
				BaseURL: cfg.BaseURL, DataDir: cfg.DataDir,
				SuperAdminClientID: cfg.SuperAdminClientID, SuperAdminSecret: cfg.SuperAdminSecret,
				TokenLifetime: cfg.AccessTokenLifetime, SecretGrace: cfg.ClientSecretGrace,
			}, c.NC, c.JS, c.DB, c.Repo, c.Sessions, log)
			return id
		}},
		"membership": {build: func() lifecycle {
			return membership.New(membership.Config{BaseURL: cfg.BaseURL, Mailer: mailer}, c.NC, c.JS, c.Repo, c.Sessions, log)
		}},
		"botexec": {build: func() lifecycle {
			return botexec.New(botexec.ConfigFrom(cfg), c.NC, c.Repo, c.Sessions, log)
		}},
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
	gw := gateway.New(gateway.ConfigFrom(cfg), c.NC, st.view, log)
	gctx, cancel := context.WithCancel(context.Background())
	st.cancel = cancel
	if err := metrics.Serve(gctx, cfg.AdminAddr, log); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen on %s (PINION_ADMIN_ADDR): %w", cfg.AdminAddr, err)
	}
	go func() { st.done <- gw.Listen(gctx, ln) }()
	return st, nil
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
}

// lifecycle is what the stack needs of a service.
type lifecycle interface {
	Start(context.Context) error
	Stop(context.Context) error
}

// service is one of the stack's services: how to build it, and the running
// instance if any.
type service struct {
	build   func() lifecycle
	running lifecycle
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
	inst := s.build()
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.running.Stop(ctx)
	s.running = nil
	return err
}
