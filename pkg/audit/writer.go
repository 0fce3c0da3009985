package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/fhir"
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

// batch bounds the events of one store write: a message carries up to
// maxGroup, and messages join a batch until it holds this many.
const batch = 512

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
		for n < batch {
			// Whatever else has arrived joins the batch.
			m, err := it.Next(jetstream.NextMaxWait(2 * time.Millisecond))
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

// Write stores events of one project after its last, each once: an event
// already in the chain (a delivery repeated after a crash) is not stored
// again.
func (w *Writer) Write(ctx context.Context, project string, evs []Event) error {
	head, recent, err := w.head(ctx, project)
	if err != nil {
		return err
	}
	evs = slices.DeleteFunc(evs, func(e Event) bool { return recent[e.ID] || w.written.Contains(e.ID) })
	if len(evs) == 0 {
		return nil
	}
	list := make([]map[string]any, len(evs))
	next := head
	for i := range evs {
		list[i] = evs[i].Resource()
		fhir.DropEmpty(list[i])
		next = seal(list[i], project, next.Seq+1, next.Digest, evs[i].ID)
	}
	err = w.repo.CreateMany(ctx, repo.AllProjects, "AuditEvent", list, repo.WriteOptions{Project: project})
	if errors.Is(err, fhir.ErrConflict) {
		// Another writer took a place first (or an earlier try of this
		// batch stored some of it): one at a time, from the chain's end.
		next, err = w.writeEach(ctx, project, evs)
	}
	if err != nil {
		return err
	}
	w.setHead(project, next)
	for _, e := range evs {
		w.written.Add(e.ID, struct{}{})
	}
	w.checkpoints.after(ctx, project, next)
	// The hint lets a writer that starts find the chain's end without
	// walking all of it. It names where this write began, so that a writer
	// starting after a crash walks this write's events, and knows them if
	// they are delivered again.
	return w.repo.SetSecret(ctx, headKey(project), []byte(strconv.FormatInt(head.Seq, 10)))
}

// writeEach stores events one by one, each at the first free place after
// the chain's end, skipping any found already stored.
func (w *Writer) writeEach(ctx context.Context, project string, evs []Event) (Link, error) {
	w.forget(project)
	head, recent, err := w.head(ctx, project)
	if err != nil {
		return Link{}, err
	}
	for _, e := range evs {
		for !recent[e.ID] && !w.written.Contains(e.ID) {
			res := e.Resource()
			fhir.DropEmpty(res)
			l := seal(res, project, head.Seq+1, head.Digest, e.ID)
			_, err := w.repo.Create(ctx, repo.AllProjects, res, repo.WriteOptions{ID: res["id"].(string), Project: project})
			if err == nil {
				head = l
				break
			}
			if !errors.Is(err, fhir.ErrConflict) {
				return Link{}, err
			}
			// Taken: read what holds the place, and go on after it.
			at, err := w.linkAt(ctx, project, head.Seq+1)
			if err != nil {
				return Link{}, err
			}
			head, recent[at.Event] = at, true
		}
	}
	return head, nil
}

// head is project's last event, and the events a walk found stored
// after the hint (a write that may not have been acknowledged).
func (w *Writer) head(ctx context.Context, project string) (Link, map[string]bool, error) {
	w.mu.Lock()
	h, ok := w.heads[project]
	w.mu.Unlock()
	if ok {
		return h, map[string]bool{}, nil
	}
	start, err := retained(ctx, w.repo, project)
	if err != nil {
		return Link{}, nil, err
	}
	raw, err := w.repo.Secret(ctx, headKey(project))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return Link{}, nil, err
	}
	if seq, _ := strconv.ParseInt(string(raw), 10, 64); seq > start.Seq {
		at, err := w.linkAt(ctx, project, seq)
		if err == nil {
			start = at
		} else if !errors.Is(err, fhir.ErrNotFound) {
			return Link{}, nil, err
		}
	}
	return w.walk(ctx, project, start, map[string]bool{})
}

// walk follows the chain from h to its end.
func (w *Writer) walk(ctx context.Context, project string, h Link, recent map[string]bool) (Link, map[string]bool, error) {
	for {
		next, err := w.linkAt(ctx, project, h.Seq+1)
		if errors.Is(err, fhir.ErrNotFound) {
			break
		}
		if err != nil {
			return Link{}, nil, err
		}
		h, recent[next.Event] = next, true
	}
	w.setHead(project, h)
	return h, recent, nil
}

// linkAt reads the link of the event at seq. A place whose event was
// deleted underneath the API stays taken: the chain goes on after it
// (Verify reports it), with no digest to follow.
func (w *Writer) linkAt(ctx context.Context, project string, seq int64) (Link, error) {
	res, err := w.repo.Read(ctx, repo.AllProjects, "AuditEvent", ID(project, seq))
	if errors.Is(err, fhir.ErrGone) {
		return Link{Seq: seq}, nil
	}
	if err != nil {
		return Link{}, err
	}
	l, _, err := linkOf(res.JSON)
	return l, err
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

// headKey is where the writers keep a hint of project's last place.
func headKey(project string) string { return "audit-head:" + project }
