// Package auditsink streams the audit trail out to a SIEM as it is
// written. A sink delivers each project's stored, chained AuditEvents,
// exactly as stored (so that the SIEM can check the chain itself), in
// chain order, at least once, to a destination: a syslog receiver
// (syslog.go) or an HTTPS webhook (webhook.go); FromConfig makes them from
// the settings (config.go).
//
// A sink's queue is the audit stream itself: each sink has its own
// durable consumer of it, whose messages tell it that a project has new
// events (their ids are in the message). Per project, a cursor kept in
// the store's secrets says how far the sink has delivered; a message is
// acknowledged once every event it names has been delivered. A sink that
// is down, or a destination that is, holds messages in its consumer and
// never a request: recording waits only on the stream.
package auditsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/inprogress"
	"github.com/pinion-health/pinion/pkg/metrics"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
)

// Event is one stored AuditEvent, as a sink delivers it.
type Event struct {
	Project string
	Seq     int64
	Link    audit.Link
	JSON    []byte // exactly as stored
}

// Destination is where a sink delivers.
type Destination interface {
	// Name names the sink: its consumer, its cursors and its metrics.
	Name() string
	// Limits bound one Deliver: events, and bytes of their JSON (one
	// event larger than that goes alone).
	Limits() (events, bytes int)
	// Deliver sends evs, one project's, in chain order, and returns nil
	// only once the destination has them, as far as it tells. One
	// goroutine at a time calls it; ctx ends it.
	Deliver(ctx context.Context, evs []Event) error
	// Close releases its connections.
	Close() error
}

// Options tune a sink; the zero value is the service's.
type Options struct {
	// MinBackoff and MaxBackoff bound the wait before another attempt:
	// it doubles from the first to the second (100 ms, 30 s).
	MinBackoff, MaxBackoff time.Duration
	// GiveUp is how long a message's events may stay out of the chain
	// before the sink stops waiting for them (2 min): see waitStored.
	GiveUp time.Duration
	// Sample is how often the queue's depth is sampled for /metrics (5 s).
	Sample time.Duration
}

func (o Options) withDefaults() Options {
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.GiveUp <= 0 {
		o.GiveUp = 2 * time.Minute
	}
	if o.Sample <= 0 {
		o.Sample = 5 * time.Second
	}
	return o
}

// Sink delivers the trail to one destination.
type Sink struct {
	dest Destination
	repo *repo.Repo
	js   jetstream.JetStream
	log  *slog.Logger
	o    Options
	// delivered are the events this sink delivered lately: a message
	// whose events went out with an earlier one's is acknowledged at once.
	delivered *lru.Cache[string, struct{}]

	events, failures prometheus.Counter
	queue            prometheus.Gauge
}

// New makes a sink of dest; Start runs it.
func New(dest Destination, r *repo.Repo, js jetstream.JetStream, log *slog.Logger, o Options) *Sink {
	delivered, _ := lru.New[string, struct{}](1 << 16)
	name := dest.Name()
	return &Sink{dest: dest, repo: r, js: js, log: log.With("component", "audit-sink", "sink", name), o: o.withDefaults(),
		delivered: delivered,
		events:    metrics.AuditSinkDelivered.WithLabelValues(name),
		failures:  metrics.AuditSinkFailures.WithLabelValues(name),
		queue:     metrics.AuditSinkQueue.WithLabelValues(name)}
}

// ConsumerPrefix starts each sink's durable consumer of the audit
// stream's name; the sink's name ends it.
const ConsumerPrefix = "audit-sink-"

// ackWait is how long the stream waits on a message in hand before
// giving it to another instance; the sink says it is still at work every
// third of it, for as long as its destination is down.
const ackWait = 30 * time.Second

// Start runs the sink until the returned stop, which closes the
// destination. Any number of processes may run one sink: they share its
// consumer, which hands out one message at a time (MaxAckPending 1), so
// one of them delivers at a time and each project's order holds.
func (s *Sink) Start(ctx context.Context) (stop func(), err error) {
	if err := audit.EnsureStream(ctx, s.js); err != nil {
		return nil, err
	}
	c, err := s.js.CreateOrUpdateConsumer(ctx, audit.Stream, jetstream.ConsumerConfig{
		Durable:       ConsumerPrefix + s.dest.Name(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxAckPending: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("audit sink %s: %w", s.dest.Name(), err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		s.run(runCtx, c)
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		s.sample(runCtx, c)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
			<-done
			_ = s.dest.Close()
		})
	}, nil
}

func (s *Sink) run(ctx context.Context, c jetstream.Consumer) {
	it, err := c.Messages(jetstream.PullMaxMessages(1))
	if err != nil {
		s.log.Error("audit sink not running", "err", err)
		return
	}
	defer func() {
		// A message already taken off the stream, not handled yet, goes
		// back at once: it would hold the consumer (MaxAckPending 1) for
		// ackWait.
		it.Drain()
		for {
			m, err := it.Next(jetstream.NextMaxWait(time.Second))
			if err != nil {
				return
			}
			_ = m.Nak()
		}
	}()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			s.log.Warn("next message", "err", err)
			if sleep(ctx, time.Second) != nil { // the server is away
				return
			}
			continue
		}
		s.handle(ctx, m)
	}
}

