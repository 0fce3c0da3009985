package subscriptions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/inprogress"
	"github.com/pinion-health/pinion/pkg/metrics"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/subscription"
)

// Delivery bounds.
const (
	// deliverWorkers is how many deliveries one instance makes at once.
	deliverWorkers = 64
	// projectDeliveries is how many of them one project may hold (running
	// or waiting behind one of the same resource) once fewer than that
	// many are free: a project whose endpoints hang, up to hookTimeout an
	// attempt, or whose bots run long leaves workers to the others, and a
	// project alone may use most of them.
	projectDeliveries = deliverWorkers / 4
	// maxDeferral caps the doubling wait of a delivery put off because
	// its project had its share.
	maxDeferral = time.Minute
	// deliveryBeat is how often a delivery in progress tells JetStream so.
	deliveryBeat = 5 * time.Second
	// retryBase is the first retry's delay; each next one doubles it
	// (Medplum's exponential backoff from one second).
	retryBase = time.Second
	// maxRetryDelay caps the doubling (2^17 s is Medplum's last delay).
	maxRetryDelay = 36 * time.Hour
)

// errPreamble marks a failure before the delivery itself (reading the
// subscription or the resource): the server's, not the endpoint's.
type errPreamble struct{ error }

// onDelivery hands a delivery to a worker, after any earlier delivery of
// the same subscription and resource: deliveries of one resource reach an
// endpoint in the order of its versions. A project that holds its share
// of the workers has the delivery put off instead.
func (s *Deliverer) onDelivery(m jetstream.Msg) {
	d := delivery{retries: subscription.DefaultRetries}
	if err := json.Unmarshal(m.Data(), &d); err != nil {
		_ = m.Term()
		return
	}
	md, err := m.Metadata()
	if err != nil {
		_ = m.NakWithDelay(time.Second)
		return
	}
	attempts := d.Attempt + int(md.NumDelivered) - 1 // made before this one; Medplum counts from 0
	if !s.shares.take(d.Project) {
		s.putOff(m, md.Sequence.Stream, &d, attempts)
		return
	}
	// From here JetStream is told the delivery is in progress, also while
	// it waits behind another of its resource.
	stop := inprogress.Keep(m, deliveryBeat)
	s.deliveries.run(d.key(), func() {
		defer s.shares.release(d.Project)
		defer stop()
		s.deliver(m, md.Sequence.Stream, &d, attempts)
	})
}

// deliver makes one attempt of a delivery and settles its message: ack
// when done (or when there is nothing left to do), a retry scheduled for
// later, a dead letter after the last attempt.
func (s *Deliverer) deliver(m jetstream.Msg, seq uint64, d *delivery, attempt int) {
	ctx, cancel := context.WithTimeout(s.ctx, hookTimeout+s.cfg.BotTimeout)
	err := s.attempt(ctx, d, attempt)
	cancel()
	if s.ctx.Err() != nil {
		_ = m.Nak() // stopped: another instance makes it (JetStream counts it as an attempt)
		return
	}
	var pre errPreamble
	var retries int
	channel := "rest-hook"
	if d.bot {
		channel = "bot"
	}
	switch {
	case err == nil:
		metrics.SubscriptionDeliveries.WithLabelValues(channel, "ok").Inc()
		s.settle(m, seq)
		return
	case errors.As(err, &pre):
		retries = subscription.MaxAttempts - 1
	default:
		retries = d.retries
	}
	if attempt < retries {
		s.log.Debug("subscription delivery failed, retried", "subscription", d.Subscription, "resource", d.Event.Type+"/"+d.Event.ID, "attempt", attempt, "err", errorForLog(err))
		metrics.SubscriptionDeliveries.WithLabelValues(channel, "retry").Inc()
		s.retryLater(m, seq, d, attempt)
		return
	}
	metrics.SubscriptionDeliveries.WithLabelValues(channel, "dead").Inc()
	s.deadLetter(d, attempt, err)
	s.settle(m, seq)
}

