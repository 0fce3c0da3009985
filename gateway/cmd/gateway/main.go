// Command gateway runs the HTTP gateway as its own process.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pinion-health/pinion/gateway"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/metrics"
	"github.com/pinion-health/pinion/pkg/process"
)

func main() {
	cfg, err := config.Load()
	if err != nil {
		process.Exit("gateway", nil, 2, err)
	}
	if cfg.NATSURL == "" {
		process.Exit("gateway", nil, 2, errors.New("PINION_NATS_URL must be set (use the pinion command for the standalone stack)"))
	}
	log := cfg.Logger().With("process", "gateway")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The gateway needs no database: only the bus and the session buckets.
	c, err := process.Connect(ctx, process.Options{NATSURL: cfg.NATSURL, Name: "gateway", Replicas: cfg.NATSReplicas, Log: log})
	if err != nil {
		process.Exit("gateway", log, 1, err)
	}
	defer c.Close()
	view, err := c.Sessions.Watch(ctx)
	if err != nil {
		process.Exit("gateway", log, 1, err)
	}
	defer view.Close()
	if err := metrics.Serve(ctx, cfg.AdminAddr, log); err != nil {
		process.Exit("gateway", log, 1, fmt.Errorf("PINION_ADMIN_ADDR: %w", err))
	}
	gw := gateway.New(gateway.NewConfig(cfg), c.NC, view, log)
	if err := gw.Listen(ctx, nil); err != nil && !errors.Is(err, context.Canceled) {
		process.Exit("gateway", log, 1, err)
	}
}
