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

	"github.com/pinion-health/pinion/pkg/process"
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
	// process has no store.
	SQLitePath string
	SQLiteSync string
	MongoURI   string
	Database   string
	// Replicas is how many NATS servers keep each stream and bucket.
	Replicas int
	Log      *slog.Logger
}

// ResourceStream keeps resource-change events for consumers that must not
// miss one (bots triggered by subscriptions); process.Connect opens it.
const ResourceStream = process.ResourceStream

// Open connects to NATS (process.Connect) and to the store, SQLite or
// MongoDB, and opens the shared handles.
func Open(ctx context.Context, o Options) (*Conns, error) {
	b, err := process.Connect(ctx, process.Options{NATSURL: o.NATSURL, InProcess: o.InProcess, Name: o.Name, Replicas: o.Replicas, Log: o.Log})
	if err != nil {
		return nil, err
	}
	nc := b.NC
	c := &Conns{NC: nc, JS: b.JS, Sessions: b.Sessions}
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