// sample keeps the queue's depth in /metrics.
func (s *Sink) sample(ctx context.Context, c jetstream.Consumer) {
	t := time.NewTicker(s.o.Sample)
	defer t.Stop()
	for {
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if info, err := c.Info(ictx); err == nil {
			s.queue.Set(float64(info.NumPending) + float64(info.NumAckPending))
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// handle delivers what one message names, and acknowledges it once all
// of it is delivered. A sink stopped before then leaves it to be
// delivered again, at once.
func (s *Sink) handle(ctx context.Context, m jetstream.Msg) {
	project, ok := audit.ProjectOfSubject(m.Subject())
	evs, err := audit.Decode(m.Data())
	if !ok || err != nil {
		// The writers drop it too: it never becomes an event.
		s.log.Error("unreadable message dropped", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return
	}
	want := map[string]bool{}
	for _, e := range evs {
		if !s.delivered.Contains(e.ID) {
			want[e.ID] = true
		}
	}
	if len(want) > 0 {
		stopBeat := inprogress.Keep(m, ackWait/3)
		err := s.deliverThrough(ctx, project, want)
		stopBeat()
		if err != nil {
			_ = m.Nak()
			return
		}
	}
	_ = m.Ack()
}

// deliverThrough delivers project's chain from its cursor on, until
// every event of want is delivered; only a stop (ctx) ends it sooner.
// Failures are retried with back-off: the message waits, not an event.
func (s *Sink) deliverThrough(ctx context.Context, project string, want map[string]bool) error {
	b := backoff{min: s.o.MinBackoff, max: s.o.MaxBackoff}
	w := waitStored{giveUp: s.o.GiveUp}
	for len(want) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		cursor, err := s.cursor(ctx, project)
		if err != nil {
			s.log.Warn("cursor not read", "project", project, "err", err)
			if err := sleep(ctx, b.next()); err != nil {
				return err
			}
			continue
		}
		batch, through, passed, err := s.read(ctx, project, cursor+1, want)
		w.passed += passed
		if err != nil {
			s.log.Warn("events not read", "project", project, "err", err)
			if err := sleep(ctx, b.next()); err != nil {
				return err
			}
			continue
		}
		if through == cursor {
			// The chain ends before the message's events.
			done, err := w.check(ctx, s, project, cursor, want)
			if done {
				return nil
			}
			if err != nil {
				s.log.Warn("events not read", "project", project, "err", err)
			}
			if err := sleep(ctx, b.next()); err != nil {
				return err
			}
			continue
		}
		if len(batch) > 0 {
			if err := s.dest.Deliver(ctx, batch); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s.failures.Inc()
				wait := b.next()
				s.log.Warn("delivery failed; retrying", "project", project, "from", batch[0].Seq, "events", len(batch), "retry_in", wait, "err", err)
				if err := sleep(ctx, wait); err != nil {
					return err
				}
				continue
			}
			s.events.Add(float64(len(batch)))
			s.log.Debug("delivered", "project", project, "from", batch[0].Seq, "to", batch[len(batch)-1].Seq)
		}
		if err := s.setCursor(ctx, project, through, &b); err != nil {
			return err
		}
		for _, e := range batch {
			s.delivered.Add(e.Link.Event, struct{}{})
			delete(want, e.Link.Event)
		}
		b.reset()
		w = waitStored{giveUp: s.o.GiveUp, passed: w.passed}
	}
	return nil
}

// read reads project's events from the place from on, up to the
// destination's limits, and stops after the last event of want. through
// is the last place read (from-1 when the chain ends before from). A
// place whose event was deleted underneath the API is passed over, with
// nothing to deliver: passed counts them.
func (s *Sink) read(ctx context.Context, project string, from int64, want map[string]bool) (batch []Event, through int64, passed int, err error) {
	maxEvents, maxBytes := s.dest.Limits()
	through = from - 1
	left, size := len(want), 0
	// Up to maxEvents places: places passed over count too, so that a
	// long run of them is read in bounded steps.
	tr := s.repo.NewTrailReader()
	for seq := from; seq < from+int64(maxEvents) && left > 0; seq++ {
		raw, l, err := audit.Stored(ctx, tr, project, seq)
		if errors.Is(err, fhir.ErrGone) {
			s.log.Error("an event was deleted underneath the API: passed over (audit verify reports it)", "project", project, "seq", seq)
			through, passed = seq, passed+1
			continue
		}
		if errors.Is(err, fhir.ErrNotFound) {
			break
		}
		if err != nil {
			return batch, through, passed, err
		}
		if len(batch) > 0 && size+len(raw) > maxBytes {
			break
		}
		batch, size, through = append(batch, Event{Project: project, Seq: seq, Link: l, JSON: raw}), size+len(raw), seq
		if want[l.Event] {
			left--
		}
	}
	return batch, through, passed, nil
}

// cursorKey is where a sink keeps how far it has delivered a project.
func cursorKey(sink, project string) string { return "audit-sink:" + sink + ":" + project }

// cursor is the last place of project's chain the sink delivered: before
// the first place kept when it has delivered none, or when retention
// removed events it had not delivered (they are gone: it goes on after).
func (s *Sink) cursor(ctx context.Context, project string) (int64, error) {
	first, err := audit.First(ctx, s.repo, project)
	if err != nil {
		return 0, err
	}
	raw, err := s.repo.Secret(ctx, cursorKey(s.dest.Name(), project))
	if errors.Is(err, store.ErrNotFound) {
		return first - 1, nil
	}
	if err != nil {
		return 0, err
	}
	cur, err := strconv.ParseInt(string(raw), 10, 64)
	if err == nil && cur < first-1 {
		s.log.Warn("retention removed events before this sink delivered them; going on after them", "project", project, "from", cur+1, "to", first-1)
		cur = first - 1
	}
	return cur, err
}

// setCursor keeps the cursor, trying until it is kept or the sink stops:
// what was delivered is delivered, and must not be sent again for want
// of a write.
func (s *Sink) setCursor(ctx context.Context, project string, seq int64, b *backoff) error {
	for {
		// A sink told to stop still keeps what it delivered.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := s.repo.SetSecret(wctx, cursorKey(s.dest.Name(), project), []byte(strconv.FormatInt(seq, 10)))
		cancel()
		if err == nil {
			return nil
		}
		s.log.Warn("cursor not kept", "project", project, "seq", seq, "err", err)
		if err := sleep(ctx, b.next()); err != nil {
			return err
		}
	}
}

// lookBack is how far before its cursor a sink looks for a message's
// events: a message delivered again after a crash names events its
// handling had delivered, just before the cursor (a message carries up to
// a few hundred).
const lookBack = 1024

// probe is how far past an empty place a sink looks for events stored
// after it.
const probe = 64

// holeWait is how long a place stays empty, with events after it, before
// a sink passes over it: writers fill places in order, so only a deletion
// underneath the API leaves one empty for long.
const holeWait = 10 * time.Second

// passWait is how long a sink waits for a message's events before it
// counts the places it passed over as theirs: the writers gather events
// for a few milliseconds before they store them.
const passWait = time.Second

// waitStored is a sink waiting for a message's events to be stored: the
// writers have not stored them yet, or they were delivered already (a
// message delivered again), or they are not to be (an event deleted
// underneath the API, recorded twice under one id).
type waitStored struct {
	giveUp     time.Duration
	since      time.Time
	lookedBack bool
	// passed counts the places passed over (their events deleted
	// underneath the API): each may have held one of the events waited
	// for, whose id went with it.
	passed int
}

// check says whether to stop waiting: what want names was found before
// the cursor, or was waited for too long. A hole in the chain (an event
// deleted underneath the API, with events after it) is passed over.
func (w *waitStored) check(ctx context.Context, s *Sink, project string, cursor int64, want map[string]bool) (done bool, err error) {
	// A place passed over may have held an event waited for, or the
	// writers may not have stored it yet: only once they have had time
	// to does the count decide.
	if w.lookedBack && len(want) <= w.passed && time.Since(w.since) >= passWait {
		s.log.Warn("a message's events not found, as many places passed over: acknowledged", "project", project, "missing", len(want))
		return true, nil
	}
	if w.since.IsZero() {
		// Most often the writers are storing them as the sink looks.
		w.since = time.Now()
		return false, nil
	}
	if !w.lookedBack {
		w.lookedBack = true
		first, err := audit.First(ctx, s.repo, project)
		if err != nil {
			return false, err
		}
		tr := s.repo.NewTrailReader()
		for seq := cursor; seq >= first && seq > cursor-lookBack && len(want) > 0; seq-- {
			_, l, err := audit.Stored(ctx, tr, project, seq)
			switch {
			case err == nil:
				delete(want, l.Event)
			case errors.Is(err, fhir.ErrGone):
				w.passed++
			case !fhir.Missing(err):
				return false, err
			}
		}
		return len(want) == 0, nil
	}
	waited := time.Since(w.since)
	if waited >= holeWait {
		tr := s.repo.NewTrailReader()
		for seq := cursor + 2; seq <= cursor+1+probe; seq++ {
			_, _, err := audit.Stored(ctx, tr, project, seq)
			if err == nil || errors.Is(err, fhir.ErrGone) {
				s.log.Error("an event is missing from the chain, with events after it: passed over (audit verify reports it)", "project", project, "seq", cursor+1)
				return false, s.setCursor(ctx, project, cursor+1, &backoff{min: s.o.MinBackoff, max: s.o.MaxBackoff})
			}
			if !fhir.Missing(err) {
				return false, err
			}
		}
	}
	if waited >= w.giveUp {
		// Nothing is lost: the cursor has not moved, and the project's
		// next message delivers whatever is stored after it.
		s.log.Error("a message's events are not in the chain: acknowledged without them", "project", project, "missing", len(want), "waited", waited)
		return true, nil
	}
	return false, nil
}

// backoff doubles a wait from min to max.
type backoff struct{ min, max, cur time.Duration }

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}

func (b *backoff) reset() { b.cur = 0 }

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
