package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
)

// Writer stores recorded events as chained AuditEvents: it takes them off
// the stream in batches, each project's in the order recorded, seals each
// after its project's last (seal) and writes a project's batch in one
// store write. Any number of writers may run, one per instance of the
// service that runs it: a place in a chain is a resource id, so two
// writers cannot both take one; the second finds it taken and moves on.
type Writer struct {
	repo *repo.Repo
	js   jetstream.JetStream
	log  *slog.Logger

	mu    sync.Mutex
	heads map[string]Link // each project's last event, as this writer last saw it
	// written are the events this writer stored lately: one delivered
	// again (its acknowledgement lost) is not stored twice.
	written *lru.Cache[string, struct{}]
	// checkpoints signs the chains' places now and then (checkpoint.go).
	checkpoints *checkpointer
}

// NewWriter makes a writer; Start runs it.
func NewWriter(r *repo.Repo, js jetstream.JetStream, log *slog.Logger) *Writer {
	written, _ := lru.New[string, struct{}](1 << 16)
	log = log.With("component", "audit-writer")
	return &Writer{repo: r, js: js, log: log, heads: map[string]Link{}, written: written, checkpoints: newCheckpointer(r, log)}
}

// writerConsumer is the durable consumer the writers share.
const writerConsumer = "audit-writer"

// batch bounds the events of one store write (one block of the trail): a
// message carries up to maxGroup, and messages join a batch until it
// holds this many, or gather has passed since its first.
const (
	batch  = 512
	gather = 20 * time.Millisecond
)

// Start runs the writer until the returned stop, which waits for the
// batch in hand.
func (w *Writer) Start(ctx context.Context) (stop func(), err error) {
	if err := EnsureStream(ctx, w.js); err != nil {
		return nil, err
	}
	c, err := w.js.CreateOrUpdateConsumer(ctx, Stream, jetstream.ConsumerConfig{
		Durable:       writerConsumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 1024, // messages, each up to maxGroup events
	})
	if err != nil {
		return nil, fmt.Errorf("audit writer: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(runCtx, c)
	}()
	cpDone := make(chan struct{})
	go func() {
		defer close(cpDone)
		w.checkpoints.run(runCtx)
	}()
	return func() { cancel(); <-done; <-cpDone }, nil
}

func (w *Writer) run(ctx context.Context, c jetstream.Consumer) {
	it, err := c.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		w.log.Error("audit writer not running", "err", err)
		return
	}
	defer it.Stop()
	for {
		// Waits for the first event of a batch until stopped: a stop
		// returns at once, rather than after a fetch's wait.
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			w.log.Warn("next event", "err", err)
			select { // the server is away: try again, not in a loop
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		got := []delivery{w.decode(m)}
		n := len(got[0].events)
		// What arrives within the window joins the batch: a block of
		// hundreds of events costs the store little more than one of a
		// few. Nobody waits for it: a request waits for the stream.
		until := time.Now().Add(gather)
		for n < batch {
			left := time.Until(until)
			if left <= 0 {
				break
			}
			m, err := it.Next(jetstream.NextMaxWait(left))
			if err != nil {
				break
			}
			d := w.decode(m)
			got, n = append(got, d), n+len(d.events)
		}
		// The batch in hand is finished even when the writer is stopping:
		// its events are stored and acknowledged, not sent round again.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		w.handle(hctx, got)
		cancel()
	}
}

// delivery is one message of the stream and the events it carries.
type delivery struct {
	msg    jetstream.Msg
	events []Event
}

func (w *Writer) decode(m jetstream.Msg) delivery {
	evs, err := Decode(m.Data())
	if err != nil {
		w.log.Error("unreadable event dropped", "subject", m.Subject(), "err", err)
		_ = m.Term()
	}
	return delivery{msg: m, events: evs}
}

// handle writes one batch: each project's events in the order they came,
// acknowledging a project's once they are stored; a project whose write
// fails is left to be delivered again.
func (w *Writer) handle(ctx context.Context, got []delivery) {
	byProject := map[string][]delivery{}
	var order []string
	for _, d := range got {
		p := strings.TrimPrefix(d.msg.Subject(), SubjectPrefix)
		if _, ok := byProject[p]; !ok {
			order = append(order, p)
		}
		byProject[p] = append(byProject[p], d)
	}
	for _, p := range order {
		ds := byProject[p]
		var evs []Event
		for _, d := range ds {
			evs = append(evs, d.events...)
		}
		if err := w.Write(ctx, projectOf(p), evs); err != nil {
			w.log.Error("events not stored; they will be delivered again", "project", projectOf(p), "events", len(evs), "err", err)
			for _, d := range ds {
				_ = d.msg.NakWithDelay(time.Second)
			}
			continue
		}
		// Not waited for: a lost acknowledgement only repeats a delivery,
		// whose events Write finds already stored.
		for _, d := range ds {
			_ = d.msg.Ack()
		}
	}
}

// Write stores events of one project after its last, each once, as one
// block of the trail (store.TrailBlock): an event already in the chain (a
// delivery repeated after a crash) is not stored again.
func (w *Writer) Write(ctx context.Context, project string, evs []Event) error {
	for attempt := 1; ; attempt++ {
		head, recent, err := w.head(ctx, project)
		if err != nil {
			return err
		}
		evs = slices.DeleteFunc(evs, func(e Event) bool { return recent[e.ID] || w.written.Contains(e.ID) })
		if len(evs) == 0 {
			return nil
		}
		b, links, err := block(project, head, evs)
		if err != nil {
			return err
		}
		err = w.repo.AppendTrail(ctx, b)
		if (errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrConflict)) && attempt < maxAttempts && ctx.Err() == nil {
			// Another writer took the place (or this one's idea of the end
			// is stale): read the end again, and what it stored.
			w.forget(project)
			continue
		}
		if err != nil {
			return err
		}
		next := links[len(links)-1]
		w.setHead(project, next)
		for _, e := range evs {
			w.written.Add(e.ID, struct{}{})
		}
		w.checkpoints.after(ctx, project, next, links)
		return nil
	}
}

