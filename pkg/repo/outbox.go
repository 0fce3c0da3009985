package repo

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/pinion-health/pinion/pkg/bus"
)

// The outbox makes resource events exact without transactions. A write
// first records its event in the outbox, then stores the version, then
// publishes the event to JetStream (Nats-Msg-Id = type/id/version, so a
// second publish is dropped) and removes the record. A crash in between
// leaves the record; the relay later publishes it if that version exists
// in the history, or drops it once it is old enough to know the write
// never happened. So no event is published for a write that did not happen,
// and none is lost for a write that did.
const outboxColl = "outbox"

// outboxGrace is how long a record may wait before the relay looks at it
// (its writer is normally done in milliseconds); outboxAbandon is when a
// record whose version never appeared is dropped.
var (
	outboxGrace   = 3 * time.Second
	outboxAbandon = 2 * time.Minute
)

type outboxDoc struct {
	ID      string    `bson:"_id"`
	Event   string    `bson:"event"`
	Type    string    `bson:"type"`
	Version string    `bson:"v"`
	Res     string    `bson:"res"`
	At      time.Time `bson:"at"`
}

func outboxID(ev Event) string { return ev.Type + "/" + ev.ID + "/" + ev.VersionID }

// record stores an event in the outbox before its write.
func (r *Repo) record(ctx context.Context, ev Event, at time.Time) error {
	if r.js == nil {
		return nil
	}
	_, err := r.db.Collection(outboxColl).InsertOne(ctx, outboxRecord(ev, at))
	return err
}

func outboxRecord(ev Event, at time.Time) outboxDoc {
	b, _ := json.Marshal(ev)
	return outboxDoc{ID: outboxID(ev), Event: string(b), Type: ev.Type, Version: ev.VersionID, Res: ev.ID, At: at}
}

// publish sends a written version's event and clears its outbox record. A
// failure leaves the record for the relay.
func (r *Repo) publish(ctx context.Context, ev Event) {
	b, _ := json.Marshal(ev)
	if r.js == nil {
		if r.nc != nil {
			_ = r.nc.Publish(bus.EventSubject(ev.Type, ev.ID), b)
		}
		return
	}
	if _, err := r.js.Publish(ctx, bus.EventSubject(ev.Type, ev.ID), b, jetstream.WithMsgID(outboxID(ev))); err != nil {
		r.log.Warn("resource event left to the outbox relay", "type", ev.Type, "id", ev.ID, "err", err)
		return
	}
	r.clear(outboxID(ev))
}

// clear queues a published record for removal. Removals are batched off the
// write path: a record left behind by a crash here is only published again,
// and the stream's duplicate window drops it.
func (r *Repo) clear(id string) {
	r.clearMu.Lock()
	r.cleared = append(r.cleared, id)
	start := len(r.cleared) == 1
	r.clearMu.Unlock()
	if start {
		time.AfterFunc(50*time.Millisecond, r.flushCleared)
	}
}

func (r *Repo) flushCleared() {
	r.clearMu.Lock()
	ids := r.cleared
	r.cleared = nil
	r.clearMu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.db.Collection(outboxColl).DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}); err != nil {
		r.log.Warn("outbox records not cleared; the relay will republish them", "count", len(ids), "err", err)
	}
}

// Relay publishes what crashed writers left in the outbox, every interval,
// until ctx ends. Several processes may relay at once: duplicates are
// dropped by the stream's duplicate window.
func (r *Repo) Relay(ctx context.Context, interval time.Duration) {
	if r.js == nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := r.RelayOnce(ctx); err != nil {
				r.log.Warn("outbox relay", "err", err)
			} else if n > 0 {
				r.log.Info("outbox relay published left-over events", "count", n)
			}
		}
	}
}

// RelayOnce handles the outbox records older than the grace period and
// returns how many events it published.
func (r *Repo) RelayOnce(ctx context.Context) (int, error) {
	cur, err := r.db.Collection(outboxColl).Find(ctx, bson.D{{Key: "at", Value: bson.D{{Key: "$lt", Value: time.Now().Add(-outboxGrace)}}}})
	if err != nil {
		return 0, err
	}
	var docs []outboxDoc
	if err := cur.All(ctx, &docs); err != nil {
		return 0, err
	}
	n := 0
	for _, d := range docs {
		err := r.history(d.Type).FindOne(ctx, bson.D{{Key: fID, Value: d.Res + "/" + d.Version}}).Err()
		switch {
		case err == nil:
			var ev Event
			if json.Unmarshal([]byte(d.Event), &ev) == nil {
				r.publish(ctx, ev)
				n++
			}
		case errors.Is(err, mongo.ErrNoDocuments):
			if time.Since(d.At) > outboxAbandon {
				_, _ = r.db.Collection(outboxColl).DeleteOne(ctx, bson.D{{Key: "_id", Value: d.ID}})
			}
		default:
			return n, err
		}
	}
	return n, nil
}