// settle acknowledges a delivery's message for good and removes it from
// the stream: once made, scheduled again or kept as a dead letter it is
// not needed, and the stream would otherwise keep every delivery for a
// week (deliveryMaxAge), a disk that grows with the write rate. The ack
// is confirmed first, so a crash right after cannot make the delivery
// again; a message not removed expires with the week.
func (s *Deliverer) settle(m jetstream.Msg, seq uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.DoubleAck(ctx); err != nil {
		return
	}
	if err := s.stream.DeleteMsg(ctx, seq); err != nil {
		s.log.Debug("settled delivery not removed from the stream", "seq", seq, "err", err)
	}
}

// retryLater schedules the next attempt. A delayed redelivery would keep
// its place among the deliveries in progress (MaxAckPending) for the
// whole wait, up to 36 hours: one project's failing endpoint could fill
// them and stop every other project's deliveries.
func (s *Deliverer) retryLater(m jetstream.Msg, seq uint64, d *delivery, attempt int) {
	next := *d
	next.Attempt = attempt + 1
	s.reschedule(m, seq, &next, "r", retryDelay(attempt))
}

// putOff schedules a delivery whose project holds its share of the
// workers for a little later, each time twice as late up to maxDeferral.
// It is not an attempt.
func (s *Deliverer) putOff(m jetstream.Msg, seq uint64, d *delivery, attempts int) {
	next := *d
	next.Attempt = attempts
	next.Deferred++
	s.reschedule(m, seq, &next, "d", min(time.Second<<min(d.Deferred, 10), maxDeferral))
}

// reschedule publishes next as a new message that the stream moves to
// pending after delay, and settles m. The schedule's id is m's sequence
// and kind, so a redelivery of m schedules nothing twice. If the schedule
// cannot be stored, m is redelivered after the delay instead.
func (s *Deliverer) reschedule(m jetstream.Msg, seq uint64, next *delivery, kind string, delay time.Duration) {
	id := kind + strconv.FormatUint(seq, 10)
	msg := nats.NewMsg(retryPrefix + next.Project + "." + next.Subscription + "." + id)
	msg.Data, _ = json.Marshal(next)
	msg.Header.Set("Nats-Schedule", "@at "+time.Now().Add(delay).UTC().Format(time.RFC3339Nano))
	msg.Header.Set("Nats-Schedule-Target", pendingPrefix+next.Project+"."+next.Subscription)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.cfg.JS.PublishMsg(ctx, msg, jetstream.WithMsgID("schedule/"+id)); err != nil {
		s.log.Warn("subscription delivery not scheduled; redelivered instead", "subscription", next.Subscription, "err", err)
		_ = m.NakWithDelay(delay)
		return
	}
	s.settle(m, seq)
}

// shares counts one instance's deliveries by project. A project may take
// a worker while more than a share of them would stay free for the
// others; past that, only up to its share.
type shares struct {
	mu          sync.Mutex
	held        map[string]int
	total       int
	pool, share int
}

func newShares(pool, share int) *shares {
	return &shares{held: map[string]int{}, pool: pool, share: share}
}

// take counts a delivery of project in, or answers false.
func (p *shares) take(project string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[project] >= p.share && p.total >= p.pool-p.share {
		return false
	}
	p.held[project]++
	p.total++
	return true
}

func (p *shares) release(project string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total--
	if p.held[project]--; p.held[project] <= 0 {
		delete(p.held, project)
	}
}

// retryDelay is the wait before retry n+1.
func retryDelay(attempt int) time.Duration {
	d := retryBase << min(attempt, 30)
	return min(d, maxRetryDelay)
}

