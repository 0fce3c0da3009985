package standalone

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/embedded"
)

// Infra is the embedded servers alone, for services run as separate
// processes on one machine (`pinion infra`).
type Infra struct {
	NATSURL  string
	MongoURI string
	ns       *server.Server
	ferret   *embedded.FerretDB
}

// StartInfra starts NATS (listening on PINION_NATS_LISTEN) and FerretDB
// (on PINION_FERRETDB_LISTEN) under the data directory.
func StartInfra(cfg *config.Config) (*Infra, error) {
	if cfg.NATSListen == "" {
		return nil, fmt.Errorf("PINION_NATS_LISTEN must be set for infra mode (for example 127.0.0.1:4222)")
	}
	ns, err := embedded.StartNATS(embedded.NATSOptions{
		Dir: filepath.Join(cfg.DataDir, "nats"), Addr: cfg.NATSListen,
		MaxPayload: int32(cfg.MaxBodyBytes + 1<<20), SyncInterval: time.Second,
	})
	if err != nil {
		return nil, err
	}
	f, err := embedded.StartFerretDB(embedded.FerretOptions{
		Dir: filepath.Join(cfg.DataDir, "db"), PostgreSQLURL: cfg.FerretPostgreSQLURL, Addr: cfg.FerretListen,
	})
	if err != nil {
		ns.Shutdown()
		return nil, err
	}
	return &Infra{NATSURL: ns.ClientURL(), MongoURI: f.URI, ns: ns, ferret: f}, nil
}

// Close stops both servers.
func (i *Infra) Close() {
	i.ferret.Close()
	i.ns.Shutdown()
	i.ns.WaitForShutdown()
}
