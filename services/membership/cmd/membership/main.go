// Command membership runs the membership service as its own process.
package main

import (
	"log/slog"

	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/services/membership"
)

func main() {
	infra.RunService("membership", func(cfg *config.Config, c *infra.Conns, log *slog.Logger) (infra.Service, error) {
		return membership.FromConfig(cfg, c, log)
	})
}
