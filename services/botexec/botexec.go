// Package botexec is the bot executor service. It serves Bot/$execute (by
// id or by identifier, POST or GET, at once or with Prefer: respond-async
// on an AsyncJob), Bot/$deploy, and creating bots with their memberships.
// Each run acts as the bot's membership (or its caller, for a runAsUser
// bot), waits for its project's turn (slots.go), runs on a pool of worker
// processes (worker) in the sandbox package's JavaScript runtime, reaches
// the other services over NATS with the rights it runs as (host.go), and
// is recorded as an AuditEvent off the answer's path (audit.go).
//
// With JetStream it also starts the projects' Subscriptions (the
// subscriptions package: matching, rest-hook and bot deliveries,
// WebSocket notifications, $resend), whose bot deliveries it runs.
package botexec

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/botexec/subscriptions"
	"github.com/pinion-health/pinion/services/botexec/worker"
)

// Config is what the bot executor needs to know.
type Config struct {
	BaseURL string
	// Memory bounds one execution's heap growth (0: the sandbox default).
	MemoryBytes int64
	// Workers is how many worker processes run bots, WorkerMemoryBytes the
	// address space each may use.
	Workers           int
	WorkerMemoryBytes int64
	// ProjectConcurrency is how many bots one project may run at once on
	// this instance.
	ProjectConcurrency int
	// JS and EventStream, when set, run subscriptions: the resource-event
	// stream to follow and the JetStream to keep deliveries in.
	JS          jetstream.JetStream
	EventStream string
	// RestHookPrivate lets rest-hooks reach private addresses.
	RestHookPrivate bool
	// CronClock is the scheduled bots' clock (the system's unless set, for
	// tests), CronPoll how often due runs are looked for (1 s).
	CronClock Clock
	CronPoll  time.Duration
}

// NewConfig is the bot executor's Config from the process's settings.
func NewConfig(c *config.Config) Config {
	return Config{BaseURL: c.BaseURL, Workers: c.BotWorkers, WorkerMemoryBytes: c.BotWorkerMemory,
		ProjectConcurrency: c.BotProjectRuns, RestHookPrivate: c.EgressPrivate}
}

// FromConfig builds the service from the settings, as both the standalone
// stack and the service's own process do.
func FromConfig(cfg *config.Config, c *infra.Conns, log *slog.Logger) (*Service, error) {
	bc := NewConfig(cfg)
	bc.JS, bc.EventStream = c.JS, infra.ResourceStream
	return New(bc, c.NC, c.Repo, c.Sessions, log), nil
}

// Service is the bot executor.
type Service struct {
	cfg      Config
	nc       *nats.Conn
	repo     *repo.Repo
	sessions *session.Store
	policies *access.Policies
	log      *slog.Logger
	svc      *bus.Service
	// pool runs bots in worker processes.
	pool *worker.Pool
	// slots bounds the bots each project runs at once.
	slots *projectSlots
	// members caches profiles' membership ids (bots', subscription
	// authors') for memberTTL.
	members *expirable.LRU[string, string]
	// identifiers caches identifier lookups for identifierTTL, at most
	// maxIdentifiers of them.
	identifiers *expirable.LRU[string, identifierHit]
	// botSecrets caches bots' own secrets (nil for none) for
	// botSecretsTTL, so that a run of a bot without any reads nothing.
	botSecrets *expirable.LRU[string, []any]
	// botMembers keeps bots' membership entries (nil without JetStream:
	// the bucket is read on every run).
	botMembers *session.MemberCache
	evSub      *nats.Subscription
	// audits queues AuditEvents for the writers, off the execution path.
	audits chan auditEvent
	// asyncSlots bounds the detached respond-async executions.
	asyncSlots chan struct{}
	auditQuit  chan struct{}
	auditWG    sync.WaitGroup

	// subs runs the projects' subscriptions (with JetStream only).
	subs *subscriptions.Deliverer
	// cron runs the scheduled bots (with JetStream only; cron.go).
	cron *scheduler
}

// New wires the service.
func New(cfg Config, nc *nats.Conn, r *repo.Repo, sessions *session.Store, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("service", "botexec")
	s := &Service{cfg: cfg, nc: nc, repo: r, sessions: sessions, policies: access.NewPolicies(r, log), log: log,
		asyncSlots: make(chan struct{}, maxAsync), slots: newProjectSlots(cfg.ProjectConcurrency),
		identifiers: expirable.NewLRU[string, identifierHit](maxIdentifiers, nil, identifierTTL),
		botSecrets:  expirable.NewLRU[string, []any](maxBotSecrets, nil, botSecretsTTL),
		members:     expirable.NewLRU[string, string](maxMembers, nil, memberTTL)}
	s.subs = subscriptions.New(subscriptions.Config{
		BaseURL: cfg.BaseURL, JS: cfg.JS, EventStream: cfg.EventStream, RestHookPrivate: cfg.RestHookPrivate,
		BotTimeout: maxTimeout * time.Second, NC: nc, Repo: r, Policies: s.policies,
		Bots:  deliveryBots{s},
		Audit: func(project string, ev *resource.AuditEvent) { s.queueAudit(auditEvent{project: project, ev: ev}) },
		Log:   log,
	})
	return s
}