// attempt makes one delivery attempt. It answers nil when the delivery is
// done or has become pointless (the subscription was deleted or turned
// off; a retry's version is no longer current), as Medplum does.
func (s *Deliverer) attempt(ctx context.Context, d *delivery, attempt int) error {
	sc := repo.Scope{Project: d.Project}
	res, err := s.repo.Read(ctx, sc, "Subscription", d.Subscription)
	if fhir.Missing(err) {
		return nil
	}
	if err != nil {
		return errPreamble{err}
	}
	sub, err := subscriptionOf(res)
	if err != nil || !sub.Deliverable() {
		return nil // deleted, turned off or changed since the match
	}
	d.retries = sub.Retries
	ev := d.Event
	if ev.Op != subscription.Delete {
		cur, err := s.repo.Read(ctx, sc, ev.Type, ev.ID)
		if fhir.Missing(err) {
			return nil // deleted since: its delete is delivered on its own
		}
		if err != nil {
			return errPreamble{err}
		}
		if (attempt > 0 || d.Deferred > 0) && cur.VersionID != ev.VersionID {
			return nil // a retry or a delivery put off never sends a version older than one that may have been sent
		}
	}
	changed, _, err := s.changedVersion(ctx, ev, d.Resent)
	if fhir.Missing(err) {
		return nil
	}
	if err != nil {
		return errPreamble{err}
	}
	// The author's rights are read again: they may have changed since the
	// match, and what is sent is what the author may read now.
	view, err := s.authorView(ctx, sub)
	if err != nil {
		return errPreamble{err}
	}
	seen, err := view(changed)
	if err != nil {
		return errPreamble{err}
	}
	if seen == nil {
		s.log.Debug("subscriptions: the author may no longer read the change; not delivered",
			"subscription", sub.ID, "author", sub.Author, "resource", ev.Type+"/"+ev.ID)
		return nil
	}
	if id, ok := sub.Bot(); ok {
		d.bot = true
		// A bot is given the change as the membership it runs as may read
		// it (deliverToBot), not as the author sees it.
		return s.deliverToBot(ctx, d, sub, id, changed, attempt)
	}
	if _, ok := sub.BotIdentifier(); ok {
		d.bot = true
		return s.deliverToBot(ctx, d, sub, "", changed, attempt)
	}
	return s.deliverToHook(ctx, d, sub, seen, attempt)
}

// hookBody is what a rest-hook or bot is sent: the resource, or for a
// delete "{}" (a bot: {"deletedResource": …}), as Medplum sends them.
func hookBody(op string, res *repo.Resource, forBot bool) []byte {
	switch {
	case op != subscription.Delete:
		return res.JSON
	case forBot:
		b, _ := json.Marshal(map[string]json.RawMessage{"deletedResource": res.JSON})
		return b
	}
	return []byte("{}")
}

// hookHeaders are Medplum's rest-hook headers: the subscription and
// interaction, the deleted resource, the channel's own headers, the
// body's signature when the subscription has a secret, and the trace of
// the request that made the change (x-trace-id and traceparent).
func hookHeaders(d *delivery, sub *subscription.Subscription, body []byte) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/fhir+json")
	h.Set("X-Medplum-Subscription", sub.ID)
	h.Set("X-Medplum-Interaction", d.Event.Op)
	if d.Event.Op == subscription.Delete {
		h.Set("X-Medplum-Deleted-Resource", d.Event.Type+"/"+d.Event.ID)
	}
	for _, kv := range sub.Headers {
		h.Set(kv[0], kv[1])
	}
	if sub.Secret != "" {
		h.Set("X-Signature", subscription.Signature(sub.Secret, body))
	}
	if tp := d.Event.Trace; bus.TraceID(tp) != "" {
		h.Set("X-Trace-Id", tp)
		h.Set(bus.TraceParent, tp)
	}
	return h
}

// deliverToHook posts the change and records the attempt.
func (s *Deliverer) deliverToHook(ctx context.Context, d *delivery, sub *subscription.Subscription, res *repo.Resource, attempt int) error {
	body := hookBody(d.Event.Op, res, false)
	start := time.Now()
	if attempt == 0 { // a retry's wait is the backoff's, not delivery's
		metrics.SubscriptionLatency.Observe(start.Sub(d.Committed).Seconds())
	}
	status, err := post(ctx, s.hooks, sub.Endpoint, hookHeaders(d, sub, body), body)
	outcome, desc := "0", fmt.Sprintf("Attempt %d received status %d", attempt, status)
	switch {
	case err != nil:
		outcome, desc = "4", fmt.Sprintf("Attempt %d received error %s", attempt, hookError(err))
		err = fmt.Errorf("rest-hook: %w", err)
	case !sub.Successful(status):
		outcome = "4"
		err = fmt.Errorf("rest-hook: received status %d", status)
	}
	s.auditDelivery(d, sub, res, outcome, desc, start)
	return err
}

