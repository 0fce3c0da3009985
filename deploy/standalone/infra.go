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

// StartInfra starts NATS (listening on PINION_NATS_LISTEN) and/or FerretDB
// (on PINION_FERRETDB_LISTEN) under the data directory: which is "all",
// "nats" or "ferretdb" (separate processes let a crash test kill each).
func StartInfra(cfg *config.Config, which string) (*Infra, error) {
	in := &Infra{}
	if which == "all" || which == "nats" {
		if cfg.NATSListen == "" {
			return nil, fmt.Errorf("PINION_NATS_LISTEN must be set (for example 127.0.0.1:4222)")
		}
		ns, err := embedded.StartNATS(embedded.NATSOptions{
			Dir: filepath.Join(cfg.DataDir, "nats"), Addr: cfg.NATSListen,
			MaxPayload: int32(cfg.MaxBodyBytes + 1<<20), SyncInterval: time.Second,
		})
		if err != nil {
			return nil, err
		}
		in.ns, in.NATSURL = ns, ns.ClientURL()
	}
	if which == "all" || which == "ferretdb" {
		f, err := embedded.StartFerretDB(embedded.FerretOptions{
			Dir: filepath.Join(cfg.DataDir, "db"), PostgreSQLURL: cfg.FerretPostgreSQLURL, Addr: cfg.FerretListen,
		})
		if err != nil {
			in.Close()
			return nil, err
		}
		in.ferret, in.MongoURI = f, f.URI
	}
	return in, nil
}

// Close stops the servers.
func (i *Infra) Close() {
	if i.ferret != nil {
		i.ferret.Close()
	}
	if i.ns != nil {
		i.ns.Shutdown()
		i.ns.WaitForShutdown()
	}
}
