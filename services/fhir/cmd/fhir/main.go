// Command fhir runs the FHIR service as its own process.
package main

import (
	"log/slog"

	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	fhirsvc "github.com/pinion-health/pinion/services/fhir"
)

func main() {
	infra.RunService("fhir", func(cfg *config.Config, c *infra.Conns, log *slog.Logger) (infra.Service, error) {
		return fhirsvc.FromConfig(cfg, c, log)
	})
}
