// Command botexec runs the bot executor as its own process.
package main

import (
	"log/slog"

	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/services/botexec"
	"github.com/pinion-health/pinion/services/botexec/worker"
)

func main() {
	// A bot worker is this binary started again: it goes no further.
	worker.MainIfWorker()
	infra.RunService("botexec", func(cfg *config.Config, c *infra.Conns, log *slog.Logger) (infra.Service, error) {
		return botexec.FromConfig(cfg, c, log)
	})
}