// hookError is a failed request's reason without the URL, which may hold
// credentials.
func hookError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// deliverToBot has the bot executor run the subscription's bot with the
// change as input: as the change's author when the bot says runAsUser,
// else as the bot's own membership (Medplum's rules). A bot that runs and
// fails is recorded in its own AuditEvent and not run again, as in
// Medplum; a bot that cannot be run (no membership, no code) is retried.
func (s *Deliverer) deliverToBot(ctx context.Context, d *delivery, sub *subscription.Subscription, botID string, res *repo.Resource, attempt int) error {
	var committed time.Time // the latency is measured on first attempts
	if attempt == 0 {
		committed = d.Committed
	}
	// The bot's event.traceId is the write's trace, as Medplum gives it and
	// as a rest-hook carries it, so one id follows the change into the bot.
	traceID := d.Event.Trace
	if bus.TraceID(traceID) == "" {
		traceID = uuid.NewString()
	}
	return s.cfg.Bots.RunBot(ctx, &BotRun{
		Subscription: sub, Bot: botID, Resource: d.Event.Type + "/" + d.Event.ID, Author: metaAuthor(res.JSON), Committed: committed, TraceID: traceID,
		Input: func(ctx context.Context, runAs *bus.Principal) (*BotInput, error) {
			return s.botInput(ctx, d, sub, runAs, res)
		},
	})
}

// botInput is a bot's input for the change, as runAs may read it: the bot
// reads with runAs's rights, so without the fields runAs's policy hides,
// and nil when runAs may not read the change (the bot could not have read
// it itself).
func (s *Deliverer) botInput(ctx context.Context, d *delivery, sub *subscription.Subscription, runAs *bus.Principal, res *repo.Resource) (*BotInput, error) {
	pol, err := s.policies.For(ctx, runAs)
	if err != nil {
		if fe := fhir.AsError(err); fe.Status < 500 {
			return nil, nil // a policy that cannot be used grants nothing
		}
		return nil, err
	}
	seen, err := readableAs(pol, res)
	if err != nil || seen == nil {
		return nil, err
	}
	body := hookBody(d.Event.Op, seen, true)
	headers := map[string]string{}
	for k, v := range hookHeaders(d, sub, body) {
		headers[k] = v[0]
	}
	return &BotInput{Body: body, Headers: headers}, nil
}

// metaAuthor is a stored resource's meta.author reference.
func metaAuthor(j []byte) string {
	var v struct {
		Meta struct {
			Author struct {
				Reference string `json:"reference"`
			} `json:"author"`
		} `json:"meta"`
	}
	_ = json.Unmarshal(j, &v)
	return v.Meta.Author.Reference
}

// auditDelivery records a rest-hook attempt as Medplum's
// createSubscriptionAuditEvent does, with its duration.
func (s *Deliverer) auditDelivery(d *delivery, sub *subscription.Subscription, res *repo.Resource, outcome, desc string, start time.Time) {
	s.cfg.Audit(sub.Project, attemptAudit(d, outcome, desc, start))
}

// attemptAudit is the AuditEvent of one attempt that started at start: from
// the change's commit to now, and how long the attempt itself took.
func attemptAudit(d *delivery, outcome, desc string, start time.Time) *resource.AuditEvent {
	ev := transmitAudit(d, outcome, desc)
	ev.Period = &resource.Period{Start: d.Committed.UTC().Format(time.RFC3339Nano), End: ev.Recorded}
	ev.Extension = []resource.Extension{{URL: "https://medplum.com/fhir/StructureDefinition/durationMs", ValueInteger: time.Since(start).Milliseconds()}}
	return ev
}

