// Package subscriptions runs a project's FHIR Subscriptions: it follows
// the resource events of committed writes, finds the active
// Subscriptions each change meets, and delivers it — to a rest-hook, to
// a Bot (run by the bot executor), or to the WebSockets bound to the
// subscription — with retries, dead letters and an AuditEvent for each
// attempt. It also serves $resend and ends WebSocket subscriptions whose
// last socket went away. What a Subscription asks for is read by
// pkg/subscription, which is pure; this package is the running part, and
// the bot executor (botexec) starts and stops it.
package subscriptions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/subscription"
)

// Config is what the deliverer needs.
type Config struct {
	// BaseURL is the server's, for the fullUrl of a notification's entry.
	BaseURL string
	// JS and EventStream are the JetStream to keep deliveries in and the
	// resource-event stream to follow.
	JS          jetstream.JetStream
	EventStream string
	// RestHookPrivate lets rest-hooks reach private addresses.
	RestHookPrivate bool
	// BotTimeout is the longest a bot may run: a delivery to a bot is
	// given that beyond a rest-hook's own bound.
	BotTimeout time.Duration
	NC         *nats.Conn
	Repo       *repo.Repo
	// Policies reads the access policies a subscription's author and a
	// bot's membership read the change through.
	Policies *access.Policies
	// Bots runs subscriptions' bots and finds memberships: the bot
	// executor.
	Bots Bots
	// Audit queues an AuditEvent to write in a project, off the
	// delivery's path.
	Audit func(project string, ev *resource.AuditEvent)
	Log   *slog.Logger
}

// Bots is what deliveries need of the bot executor.
type Bots interface {
	// MemberAs is the principal of a profile's active membership of a
	// project, with its rights as they stand now; ErrNoMembership when
	// it has none.
	MemberAs(ctx context.Context, project, profile string) (*bus.Principal, error)
	// RunBot runs a subscription's bot with a change as its input. An
	// error wrapped by ServerFault is retried up to
	// subscription.MaxAttempts, any other up to the subscription's own
	// attempts.
	RunBot(ctx context.Context, r *BotRun) error
}

// ErrNoMembership: a profile is not an active member of the project.
var ErrNoMembership = errors.New("no active membership")

// BotRun is one delivery to a subscription's bot.
type BotRun struct {
	Subscription *subscription.Subscription
	// Bot is the bot's id, in the subscription's project; "" when the
	// endpoint names it by identifier (Subscription.BotIdentifier).
	Bot string
	// Resource is the changed resource's reference (Type/id).
	Resource string
	// Author is the change's meta.author: the bot's requester, and whom
	// a runAsUser bot runs as.
	Author string
	// Input is the bot's input for the membership it runs as: nil when
	// that membership may not read the change.
	Input func(ctx context.Context, runAs *bus.Principal) (*BotInput, error)
	// Committed is when the change was committed, zero on a retry (the
	// latency is measured on first attempts).
	Committed time.Time
	// TraceID is the bot's event.traceId: the write's trace.
	TraceID string
}

// BotInput is what a subscription's bot is given: the change as the
// membership it runs as may read it, and the delivery's headers.
type BotInput struct {
	Body    []byte
	Headers map[string]string
}

// ServerFault marks err as the server's failure, not the endpoint's (a
// read before the delivery, a bot that could not be started): it is
// retried up to subscription.MaxAttempts whatever the subscription says.
func ServerFault(err error) error { return errPreamble{err} }

// Deliverer matches changes to subscriptions and makes the deliveries.
type Deliverer struct {
	cfg      Config
	nc       *nats.Conn
	repo     *repo.Repo
	policies *access.Policies
	log      *slog.Logger
	hooks    *http.Client

	// Set by Start.
	stream     jetstream.Stream
	events     chan jetstream.Msg
	matchCC    jetstream.ConsumeContext
	deliverCC  jetstream.ConsumeContext
	unboundSub *nats.Subscription
	deliveries *keyedRunner
	shares     *shares
	quit       chan struct{}
	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

// New wires the deliverer; nothing runs until Start. $resend (Resend)
// is served from New on.
func New(cfg Config) *Deliverer {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Deliverer{cfg: cfg, nc: cfg.NC, repo: cfg.Repo, policies: cfg.Policies, log: cfg.Log,
		hooks: hookClient(cfg.RestHookPrivate)}
}

// Start creates the delivery stream and both consumers, and starts
// matching and delivering.
func (s *Deliverer) Start(ctx context.Context) error {
	js := s.cfg.JS
	var err error
	if s.stream, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       DeliveryStream,
		Subjects:   []string{"pinion.deliveries.>"},
		Storage:    jetstream.FileStorage,
		MaxAge:     deliveryMaxAge,
		Duplicates: 10 * time.Minute,
		// Retries are scheduled messages (nats-server 2.12 and later),
		// which need roll-ups allowed.
		AllowMsgSchedules: true,
		AllowRollup:       true,
	}); err != nil {
		return fmt.Errorf("stream %s: %w", DeliveryStream, err)
	}
	matcher, err := js.CreateOrUpdateConsumer(ctx, s.cfg.EventStream, jetstream.ConsumerConfig{
		Durable:       MatcherConsumer,
		FilterSubject: bus.EventPrefix + ">",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 4 * matchBatch,
	})
	if err != nil {
		return fmt.Errorf("subscription matcher: %w", err)
	}
	deliverer, err := js.CreateOrUpdateConsumer(ctx, DeliveryStream, jetstream.ConsumerConfig{
		Durable:       deliverConsumer,
		FilterSubject: pendingPrefix + ">",
		AckPolicy:     jetstream.AckExplicitPolicy,
		// A delivery in progress says so every deliveryBeat; one whose
		// instance died is taken up again after AckWait.
		AckWait:       3 * deliveryBeat,
		MaxAckPending: 4 * deliverWorkers,
	})
	if err != nil {
		return fmt.Errorf("subscription deliverer: %w", err)
	}
	s.events = make(chan jetstream.Msg, 2*matchBatch)
	s.quit = make(chan struct{})
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if s.matchCC, err = matcher.Consume(func(m jetstream.Msg) {
		select {
		case s.events <- m:
		case <-s.quit: // stopping: it is delivered again
		}
	}); err != nil {
		return err
	}
	s.deliveries = newKeyedRunner(deliverWorkers)
	s.shares = newShares(deliverWorkers, projectDeliveries)
	if s.deliverCC, err = deliverer.Consume(s.onDelivery); err != nil {
		s.matchCC.Stop()
		return err
	}
	if s.unboundSub, err = s.nc.QueueSubscribe(bus.SubjWSUnbound, "botexec", s.onUnbound); err != nil {
		s.matchCC.Stop()
		s.deliverCC.Stop()
		return err
	}
	s.wg.Add(1)
	go s.matchLoop()
	return nil
}

// Stop stops taking events and deliveries; what is in flight and not
// acknowledged is delivered again to another instance (or this one,
// restarted). Stopping a deliverer never started does nothing.
func (s *Deliverer) Stop() {
	if s.matchCC == nil {
		return
	}
	_ = s.unboundSub.Unsubscribe()
	s.matchCC.Stop()
	s.deliverCC.Stop()
	close(s.quit)
	s.cancel() // deliveries in flight end, unacknowledged
	s.wg.Wait()
	s.deliveries.wait()
}
