// Package saga runs durable, idempotent steps over JetStream: a step is a
// message on a work-queue stream, handled by one durable consumer shared by
// every instance of the owning service, acknowledged only after its write,
// retried with backoff, and handed to a dead-letter callback when retries
// run out or the failure is permanent.
package saga

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/metrics"
)

// Stream holds every pending saga step until a consumer acknowledges it.
const Stream = "PINION_SAGA"

// SubjectPrefix is the prefix of every step subject.
const SubjectPrefix = "pinion.saga."

// Backoff is the wait before each redelivery of a failed step.
var Backoff = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 5 * time.Second, 10 * time.Second}

// MaxDeliver bounds the attempts of one step.
var MaxDeliver = len(Backoff) + 1

// AckWait is how long a delivered step may go unanswered (a crashed
// handler) before it is delivered again.
var AckWait = 10 * time.Second

// EnsureStream creates the step stream. Work-queue retention removes a step
// once acknowledged; the duplicate window is longer than every retry, so a
// republished step (same Nats-Msg-Id) is stored once.
func EnsureStream(ctx context.Context, js jetstream.JetStream) error {
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       Stream,
		Subjects:   []string{SubjectPrefix + ">"},
		Retention:  jetstream.WorkQueuePolicy,
		Storage:    jetstream.FileStorage,
		Duplicates: 30 * time.Minute,
		MaxAge:     7 * 24 * time.Hour,
	})
	if err != nil {
		return fmt.Errorf("stream %s: %w", Stream, err)
	}
	return nil
}

// Publish stores a step; msgID makes the publish idempotent.
func Publish(ctx context.Context, js jetstream.JetStream, subject string, data []byte, msgID string) error {
	_, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(msgID))
	if err != nil {
		return fmt.Errorf("publish %s: %w", subject, err)
	}
	return nil
}

type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent marks an error that retrying cannot fix: the step goes to the
// dead-letter callback at once.
func Permanent(err error) error { return permanent{err} }

// Handler performs one step. It must be idempotent: a step can be delivered
// again after a crash between its write and its acknowledgement.
type Handler func(ctx context.Context, data []byte) error

// DeadLetter is told about a step that will not be retried any more.
type DeadLetter func(ctx context.Context, data []byte, err error)

// Consume runs h for every step on subject through the durable consumer
// name, until the returned stop is called.
func Consume(ctx context.Context, js jetstream.JetStream, name, subject string, h Handler, dead DeadLetter, log *slog.Logger) (stop func(), err error) {
	c, err := js.CreateOrUpdateConsumer(ctx, Stream, jetstream.ConsumerConfig{
		Durable:       name,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       AckWait,
		MaxDeliver:    MaxDeliver,
		MaxAckPending: 1024,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", name, err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		// Steps run concurrently: one slow step must not hold up the rest.
		go handle(m, h, dead, log.With("step", name))
	}, jetstream.PullMaxMessages(64))
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", name, err)
	}
	return cc.Stop, nil
}

func handle(m jetstream.Msg, h Handler, dead DeadLetter, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), AckWait)
	defer cancel()
	attempt := uint64(1)
	if md, err := m.Metadata(); err == nil {
		attempt = md.NumDelivered
	}
	err := h(ctx, m.Data())
	step := m.Subject()
	if err == nil {
		metrics.SagaSteps.WithLabelValues(step, "done").Inc()
		if err := m.DoubleAck(ctx); err != nil && !errors.Is(err, nats.ErrTimeout) {
			log.Warn("ack failed; the step will run again", "err", err)
		}
		return
	}
	var p permanent
	if errors.As(err, &p) || attempt >= uint64(MaxDeliver) {
		metrics.SagaSteps.WithLabelValues(step, "failed").Inc()
		if errors.As(err, &p) {
			log.Info("step refused", "err", err) // a business outcome such as a 409
		} else {
			log.Warn("step failed after every retry", "attempt", attempt, "err", err)
		}
		dctx, dcancel := context.WithTimeout(context.Background(), AckWait)
		defer dcancel()
		dead(dctx, m.Data(), err)
		_ = m.Term()
		return
	}
	metrics.SagaSteps.WithLabelValues(step, "retry").Inc()
	delay := Backoff[min(int(attempt)-1, len(Backoff)-1)]
	log.Info("step failed; retrying", "attempt", attempt, "in", delay, "err", err)
	_ = m.NakWithDelay(delay)
}
