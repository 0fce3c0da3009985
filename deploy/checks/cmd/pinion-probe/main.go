// Command pinion-probe is the health check inside Pinion's container images.
// The images are distroless (no shell, curl or wget), and a container
// engine's health check can only run a command inside the container, so the
// images carry this one:
//
//	pinion-probe URL
//
// exits 0 when GET URL answers 2xx within two seconds, and 1 otherwise.
// docker compose points it at the gateway's /readyz and at each service's
// /livez on its admin port (PINION_ADMIN_ADDR). Kubernetes probes the same
// endpoints itself and does not need it.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"
)

// timeout bounds a probe, below the engines' usual 3-5s health-check timeouts.
const timeout = 2 * time.Second

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: pinion-probe URL")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := probe(ctx, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "unhealthy:", err)
		os.Exit(1)
	}
}

// probe succeeds when GET url answers with a 2xx status.
func probe(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