// transmitAudit is the AuditEvent of a delivery's attempt or end: the
// subscription observed it, about the changed resource.
func transmitAudit(d *delivery, outcome, desc string) *resource.AuditEvent {
	return &resource.AuditEvent{
		ResourceType: "AuditEvent",
		Type:         resource.Coding{Code: "transmit"},
		Recorded:     time.Now().UTC().Format(time.RFC3339Nano),
		Agent:        []resource.AuditAgent{{Type: &resource.CodeableConcept{Text: "Subscription"}, Requestor: false}},
		Source:       &resource.AuditSource{Observer: resource.Reference{Reference: "Subscription/" + d.Subscription}},
		Entity: []resource.AuditEntity{
			{What: resource.Reference{Reference: d.Event.Type + "/" + d.Event.ID}, Role: entityRole(d.Event.Type)},
			SubscriberEntity("Subscription/" + d.Subscription),
		},
		Outcome:     outcome,
		OutcomeDesc: desc,
	}
}

// SubscriberEntity names the subscription in an AuditEvent.
func SubscriberEntity(ref string) resource.AuditEntity {
	return resource.AuditEntity{What: resource.Reference{Reference: ref}, Role: entityRole("Subscription")}
}

// entityRole is Medplum's getAuditEventEntityRole.
func entityRole(typ string) resource.Coding {
	switch typ {
	case "Patient":
		return resource.Coding{Code: "1", Display: "Patient"}
	case "Subscription":
		return resource.Coding{Code: "9", Display: "Subscriber"}
	}
	return resource.Coding{Code: "4", Display: "Domain"}
}

// deadLetter keeps a delivery that failed its last attempt on the stream
// (pinion.deliveries.dead.<project>.<subscription>, for an operator to
// replay) and records it as an AuditEvent (outcome 8) in the project.
func (s *Deliverer) deadLetter(d *delivery, attempt int, cause error) {
	s.log.Warn("subscription delivery failed its last attempt: dead letter",
		"subscription", d.Subscription, "resource", d.Event.Type+"/"+d.Event.ID, "attempts", attempt+1, "err", errorForLog(cause))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, _ := json.Marshal(struct {
		*delivery
		Attempts int    `json:"attempts"`
		Error    string `json:"error"`
	}{d, attempt + 1, errorForLog(cause)})
	if _, err := s.cfg.JS.Publish(ctx, deadPrefix+d.Project+"."+d.Subscription, b,
		jetstream.WithMsgID("dead/"+d.Subscription+"/"+d.Event.Type+"/"+d.Event.ID+"/"+d.Event.VersionID)); err != nil {
		s.log.Error("subscription dead letter not kept", "subscription", d.Subscription, "err", err)
	}
	desc := fmt.Sprintf("Dead letter after %d attempts: %s", attempt+1, hookError(cause))
	s.cfg.Audit(d.Project, transmitAudit(d, "8", desc))
}

// keyedRunner runs functions on at most n goroutines, those of one key one
// after another in the order given.
type keyedRunner struct {
	slots chan struct{}
	mu    sync.Mutex
	queue map[string][]func()
	wg    sync.WaitGroup
}

func newKeyedRunner(n int) *keyedRunner {
	return &keyedRunner{slots: make(chan struct{}, n), queue: map[string][]func(){}}
}

// run queues f behind the key's earlier functions. It blocks while n keys
// are running, which holds back the consumer feeding it.
func (k *keyedRunner) run(key string, f func()) {
	k.mu.Lock()
	if q, busy := k.queue[key]; busy {
		k.queue[key] = append(q, f)
		k.mu.Unlock()
		return
	}
	k.queue[key] = nil
	k.mu.Unlock()
	k.slots <- struct{}{}
	k.wg.Add(1)
	go func() {
		defer func() { <-k.slots; k.wg.Done() }()
		for {
			f()
			k.mu.Lock()
			q := k.queue[key]
			if len(q) == 0 {
				delete(k.queue, key)
				k.mu.Unlock()
				return
			}
			f, k.queue[key] = q[0], q[1:]
			k.mu.Unlock()
		}
	}()
}

// wait waits for every running function.
func (k *keyedRunner) wait() { k.wg.Wait() }
