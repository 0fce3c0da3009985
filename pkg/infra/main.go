package infra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/metrics"
	"github.com/pinion-health/pinion/pkg/process"
)

// Service is a service's lifecycle, the same in its own process and in
// the standalone stack: Start subscribes and serves, Stop drains what is
// in flight within its context's deadline.
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// StopTimeout bounds a service's drain once it is told to stop.
const StopTimeout = 10 * time.Second

// Run starts s, serves until ctx ends, and stops it within StopTimeout.
func Run(ctx context.Context, s Service) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	return s.Stop(sctx)
}

// RunService is the whole main of a service run as its own process: read
// the settings, connect to the external NATS and MongoDB, build the service
// with build, and run it until SIGINT or SIGTERM. It exits the process.
func RunService(name string, build func(cfg *config.Config, c *Conns, log *slog.Logger) (Service, error)) {
	var log *slog.Logger
	fail := func(code int, err error) { process.Exit(name, log, code, err) }
	cfg, err := config.Load()
	if err != nil {
		fail(2, err)
	}
	if cfg.NATSURL == "" || cfg.MongoURI == "" {
		fail(2, errors.New("PINION_NATS_URL and PINION_MONGODB_URI must be set (use the pinion command for the standalone stack)"))
	}
	log = cfg.Logger().With("process", name)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := Open(ctx, Options{NATSURL: cfg.NATSURL, Name: name, MongoURI: cfg.MongoURI, Database: cfg.MongoDatabase, Replicas: cfg.NATSReplicas, Log: log})
	if err != nil {
		fail(1, err)
	}
	defer c.Close()
	s, err := build(cfg, c, log)
	if err != nil {
		fail(1, err)
	}
	if err := metrics.Serve(ctx, cfg.AdminAddr, log); err != nil {
		fail(1, fmt.Errorf("PINION_ADMIN_ADDR: %w", err))
	}
	log.Info("started")
	if err := Run(ctx, s); err != nil && !errors.Is(err, context.Canceled) {
		fail(1, err)
	}
}
