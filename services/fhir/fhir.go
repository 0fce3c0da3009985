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
//
// It is one package of about 3,100 lines because every interaction goes
// through the same gate (target.go) and answers through the same Bundle
// and signing code; each interaction group has its own file.
package fhirsvc

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/auditsink"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/presign"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
)

// Config is what the FHIR service needs to know.
type Config struct {
	BaseURL string
	// AuditSinks stream the audit trail out (to a SIEM); none when empty.
	AuditSinks []auditsink.Destination
	// AuditRetention is how long the audit trail keeps events (forever
	// when zero): the instances take turns removing older ones.
	AuditRetention time.Duration
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
	// handlers maps each route to its handler (batch entries use it too).
	handlers map[string]bus.Handler
	// conditions serialises conditional writes with one condition.
	conditions keyLocks
	// stopExports stops taking bulk export jobs.
	stopExports func()
	// urls signs and checks the storage URLs of Binaries (storage.go).
	urls *presign.Signer

	stopAudit     func()   // the audit trail's writer
	stopSinks     []func() // and its sinks
	stopRetention func()   // and its retention, when set
	audit         *audit.Recorder
}

// FromConfig builds the service from the settings, as both the standalone
// stack and the service's own process do.
func FromConfig(cfg *config.Config, c *infra.Conns, log *slog.Logger) (*Service, error) {
	sinks, err := auditsink.FromConfig(cfg)
	if err != nil {
		return nil, err
	}
	return New(Config{BaseURL: cfg.BaseURL, AuditSinks: sinks, AuditRetention: cfg.AuditRetention}, c.NC, c.JS, c.Repo, c.Sessions, log), nil
}

// New wires the service.
func New(cfg Config, nc *nats.Conn, js jetstream.JetStream, r *repo.Repo, sessions *session.Store, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("service", "fhir")
	return &Service{cfg: cfg, nc: nc, js: js, repo: r, sessions: sessions, policies: access.NewPolicies(r, log), log: log,
		urls: presign.New(cfg.BaseURL, r), audit: audit.NewRecorder(js)}
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
	if s.stopSaga, err = s.invites.Run(ctx, invite.StepProfile, s.inviteProfile, s.log); err != nil {
		return err
	}
	s.handlers = handlers(s.routes())
	if err := s.startExports(ctx); err != nil {
		return err
	}
	// The audit trail's writers: every fhir instance runs one.
	if s.stopAudit, err = audit.NewWriter(s.repo, s.js, s.log).Start(ctx); err != nil {
		return err
	}
	// Its sinks, each instance running each; the stream hands a sink's
	// messages to one instance at a time.
	for _, d := range s.cfg.AuditSinks {
		stop, err := auditsink.New(d, s.repo, s.js, s.log, auditsink.Options{}).Start(ctx)
		if err != nil {
			return err
		}
		s.stopSinks = append(s.stopSinks, stop)
	}
	// Every instance runs retention; a lease has one of them do each pass.
	if s.cfg.AuditRetention > 0 {
		rt := &audit.Retention{Repo: s.repo, Recorder: s.audit, Keep: s.cfg.AuditRetention, Log: s.log.With("component", "audit-retention")}
		s.stopRetention = rt.Start()
	}
	s.svc, err = bus.Serve(s.nc, "fhir", "1.0.0", s.routes(), s.log)
	return err
}

// routes are the requests the service answers, as bus.Serve and a batch's
// entries take them: the declared endpoints with their traits applied.
func (s *Service) routes() []bus.Endpoint { return s.signing(s.endpoints()) }

