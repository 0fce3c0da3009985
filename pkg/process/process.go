// Package process is what every Pinion process does the same way, whether
// it has a store or not: it connects to NATS (JetStream, waited for and
// replicated; the resource-event stream; the session buckets) and it
// exits on a fatal error. It links no store adapter: pkg/infra adds the
// store for the services, and the gateway, which has none, links this
// alone.
package process

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/session"
)

// ResourceStream keeps resource-change events for consumers that must not
// miss one (bots triggered by subscriptions).
const ResourceStream = "PINION_RESOURCES"

// Bus is a process's NATS connection and what it opens on it.
type Bus struct {
	NC       *nats.Conn
	JS       jetstream.JetStream
	Sessions *session.Store
}

// Options says which NATS to connect to, and how.
type Options struct {
	NATSURL   string
	InProcess nats.InProcessConnProvider
	Name      string
	// Replicas is how many NATS servers keep each stream and bucket.
	Replicas int
	Log      *slog.Logger
}

// eventDuplicates is the resource stream's duplicate window. It drops an
// event published twice: by a writer whose ack came late and then by the
// outbox relay (3–8 s later), or by the relay of a process restarted
// within the window after dying between a publish and clearing its record.
// The server keeps a message id in memory per event for the window's
// length, and the collector walks them all: ten minutes of a steady 4,000
// writes a second was 2.4 million ids.
const eventDuplicates = 2 * time.Minute

// Connect connects to NATS, waits for JetStream, and opens the
// resource-event stream and the session buckets.
func Connect(ctx context.Context, o Options) (*Bus, error) {
	nc, err := bus.Connect(o.NATSURL, o.Name, o.InProcess, o.Log)
	if err != nil {
		return nil, err
	}
	b := &Bus{NC: nc}
	js, err := jetstream.New(nc)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	// Every stream and bucket any package opens through b.JS gets the
	// replicas asked for.
	b.JS = bus.Replicated(js, o.Replicas, o.Log)
	if err := waitJetStream(ctx, b.JS, o.Log); err != nil {
		b.Close()
		return nil, err
	}
	if _, err = b.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       ResourceStream,
		Subjects:   []string{bus.EventPrefix + ">"},
		Storage:    jetstream.FileStorage,
		MaxAge:     7 * 24 * time.Hour,
		Duplicates: eventDuplicates,
	}); err != nil {
		b.Close()
		return nil, fmt.Errorf("stream %s: %w", ResourceStream, err)
	}
	if b.Sessions, err = session.Open(ctx, b.JS, session.Config{}); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Close drains the connection.
func (b *Bus) Close() {
	if b.NC != nil {
		_ = b.NC.Drain()
	}
}

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

// Exit ends a process that cannot go on, with code: through its logger
// once it has one, so that a JSON log stays all JSON, and as a plain line
// on standard error before (a bad setting).
func Exit(name string, log *slog.Logger, code int, err error) {
	if log != nil {
		log.Error("exiting", "err", err.Error())
	} else {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	}
	os.Exit(code)
}
