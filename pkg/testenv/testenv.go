// Package testenv starts the real parts a test of one package needs: an
// embedded NATS server with JetStream (in-process, no port), the resource
// stream, the session buckets, and a repository on the SQLite store in a
// temporary directory. Each is closed when the test ends. Tests of the
// packages these are built from (repo, session, sqlstore) cannot use it.
package testenv

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/pkg/store/sqlstore"
)

// ResourceStream is the test's stream of resource events.
const ResourceStream = "TEST_RESOURCES"

// Env is one test's parts.
type Env struct {
	NC       *nats.Conn
	JS       jetstream.JetStream
	Repo     *repo.Repo
	Sessions *session.Store
}

// New starts NATS, the resource stream, the session buckets and a
// repository whose writes publish their events to the stream.
func New(t testing.TB) *Env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	js := JetStream(t)
	nc := js.Conn()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: ResourceStream, Subjects: []string{bus.EventPrefix + ">"}}); err != nil {
		t.Fatal(err)
	}
	sessions, err := session.Open(ctx, js, session.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlstore.Open(ctx, filepath.Join(dir, "pinion.db"), sqlstore.Options{Sync: "off"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r, err := repo.New(st, nc, repo.Options{JS: js})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return &Env{NC: nc, JS: js, Repo: r, Sessions: sessions}
}

// JetStream starts an embedded NATS server only this process can reach,
// stopped when the test ends, and answers JetStream on a connection to it
// (js.Conn() is the connection).
func JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	ns, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
