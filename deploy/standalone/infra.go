package standalone

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/embedded"
)

// Infra is the embedded servers alone, for services run as separate
// processes on one machine (`pinion infra`).
type Infra struct {
	// NATSURLs are the addresses the separately run processes connect to,
	// each with its own user (by process name: gateway, fhir, ...).
	NATSURLs map[string]string
	MongoURI string
	ns       *server.Server
	ferret   *embedded.FerretDB
}

// StartInfra starts NATS (listening on PINION_NATS_LISTEN) and/or FerretDB
// (on a Unix socket in the data directory, or PINION_FERRETDB_LISTEN)
// under the data directory: which is "all", "nats" or "ferretdb" (separate
// processes let a crash test kill each).
func StartInfra(cfg *config.Config, which string, log *slog.Logger) (*Infra, error) {
	in := &Infra{}
	if which == "all" || which == "nats" {
		if cfg.NATSListen == "" {
			return nil, fmt.Errorf("PINION_NATS_LISTEN must be set (for example 127.0.0.1:4222)")
		}
		ns, urls, _, err := startNATS(cfg, false, log)
		if err != nil {
			return nil, err
		}
		in.ns, in.NATSURLs = ns, urls
	}
	if which == "all" || which == "ferretdb" {
		f, err := startFerretDB(cfg, log)
		if err != nil {
			in.Close()
			return nil, err
		}
		in.ferret, in.MongoURI = f, f.URI
	}
	return in, nil
}

// startNATS starts the embedded NATS server. Without PINION_NATS_LISTEN it
// takes in-process connections only, and self is the address this process
// connects to. With it, the server listens there and takes only Pinion's
// per-process users (pinion-nats.conf, passwords in the data directory):
// nothing else on the machine can send a service request, with its caller
// header, or read the bus. withSelf adds a user with every right for this
// process's own in-process connection; its password never leaves it.
func startNATS(cfg *config.Config, withSelf bool, log *slog.Logger) (ns *server.Server, urls map[string]string, self string, err error) {
	o := embedded.NATSOptions{
		Dir:        filepath.Join(cfg.DataDir, "nats"),
		Addr:       cfg.NATSListen,
		NoListen:   cfg.NATSListen == "",
		MaxPayload: int32(cfg.MaxBodyBytes + 1<<20),
		// Flush JetStream to disk every second rather than NATS's default
		// two minutes: an acknowledged invite step survives a power cut
		// with at most a second of exposure.
		SyncInterval: time.Second,
	}
	var passwords map[string]string
	selfPassword := auth.NewSecret()
	if !o.NoListen {
		if passwords, err = embedded.NATSPasswords(cfg.DataDir); err != nil {
			return nil, nil, "", err
		}
		if o.Users, err = embedded.NATSUsers(passwords); err != nil {
			return nil, nil, "", err
		}
		if cfg.NATSClusterListen != "" {
			o.ClusterAddr, o.Routes, o.RoutePassword = cfg.NATSClusterListen, cfg.NATSRoutes, passwords[embedded.RoutePasswordKey]
		}
		if withSelf {
			o.Users = append(o.Users, &server.User{Username: "pinion", Password: selfPassword})
		}
	}
	if ns, err = embedded.StartNATS(o); err != nil {
		return nil, nil, "", err
	}
	if o.NoListen {
		return ns, nil, "nats://in-process", nil
	}
	addr := ns.Addr().String()
	urls = map[string]string{}
	for _, name := range embedded.NATSUserNames {
		urls[name] = "nats://" + name + ":" + passwords[name] + "@" + addr
	}
	log.Info("NATS listens for separately run processes; each connects as its own user",
		"addr", addr, "passwords", filepath.Join(cfg.DataDir, embedded.NATSPasswordsFile))
	return ns, urls, "nats://pinion:" + selfPassword + "@" + addr, nil
}

// startFerretDB starts the embedded FerretDB on a Unix socket in the data
// directory, or on PINION_FERRETDB_LISTEN.
func startFerretDB(cfg *config.Config, log *slog.Logger) (*embedded.FerretDB, error) {
	f, err := embedded.StartFerretDB(embedded.FerretOptions{
		Dir: filepath.Join(cfg.DataDir, "db"), PostgreSQLURL: cfg.FerretPostgreSQLURL, Addr: cfg.FerretListen,
	})
	if err != nil {
		return nil, err
	}
	if cfg.FerretListen != "" {
		log.Warn("the embedded FerretDB listens on TCP without a password: any local user can read and change every tenant's data",
			"addr", cfg.FerretListen)
	}
	return f, nil
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
