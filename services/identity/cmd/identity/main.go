// Command identity runs the identity service as its own process.
package main

import (
	"log/slog"

	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/services/identity"
)

func main() {
	infra.RunService("identity", func(cfg *config.Config, c *infra.Conns, log *slog.Logger) (infra.Service, error) {
		return identity.FromConfig(cfg, c, log)
	})
}
