// Command botexec runs the bot executor as its own process.
package main

import (
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/services/botexec"
)

func main() {
	infra.RunService("botexec", func(cfg *config.Config, c *infra.Conns) (infra.Service, error) {
		return botexec.New(botexec.Config{BaseURL: cfg.BaseURL}, c.NC, c.Repo, c.Sessions, nil), nil
	})
}
