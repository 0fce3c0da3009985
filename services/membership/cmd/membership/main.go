// Command membership runs the membership service as its own process.
package main

import (
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/mail"
	"github.com/pinion-health/pinion/services/membership"
)

func main() {
	infra.RunService("membership", func(cfg *config.Config, c *infra.Conns) (infra.Service, error) {
		mailer, err := mail.FromConfig(cfg.SMTPURL, cfg.DataDir)
		if err != nil {
			return nil, err
		}
		return membership.New(membership.Config{BaseURL: cfg.BaseURL, Mailer: mailer}, c.NC, c.JS, c.Repo, c.Sessions, nil), nil
	})
}
