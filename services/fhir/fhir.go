// Package fhirsvc (in services/fhir; pkg/fhir is package fhir) is the
// FHIR service, the FHIR R4 API under /fhir/R4 over the shared
// repository, each request confined to the caller's project and its
// access policy (target.go): create, read, vread, update, patch, delete,
// history and search of every resource type, conditional writes
// (conditional.go), $validate, batch and transaction Bundles (batch.go),
// the CapabilityStatement (metadata.go), and bulk $export run as an
// AsyncJob with its status and cancel (export.go). Writes that change
// what a token may do (memberships, access policies, client
// applications) reach the session bucket before they are answered
// (sessions.go). It also runs the invite saga's profile step (invite.go).
package fhirsvc

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/saga"
	"github.com/pinion-health/pinion/pkg/session"
)

// Config is what the FHIR service needs to know.
type Config struct {
	BaseURL string
}

// Service is the FHIR service.
type Service struct {
	cfg      Config
	nc       *nats.Conn
	js       jetstream.JetStream
	invites  *invite.Store
	stopSaga func()
	repo     *repo.Repo
	sessions *session.Store
	policies *access.Policies
	log      *slog.Logger
	svc      *bus.Service
	metadata []byte
	// handlers maps each subject to its handler (batch entries use it too).
	handlers map[string]bus.Handler
	// conditions serialises conditional writes with one condition.
	conditions keyLocks
	// stopExports stops taking bulk export jobs.
	stopExports func()
}

// FromConfig builds the service from the settings, as both the standalone
// stack and the service's own process do.
func FromConfig(cfg *config.Config, c *infra.Conns, log *slog.Logger) (*Service, error) {
	return New(Config{BaseURL: cfg.BaseURL}, c.NC, c.JS, c.Repo, c.Sessions, log), nil
}

// New wires the service.
func New(cfg Config, nc *nats.Conn, js jetstream.JetStream, r *repo.Repo, sessions *session.Store, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("service", "fhir")
	return &Service{cfg: cfg, nc: nc, js: js, repo: r, sessions: sessions, policies: access.NewPolicies(r, log), log: log}
}

// replyBudget is how large an answer this service may assemble.
func (s *Service) replyBudget() int { return bus.ReplyBudget(s.nc) }

// Start starts answering requests.
func (s *Service) Start(ctx context.Context) error {
	s.metadata = capabilityStatement(s.cfg.BaseURL)
	// Before answering: a search must not miss what an older build stored.
	if err := s.repo.Reindex(ctx); err != nil {
		return err
	}
	var err error
	if s.invites, err = invite.Open(ctx, s.js); err != nil {
		return err
	}
	if s.stopSaga, err = saga.Consume(ctx, s.js, "fhir-invite-profile", invite.SubjProfile, s.inviteProfile, s.profileFailed, s.log); err != nil {
		return err
	}
	s.handlers = s.routes()
	if err := s.startExports(ctx); err != nil {
		return err
	}
	s.svc, err = bus.Serve(s.nc, "fhir", "1.0.0", s.handlers, s.log)
	return err
}

// routes maps each subject the service answers to its handler.
func (s *Service) routes() map[string]bus.Handler {
	return map[string]bus.Handler{
		bus.SubjMetadata:     s.capabilities,
		bus.SubjRead:         s.read,
		bus.SubjVRead:        s.vread,
		bus.SubjHistory:      s.history,
		bus.SubjSearch:       s.search,
		bus.SubjCreate:       s.create,
		bus.SubjUpdate:       s.update,
		bus.SubjPatch:        s.patch,
		bus.SubjDelete:       s.delete,
		bus.SubjValidate:     s.validate,
		bus.SubjBatch:        s.batch,
		bus.SubjJobStatus:    s.jobStatus,
		bus.SubjExport:       s.export,
		bus.SubjExportStatus: s.exportStatus,
		bus.SubjExportCancel: s.exportCancel,
	}
}

// Stop drains in-flight requests.
func (s *Service) Stop(ctx context.Context) error {
	if s.stopSaga != nil {
		s.stopSaga()
	}
	if s.stopExports != nil {
		s.stopExports()
	}
	if s.svc == nil {
		return nil
	}
	return s.svc.Stop(ctx)
}

// Run starts the service and serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Stop(sctx)
}
