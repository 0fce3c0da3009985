package audit

import (
	"context"
	"encoding/json"
	"fmt"
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

// Recorder records events. A nil *Recorder records nothing (tests of a
// part that has no trail).
type Recorder struct {
	js jetstream.JetStream
}

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
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if _, err := r.js.Publish(ctx, subjectOf(e.Project), b, jetstream.WithMsgID(e.ID)); err != nil {
		return fmt.Errorf("audit: record %s: %w", e.Kind, err)
	}
	return nil
}
