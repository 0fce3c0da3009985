// Command membership runs the membership service as its own process.
package main

import (
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/services/membership"
)

func main() {
	infra.RunService("membership", func(cfg *config.Config, c *infra.Conns) (infra.Service, error) {
		return membership.New(membership.Config{BaseURL: cfg.BaseURL}, c.NC, c.Repo, c.Sessions, nil), nil
	})
}
