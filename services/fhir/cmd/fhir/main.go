// Command fhir runs the FHIR service as its own process.
package main

import (
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/services/fhir"
)

func main() {
	infra.RunService("fhir", func(cfg *config.Config, c *infra.Conns) (infra.Service, error) {
		return fhir.New(fhir.Config{BaseURL: cfg.BaseURL}, c.NC, c.JS, c.Repo, c.Sessions, nil), nil
	})
}
