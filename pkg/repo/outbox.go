package repo

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/store"
)

// The outbox makes resource events exact. A write stores its event in the
// outbox with the version (in one transaction where the store has them),
// then publishes it to JetStream (Nats-Msg-Id = type/id/version, so a
// second publish is dropped) and removes the record. A crash in between
// leaves the record; the relay publishes it later. So no event is published
// for a write that did not happen, and none is lost for a write that did.

// outboxGrace is how long a record may wait before the relay looks at it
// (its writer is normally done in milliseconds); outboxAbandon is when a
// record whose version never appeared is dropped (stores without
// transactions record the event before the write).
var (
	outboxGrace   = 3 * time.Second
	outboxAbandon = 2 * time.Minute
)

func outboxID(ev Event) string { return store.OutboxID(ev.Type, ev.ID, ev.VersionID) }

// outboxEvent is the event to record with a write; none without JetStream.
func (r *Repo) outboxEvent(ev Event) []byte {
	if r.js == nil {
		return nil
	}
	b, _ := json.Marshal(ev)
	return b
}

// publish sends a written version's event and clears its outbox record. A
// failure leaves the record for the relay.
func (r *Repo) publish(ctx context.Context, ev Event) {
	b, _ := json.Marshal(ev)
	if r.js == nil {
		if r.nc != nil {
			_ = r.nc.Publish(bus.EventSubject(ev.Type, ev.Op), b)
		}
		return
	}
	if _, err := r.js.Publish(ctx, bus.EventSubject(ev.Type, ev.Op), b, jetstream.WithMsgID(outboxID(ev))); err != nil {
		r.log.Warn("resource event left to the outbox relay", "type", ev.Type, "id", ev.ID, "err", err)
		return
	}
	r.clear(outboxID(ev))
}

// publishAfter is publish for a write's own path: the event is already in
// the outbox with the version, so the answer does not wait for the
// stream's ack (a round trip per write, issue 38). The ack clears the
// record; a refusal, or no ack within outboxGrace, leaves it to the relay,
// which publishes it again under the same Nats-Msg-Id. b is ev as the
// outbox recorded it (outboxEvent), sent as is rather than encoded again.
func (r *Repo) publishAfter(ev Event, b []byte) {
	if r.js == nil || b == nil {
		r.publish(context.Background(), ev)
		return
	}
	f, err := r.js.PublishAsync(bus.EventSubject(ev.Type, ev.Op), b, jetstream.WithMsgID(outboxID(ev)))
	if err != nil {
		r.log.Warn("resource event left to the outbox relay", "type", ev.Type, "id", ev.ID, "err", err)
		return
	}
	r.acks.Add(1)
	r.acksOnce.Do(func() {
		r.acksIn = make(chan ackWait, maxAckWaits)
		go r.awaitAcks()
	})
	a := ackWait{ev: ev, f: f, deadline: time.Now().Add(outboxGrace)}
	select {
	case r.acksIn <- a:
	default:
		go r.awaitAck(a) // more than maxAckWaits unanswered: never hold the write
	}
}

// ackWait is an event published without waiting, and when its ack is due.
type ackWait struct {
	ev       Event
	f        jetstream.PubAckFuture
	deadline time.Time
}

// maxAckWaits bounds the acks awaitAcks holds.
const maxAckWaits = 4096

// awaitAcks waits for the acks in the order the events were published,
// which is the order the stream answers them in, on one goroutine: a
// goroutine and a timer per event had the scheduler wake some 3,000
// goroutines a second under a load of transactions, each competing with
// the requests for the two cores. An ack that is late holds the others
// back by outboxGrace at most; their records are cleared that much later,
// and at worst published again by the relay, which the stream drops.
func (r *Repo) awaitAcks() {
	for a := range r.acksIn {
		r.awaitAck(a)
	}
}

func (r *Repo) awaitAck(a ackWait) {
	defer r.acks.Done()
	if err := a.wait(); err != nil {
		r.log.Warn("resource event left to the outbox relay", "type", a.ev.Type, "id", a.ev.ID, "err", err)
		return
	}
	r.clear(outboxID(a.ev))
}

var errNoAck = errors.New("no ack")

// wait returns nil once the stream acknowledges the event, its refusal,
// or errNoAck past the deadline. An ack already in costs no timer.
func (a ackWait) wait() error {
	select {
	case <-a.f.Ok():
		return nil
	case err := <-a.f.Err():
		return err
	default:
	}
	t := time.NewTimer(time.Until(a.deadline))
	defer t.Stop()
	select {
	case <-a.f.Ok():
		return nil
	case err := <-a.f.Err():
		return err
	case <-t.C:
		return errNoAck
	}
}

// settle waits for the acks of the events publishAfter sent (each waits
// outboxGrace at most).
func (r *Repo) settle() { r.acks.Wait() }

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
	if err := r.st.ClearOutbox(ctx, ids); err != nil {
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
	now := time.Now()
	pending, err := r.st.Pending(ctx, now.Add(-outboxGrace), now.Add(-outboxAbandon))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pending {
		var ev Event
		if json.Unmarshal(p.Event, &ev) == nil {
			r.publish(ctx, ev)
			n++
		} else {
			r.clear(p.ID) // unreadable: publishing it would not help anyone
		}
	}
	return n, nil
}
