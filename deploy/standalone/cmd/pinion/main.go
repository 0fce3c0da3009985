// Command pinion runs the whole of Pinion in one process (see package
// standalone). `pinion infra` runs only the embedded NATS and FerretDB, for
// the services run as separate processes; `pinion nats` and `pinion
// ferretdb` run one of them each. `pinion audit verify <project-id>` (or
// `_`, or `--all`) says whether the audit trail's chains are whole,
// reading the configured store directly (docs/audit.md).
package main

import (
	"path/filepath"

	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pinion-health/pinion/deploy/standalone"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/services/botexec/worker"
)

func main() {
	// A bot worker is this binary started again: it goes no further.
	worker.MainIfWorker()
	cfg, err := config.Load()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinion:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "audit" {
		os.Exit(standalone.AuditCommand(ctx, cfg, os.Args[2:], os.Stdout, os.Stderr, cfg.Logger()))
	}
	if len(os.Args) > 1 {
		which := map[string]string{"infra": "all", "nats": "nats", "ferretdb": "ferretdb"}[os.Args[1]]
		if which == "" {
			fmt.Fprintln(os.Stderr, "usage: pinion [infra|nats|ferretdb]\n       "+standalone.AuditUsage)
			os.Exit(2)
		}
		in, err := standalone.StartInfra(cfg, which, cfg.Logger())
		if err != nil {
			fmt.Fprintln(os.Stderr, "pinion:", err)
			os.Exit(1)
		}
		if in.NATSURLs != nil {
			fmt.Printf("PINION_NATS_URL=nats://<process>:<password>@%s (each process's password is in %s)\n",
				cfg.NATSListen, filepath.Join(cfg.DataDir, embedded.NATSPasswordsFile))
		}
		if in.MongoURI != "" {
			fmt.Printf("PINION_MONGODB_URI=%s\n", in.MongoURI)
		}
		<-ctx.Done()
		in.Close()
		return
	}
	st, err := standalone.Start(ctx, cfg, cfg.Logger())
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
