// Command identity runs the identity service as its own process.
package main

import (
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/services/identity"
)

func main() {
	infra.RunService("identity", func(cfg *config.Config, c *infra.Conns) (infra.Service, error) {
		return identity.New(identity.Config{
			BaseURL:            cfg.BaseURL,
			SuperAdminClientID: cfg.SuperAdminClientID,
			SuperAdminSecret:   cfg.SuperAdminSecret,
			TokenLifetime:      cfg.AccessTokenLifetime,
			SecretGrace:        cfg.ClientSecretGrace,
		}, c.NC, c.JS, c.Repo, c.Sessions, nil), nil
	})
}
