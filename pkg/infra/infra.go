// Package infra connects a Pinion process to its NATS and its store (SQLite
// on one machine, MongoDB when shared) and opens what every service shares
// (the repository, the session buckets, the resource-event stream), so each
// main stays a few lines of wiring.
package infra

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/pkg/store/mongostore"
	"github.com/pinion-health/pinion/pkg/store/sqlstore"
)

// Conns are a process's connections and the shared handles built on them.
type Conns struct {
	NC       *nats.Conn
	JS       jetstream.JetStream
	Mongo    *mongo.Client
	Store    store.Store
	Repo     *repo.Repo
	Sessions *session.Store
	stop     context.CancelFunc

	projector *projects.Projector
}

// Options says where to connect.
type Options struct {
	NATSURL   string
	InProcess nats.InProcessConnProvider
	Name      string
	// SQLitePath opens the embedded SQLite store there; otherwise MongoURI
	// and Database name the MongoDB (or FerretDB) to use. With neither the
	// process has no store (the gateway).
	SQLitePath string
	SQLiteSync string
	MongoURI   string
	Database   string
	// Replicas is how many NATS servers keep each stream and bucket.
	Replicas int
	Log      *slog.Logger
}

// ResourceStream keeps resource-change events for consumers that must not
// miss one (bots triggered by subscriptions).
const ResourceStream = "PINION_RESOURCES"

// waitJetStream waits until JetStream answers: a cluster's servers that
// start together elect their meta leader a few seconds after they take
// connections, and a service started with them should wait, not exit.
func waitJetStream(ctx context.Context, js jetstream.JetStream, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if log == nil {
		log = slog.Default()
	}
	for warned := false; ; {
		try, cancelTry := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(try)
		cancelTry()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("jetstream not available after a minute: %w", err)
		}
		if !warned {
			log.Warn("waiting for JetStream", "err", err)
			warned = true
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Open connects to NATS and MongoDB and opens the shared handles.
func Open(ctx context.Context, o Options) (*Conns, error) {
	nc, err := bus.Connect(o.NATSURL, o.Name, o.InProcess, o.Log)
	if err != nil {
		return nil, err
	}
	c := &Conns{NC: nc}
	js, err := jetstream.New(nc)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	// Every stream and bucket any package opens through c.JS gets the
	// replicas asked for.
	c.JS = bus.Replicated(js, o.Replicas, o.Log)
	if err := waitJetStream(ctx, c.JS, o.Log); err != nil {
		c.Close()
		return nil, err
	}
	if _, err = c.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       ResourceStream,
		Subjects:   []string{bus.EventPrefix + ">"},
		Storage:    jetstream.FileStorage,
		MaxAge:     7 * 24 * time.Hour,
		Duplicates: 10 * time.Minute,
	}); err != nil {
		c.Close()
		return nil, fmt.Errorf("stream %s: %w", ResourceStream, err)
	}
	if c.Sessions, err = session.Open(ctx, c.JS, session.Config{}); err != nil {
		c.Close()
		return nil, err
	}
	switch {
	case o.SQLitePath != "":
		c.Store, err = sqlstore.Open(ctx, o.SQLitePath, sqlstore.Options{Sync: o.SQLiteSync, Log: o.Log})
	case o.MongoURI != "":
		c.Store, err = c.openMongo(ctx, o)
	default:
		return c, nil
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	if c.Repo, err = repo.New(c.Store, nc, repo.Options{Log: o.Log, JS: c.JS}); err != nil {
		c.Close()
		return nil, err
	}
	// Every process projects memberships into the session bucket (one
	// queue group, one durable consumer: each change is projected once).
	if c.projector, err = projects.StartProjector(ctx, nc, c.JS, ResourceStream, c.Repo, c.Sessions, o.Log); err != nil {
		c.Close()
		return nil, err
	}
	// Every process relays what a crashed writer left in the outbox.
	rctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	go c.Repo.Relay(rctx, 5*time.Second)
	return c, nil
}

func (c *Conns) openMongo(ctx context.Context, o Options) (store.Store, error) {
	// Majority writes with journaling: an acknowledged write is on disk on
	// a majority of the replica set and survives a primary failover.
	// Reads are majority too, so a read never sees a write that a
	// failover could roll back. FerretDB accepts and ignores both.
	journaled := true
	mo := options.Client().ApplyURI(o.MongoURI).SetAppName(o.Name).
		SetWriteConcern(&writeconcern.WriteConcern{W: "majority", Journal: &journaled}).
		SetReadConcern(readconcern.Majority()).
		SetMaxPoolSize(64).
		SetTimeout(30 * time.Second)
	var err error
	if c.Mongo, err = mongo.Connect(mo); err != nil {
		return nil, fmt.Errorf("mongodb: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err = c.Mongo.Ping(pctx, nil)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("mongodb ping: %w", err)
	}
	return mongostore.Open(ctx, c.Mongo.Database(o.Database), mongostore.Options{
		IndexKeys: search.IndexKeys, Log: o.Log,
	})
}

// Close closes everything that was opened.
func (c *Conns) Close() {
	if c.stop != nil {
		c.stop()
	}
	if c.projector != nil {
		c.projector.Stop()
	}
	if c.Repo != nil {
		c.Repo.Close()
	}
	if c.Store != nil {
		_ = c.Store.Close()
	}
	if c.Mongo != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.Mongo.Disconnect(ctx)
		cancel()
	}
	if c.NC != nil {
		_ = c.NC.Drain()
	}
}