// maxAttempts bounds the tries of one write against other writers. Each
// lost try is another writer's progress, so losing many in a row is only
// many writers at once (three writers of single events lost eight in a
// row, once in some runs); the bound stops a writer caught in a store
// that keeps refusing for another reason.
const maxAttempts = 1000

// block seals events at their places after head, as one block, and
// answers their links.
func block(project string, head Link, evs []Event) (*store.TrailBlock, []Link, error) {
	b := &store.TrailBlock{Project: project, First: head.Seq + 1, Events: make([][]byte, len(evs))}
	keys := map[string]bool{}
	links := make([]Link, len(evs))
	next := head
	for i := range evs {
		r := evs[i].render()
		next = sealRendered(r, project, next.Seq+1, next.Digest, evs[i].ID)
		links[i] = next
		// meta is outside the digest (linkOf): where the event belongs.
		r.Meta = &renderedMeta{VersionID: "1", LastUpdated: r.Recorded, Project: project}
		raw, err := json.Marshal(r)
		if err != nil {
			return nil, nil, err
		}
		b.Events[i] = raw
		t := evs[i].Time.UTC().Truncate(time.Millisecond)
		if i == 0 || t.Before(b.From) {
			b.From = t
		}
		if t.After(b.To) {
			b.To = t
		}
		for _, k := range evs[i].keys() {
			keys[k] = true
		}
	}
	b.Keys = slices.Sorted(maps.Keys(keys))
	return b, links, nil
}

// recentBlocks is how many of a trail's last blocks a writer that starts
// reads the events of: those a crash may have left stored but not
// acknowledged, which the stream delivers again.
const recentBlocks = 8

// head is project's last event, and the events of the trail's last blocks
// when it is read from the store (a write that may not have been
// acknowledged).
func (w *Writer) head(ctx context.Context, project string) (Link, map[string]bool, error) {
	w.mu.Lock()
	h, ok := w.heads[project]
	w.mu.Unlock()
	if ok {
		return h, nil, nil
	}
	blocks, err := w.repo.TrailBlocks(ctx, &store.TrailQuery{Project: project, Limit: recentBlocks})
	if err != nil {
		return Link{}, nil, err
	}
	if len(blocks) == 0 {
		// Nothing stored: the chain starts after retention's end, if any.
		h, err := retained(ctx, w.repo, project)
		return h, nil, err
	}
	recent := map[string]bool{}
	for _, b := range blocks {
		for _, raw := range b.Events {
			if l, _, err := linkOf(raw); err == nil {
				recent[l.Event] = true
			}
		}
	}
	last := blocks[0]
	h, _, err = linkOf(last.Events[len(last.Events)-1])
	if err != nil || h.Seq != last.Last() {
		// The end was edited underneath: the chain goes on after its
		// place, with no digest to follow (Verify reports it).
		h = Link{Seq: last.Last()}
	}
	w.setHead(project, h)
	return h, recent, nil
}

func (w *Writer) setHead(project string, l Link) {
	w.mu.Lock()
	w.heads[project] = l
	w.mu.Unlock()
}

func (w *Writer) forget(project string) {
	w.mu.Lock()
	delete(w.heads, project)
	w.mu.Unlock()
}