// endpoints are the requests the service answers, one line each, with
// their traits: bus.SignsURLs on the routes whose answers carry the
// caller's resources (a $graphql answer's nodes are read by handlers it
// calls directly, so it is signed whole, as Medplum signs it), and
// bus.WritesResource on those whose body is a resource or a patch
// (storage.go's signing applies both).
func (s *Service) endpoints() []bus.Endpoint {
	return []bus.Endpoint{
		bus.Handle("GET /fhir/R4/metadata", bus.Public, s.capabilities),
		bus.Handle("GET /admin/super/audit/verify", bus.Token, s.auditVerify),
		// A signed URL is its own credential (storage.go).
		bus.Handle("GET /storage/:id/:vid", bus.Public, s.storage),
		bus.Handle("GET /fhir/R4/job/:id/status", bus.Token, s.jobStatus),
		bus.Handle("POST /fhir/R4/$export", bus.Token, s.export),
		bus.Handle("GET /fhir/R4/$export", bus.Token, s.export),
		bus.Handle("POST /fhir/R4/Patient/$export", bus.Token, s.export),
		bus.Handle("GET /fhir/R4/Patient/$export", bus.Token, s.export),
		bus.Handle("POST /fhir/R4/Group/:id/$export", bus.Token, s.export),
		bus.Handle("GET /fhir/R4/Group/:id/$export", bus.Token, s.export),
		bus.Handle("GET /fhir/R4/bulkdata/export/:id", bus.Token|bus.SignsURLs, s.exportStatus),
		bus.Handle("DELETE /fhir/R4/bulkdata/export/:id", bus.Token, s.exportCancel),
		bus.Handle("POST /fhir/R4/$graphql", bus.Token|bus.SignsURLs, s.graphQL),
		bus.Handle("GET /fhir/R4/ValueSet/$expand", bus.Token, s.expandValueSet),
		bus.Handle("GET /fhir/R4/ValueSet/$validate-code", bus.Token, s.validateValueSetCode),
		bus.Handle("GET /fhir/R4/CodeSystem/$lookup", bus.Token, s.lookupCode),
		bus.Handle("POST /fhir/R4/CodeSystem/$lookup", bus.Token, s.lookupCode),
		bus.Handle("GET /fhir/R4/CodeSystem/:id/$lookup", bus.Token, s.lookupCode),
		bus.Handle("POST /fhir/R4/CodeSystem/:id/$lookup", bus.Token, s.lookupCode),
		// A batch or transaction runs its entries through this list's handlers.
		bus.Handle("POST /fhir/R4", bus.Token, s.batch),
		bus.Handle("POST /fhir/R4/:type/$validate", bus.Token, s.validate),
		bus.Handle("PUT /fhir/R4/:type", bus.Token|bus.SignsURLs|bus.WritesResource, s.update),
		bus.Handle("GET /fhir/R4/:type", bus.Token|bus.SignsURLs, s.search),
		bus.Handle("POST /fhir/R4/:type/_search", bus.Token|bus.SignsURLs, s.search),
		bus.Handle("POST /fhir/R4/:type", bus.Token|bus.SignsURLs|bus.WritesResource, s.create),
		bus.Handle("GET /fhir/R4/:type/:id/_history/:vid", bus.Token|bus.SignsURLs, s.vread),
		bus.Handle("GET /fhir/R4/:type/:id/_history", bus.Token|bus.SignsURLs, s.history),
		bus.Handle("GET /fhir/R4/:type/:id", bus.Token|bus.SignsURLs, s.read),
		bus.Handle("PUT /fhir/R4/:type/:id", bus.Token|bus.SignsURLs|bus.WritesResource, s.update),
		bus.Handle("PATCH /fhir/R4/:type/:id", bus.Token|bus.SignsURLs|bus.WritesResource, s.patch),
		bus.Handle("DELETE /fhir/R4/:type/:id", bus.Token, s.delete),
	}
}

// handlers maps the routes ("METHOD /path") to their handlers, for a
// batch's entries, which resolve to a route through bus.FHIRRoute.
func handlers(routes []bus.Endpoint) map[string]bus.Handler {
	m := make(map[string]bus.Handler, len(routes))
	for _, e := range routes {
		m[e.Route] = e.Handler
	}
	return m
}

// Stop drains in-flight requests.
func (s *Service) Stop(ctx context.Context) error {
	if s.stopSaga != nil {
		s.stopSaga()
	}
	if s.stopExports != nil {
		s.stopExports()
	}
	if s.stopRetention != nil {
		s.stopRetention()
	}
	for _, stop := range s.stopSinks {
		stop()
	}
	if s.stopAudit != nil {
		s.stopAudit()
	}
	if s.svc == nil {
		return nil
	}
	return s.svc.Stop(ctx)
}
