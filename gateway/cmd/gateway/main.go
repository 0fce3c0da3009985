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
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/metrics"
)

func main() {
	cfg, err := config.Load()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(2)
	}
	if cfg.NATSURL == "" {
		fmt.Fprintln(os.Stderr, "gateway: PINION_NATS_URL must be set (use the pinion command for the standalone stack)")
		os.Exit(2)
	}
	log := cfg.Logger().With("process", "gateway")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The gateway needs no database: only the bus and the session buckets.
	c, err := infra.Open(ctx, infra.Options{NATSURL: cfg.NATSURL, Name: "gateway", Replicas: cfg.NATSReplicas, Log: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
	defer c.Close()
	view, err := c.Sessions.Watch(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
	defer view.Close()
	if err := metrics.Serve(ctx, cfg.AdminAddr, log); err != nil {
		fmt.Fprintln(os.Stderr, "gateway: PINION_ADMIN_ADDR:", err)
		os.Exit(1)
	}
	gw := gateway.New(gateway.ConfigFrom(cfg), c.NC, view, log)
	if err := gw.Listen(ctx, nil); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}
