// Command pinion runs the whole of Pinion in one process (see package standalone).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pinion-health/pinion/deploy/standalone"
	"github.com/pinion-health/pinion/pkg/config"
)

func main() {
	cfg, err := config.Load()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinion:", err)
		os.Exit(2)
	}
	log := cfg.Logger()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := standalone.Start(ctx, cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinion:", err)
		os.Exit(1)
	}
	fmt.Printf("Pinion listening on http://%s (base URL %s, data in %s)\n", st.Addr, cfg.BaseURL, cfg.DataDir)
	if st.SuperAdmin.Created {
		fmt.Printf("Super-admin client created (saved to %s/superadmin.json):\n  client id:     %s\n  client secret: %s\n",
			cfg.DataDir, st.SuperAdmin.ClientID, st.SuperAdmin.Secret)
	}
	if err := st.Wait(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "pinion:", err)
		os.Exit(1)
	}
}
