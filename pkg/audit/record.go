package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream holds recorded events until the writer and every sink have them.
const Stream = "PINION_AUDIT"

// SubjectPrefix starts every event's subject; the project (or serverSubject
// for events of no project) ends it.
const SubjectPrefix = "pinion.audit."

// serverSubject stands for "no project" in a subject.
const serverSubject = "_"

// streamAge bounds how long an event waits in the stream for a consumer
// that is away (a sink down for days).
const streamAge = 7 * 24 * time.Hour

// EnsureStream creates the stream of recorded events.
func EnsureStream(ctx context.Context, js jetstream.JetStream) error {
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       Stream,
		Subjects:   []string{SubjectPrefix + ">"},
		Storage:    jetstream.FileStorage,
		Retention:  jetstream.LimitsPolicy,
		MaxAge:     streamAge,
		Duplicates: 2 * time.Minute,
	})
	if err != nil {
		return fmt.Errorf("stream %s: %w", Stream, err)
	}
	return nil
}

func subjectOf(project string) string {
	if project == "" {
		return SubjectPrefix + serverSubject
	}
	return SubjectPrefix + project
}

func projectOf(subjectEnd string) string {
	if subjectEnd == serverSubject {
		return ""
	}
	return subjectEnd
}

// Recorder records events. Events recorded while a publish is under way
// wait and go together in the next one, a message per project: under
// load, one stream write (and one delivery to the writers) carries many
// events, and each request still waits for its own event to be stored.
// A nil *Recorder records nothing (tests of a part that has no trail).
type Recorder struct {
	js jetstream.JetStream

	mu      sync.Mutex
	queue   []*pending
	running bool // a goroutine is publishing the queue
}

// pending is one recorded event waiting for its publish.
type pending struct {
	id, project string
	data        []byte
	done        chan error
	// abandoned is set when the caller stopped waiting (its request
	// ended, refused for it): the event is not published after all.
	abandoned atomic.Bool
}

// maxQueued bounds the events waiting for a publish: with the stream away,
// requests are refused at once rather than held in memory without end.
const maxQueued = 16384

// Bounds of one publish: NATS's default message limit is 1 MiB.
const (
	maxGroup      = 256
	maxGroupBytes = 512 << 10
	// maxText bounds an event's free texts: a long name or detail is
	// cut, so that no request makes an event the stream cannot take.
	maxText = 1024
)

// NewRecorder records to js's stream; EnsureStream must have made it.
// Without js (a part wired for a test of its own), it records nothing.
func NewRecorder(js jetstream.JetStream) *Recorder {
	if js == nil {
		return nil
	}
	return &Recorder{js: js}
}

// Record stores e in the stream and returns once the stream has it: an
// event is durable before the request it describes is answered.
func (r *Recorder) Record(ctx context.Context, e Event) error {
	if r == nil {
		return nil
	}
	if e.ID == "" {
		e.ID = uuid.NewString()
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if e.Outcome == "" {
		e.Outcome = Success
	}
	e.Name, e.Detail = cut(e.Name), cut(e.Detail)
	e.Entities = slices.Clone(e.Entities)
	for i := range e.Entities {
		e.Entities[i].Detail, e.Entities[i].Query = cut(e.Entities[i].Detail), cut(e.Entities[i].Query)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	p := &pending{id: e.ID, project: e.Project, data: b, done: make(chan error, 1)}
	r.mu.Lock()
	if len(r.queue) >= maxQueued {
		r.mu.Unlock()
		return fmt.Errorf("audit: record %s: %d events already wait for the stream", e.Kind, maxQueued)
	}
	r.queue = append(r.queue, p)
	start := !r.running
	r.running = true
	r.mu.Unlock()
	if start {
		go r.publishQueue()
	}
	select {
	case err := <-p.done:
		if err != nil {
			return fmt.Errorf("audit: record %s: %w", e.Kind, err)
		}
		return nil
	case <-ctx.Done():
		p.abandoned.Store(true)
		return fmt.Errorf("audit: record %s: %w", e.Kind, ctx.Err())
	}
}

func cut(s string) string {
	if len(s) <= maxText {
		return s
	}
	return strings.ToValidUTF8(s[:maxText], "")
}

// publishQueue publishes what is queued, a group at a time, until
// nothing is; the next Record starts it again.
func (r *Recorder) publishQueue() {
	for {
		r.mu.Lock()
		n, size := 0, 0
		for n < len(r.queue) && n < maxGroup && (n == 0 || size+len(r.queue[n].data) <= maxGroupBytes) {
			size += len(r.queue[n].data)
			n++
		}
		if n == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		group := slices.DeleteFunc(slices.Clone(r.queue[:n]), func(p *pending) bool { return p.abandoned.Load() })
		r.queue = slices.Delete(r.queue, 0, n)
		r.mu.Unlock()
		if len(group) > 0 {
			r.publish(group)
		}
	}
}

// publish sends a group as one message per project, all at once, and
// tells each event's caller how its message fared.
func (r *Recorder) publish(group []*pending) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	byProject := map[string][]*pending{}
	var order []string
	for _, p := range group {
		if _, ok := byProject[p.project]; !ok {
			order = append(order, p.project)
		}
		byProject[p.project] = append(byProject[p.project], p)
	}
	acks := make([]jetstream.PubAckFuture, len(order))
	errs := make([]error, len(order))
	for i, project := range order {
		ps := byProject[project]
		var buf bytes.Buffer
		buf.WriteByte('[')
		for j, p := range ps {
			if j > 0 {
				buf.WriteByte(',')
			}
			buf.Write(p.data)
		}
		buf.WriteByte(']')
		// The first event's id names the message: a publish repeated by
		// the client is stored once.
		acks[i], errs[i] = r.js.PublishAsync(subjectOf(project), buf.Bytes(), jetstream.WithMsgID(ps[0].id))
	}
	for i, project := range order {
		err := errs[i]
		if err == nil {
			select {
			case <-acks[i].Ok():
			case err = <-acks[i].Err():
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		for _, p := range byProject[project] {
			p.done <- err
		}
	}
}

// Decode reads one message of the stream: the events of one project, in
// the order recorded (a group, or a single event as recorded by a build
// before groups).
func Decode(data []byte) ([]Event, error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '[' {
		var evs []Event
		err := json.Unmarshal(data, &evs)
		return evs, err
	}
	var e Event
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, err
	}
	return []Event{e}, nil
}