// Start starts the bot workers and answering requests.
func (s *Service) Start(ctx context.Context) error {
	pool, err := worker.New(worker.Config{Workers: s.cfg.Workers, MemoryBytes: s.cfg.WorkerMemoryBytes, Log: s.log})
	if err != nil {
		return err
	}
	s.pool = pool
	s.audits = make(chan auditEvent, auditQueue)
	s.auditQuit = make(chan struct{})
	for i := 0; i < auditWriters; i++ {
		s.auditWG.Add(1)
		go s.writeAudits()
	}
	// A new or changed bot may change what an identifier finds.
	sub, err := s.nc.Subscribe(bus.EventSubject("Bot", "*"), func(*nats.Msg) { s.forgetIdentifiers() })
	if err != nil {
		s.pool.Close()
		return err
	}
	s.evSub = sub
	if s.cfg.JS != nil {
		if s.botMembers, err = session.WatchMembers(ctx, s.cfg.JS, s.sessions, maxBotMemberships); err != nil {
			_ = s.evSub.Unsubscribe()
			s.pool.Close()
			return err
		}
		if err := s.subs.Start(ctx); err != nil {
			s.botMembers.Stop()
			_ = s.evSub.Unsubscribe()
			s.pool.Close()
			return err
		}
		s.cron = newScheduler(s.cfg.JS, s.repo, s.cfg.EventStream, s.cfg.CronClock, s.cfg.CronPoll, s.runScheduled, s.log)
		if err := s.cron.Start(ctx); err != nil {
			s.subs.Stop()
			s.botMembers.Stop()
			_ = s.evSub.Unsubscribe()
			s.pool.Close()
			return err
		}
	}
	s.svc, err = bus.Serve(s.nc, "botexec", "1.0.0", []bus.Endpoint{
		bus.Handle("POST /admin/projects/:projectId/bot", bus.Token, s.createBot),
		// A run acts with the rights its bot's membership has in the view of
		// the gateway that forwards it (bus.NamesApplied; botMemberships).
		bus.Handle("POST /fhir/R4/Bot/$execute", bus.Token|bus.NamesApplied, s.execute),
		bus.Handle("GET /fhir/R4/Bot/$execute", bus.Token|bus.NamesApplied, s.execute),
		bus.Handle("POST /fhir/R4/Bot/:id/$execute", bus.Token|bus.NamesApplied, s.execute),
		bus.Handle("GET /fhir/R4/Bot/:id/$execute", bus.Token|bus.NamesApplied, s.execute),
		bus.Handle("POST /fhir/R4/Bot/:id/_history/:vid/$execute", bus.Token|bus.NamesApplied, s.execute),
		bus.Handle("GET /fhir/R4/Bot/:id/_history/:vid/$execute", bus.Token|bus.NamesApplied, s.execute),
		bus.Handle("POST /fhir/R4/Bot/:id/$deploy", bus.Token, s.deploy),
		bus.Handle("POST /admin/projects/:projectId/bot/:botId/secrets", bus.Token, s.setBotSecrets),
		bus.Handle("GET /admin/projects/:projectId/bot/:botId/secrets", bus.Token, s.getBotSecrets),
		bus.Handle("GET /admin/projects/:projectId/bot/:botId/schedule", bus.Token, s.getBotSchedule),
		bus.Handle("POST /fhir/R4/:type/:id/$resend", bus.Token, s.subs.Resend),
	}, s.log)
	if err != nil {
		s.pool.Close()
	}
	return err
}

// Stop drains in-flight requests.
func (s *Service) Stop(ctx context.Context) error {
	if s.evSub != nil {
		_ = s.evSub.Unsubscribe()
	}
	if s.botMembers != nil {
		s.botMembers.Stop()
	}
	var err error
	if s.svc != nil {
		err = s.svc.Stop(ctx)
	}
	s.subs.Stop()
	if s.cron != nil {
		s.cron.Stop()
	}
	if s.pool != nil {
		s.pool.Close()
	}
	// In-flight executions are answered: write the audit events they queued.
	if s.auditQuit != nil {
		close(s.auditQuit)
		done := make(chan struct{})
		go func() { s.auditWG.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.log.Error("stopped before every queued audit event was written")
		}
	}
	return err
}

// forgetIdentifiers drops every cached identifier lookup.
func (s *Service) forgetIdentifiers() { s.identifiers.Purge() }
