// Package botexec is the bot executor service: $execute and $deploy of
// bots, run in the sandbox package's JavaScript runtime.
package botexec

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/repo"
)

// Config is what the bot executor needs to know.
type Config struct {
	BaseURL string
}

// Service is the bot executor.
type Service struct {
	cfg  Config
	nc   *nats.Conn
	repo *repo.Repo
	log  *slog.Logger
	svc  *bus.Service
}

// New wires the service.
func New(cfg Config, nc *nats.Conn, r *repo.Repo, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{cfg: cfg, nc: nc, repo: r, log: log.With("service", "botexec")}
}

// Start starts answering requests.
func (s *Service) Start(ctx context.Context) error {
	var err error
	s.svc, err = bus.Serve(s.nc, "botexec", "1.0.0", map[string]bus.Handler{}, s.log)
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
