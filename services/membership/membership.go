// Package membership is the membership service: projects, invitations and
// project memberships — the /admin routes.
package membership

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
)

// Config is what the membership service needs to know.
type Config struct {
	BaseURL string
}

// Service is the membership service.
type Service struct {
	cfg      Config
	nc       *nats.Conn
	repo     *repo.Repo
	sessions *session.Store
	log      *slog.Logger
	svc      *bus.Service
}

// New wires the service.
func New(cfg Config, nc *nats.Conn, r *repo.Repo, sessions *session.Store, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{cfg: cfg, nc: nc, repo: r, sessions: sessions, log: log.With("service", "membership")}
}

// Start starts answering requests.
func (s *Service) Start(ctx context.Context) error {
	var err error
	s.svc, err = bus.Serve(s.nc, "membership", "1.0.0", map[string]bus.Handler{
		bus.SubjProjectCreate: s.createProject,
	}, s.log)
	return err
}

// Stop drains in-flight requests.
func (s *Service) Stop(ctx context.Context) error {
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
