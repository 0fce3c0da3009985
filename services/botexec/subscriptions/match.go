package subscriptions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/subscription"
)

// Subscriptions run in two stages, each a durable JetStream consumer
// shared by every botexec instance, so nothing is lost to a crash and
// work is shared:
//
//  1. The matcher follows the resource events of committed writes (the
//     outbox stream) and, for each change, finds the active Subscriptions
//     of its project whose criteria and interaction it meets and whose
//     author may read it. Each match is published as a delivery on
//     DeliveryStream (Nats-Msg-Id subscription/type/id/version, so a
//     matcher that crashes and sees the event again adds no second
//     delivery), and only then is the event acknowledged.
//  2. The deliverer takes deliveries and makes them: it runs the bot or
//     posts the rest-hook, records each attempt as an AuditEvent, retries a
//     failure with exponential backoff up to the subscription's attempts,
//     and then leaves it as a dead letter.
//
// The writer is never involved: a write costs the same with ten matching
// subscriptions as with none.

// Streams and consumers.
const (
	// DeliveryStream holds deliveries still to make (pinion.deliveries.
	// pending.<project>.<subscription>), those scheduled for later
	// (pinion.deliveries.retry.…: retries and deliveries put off, which
	// the stream moves to pending when due) and the dead letters of those
	// that failed every attempt (pinion.deliveries.dead.…), a week each
	// at most: a delivery settled is removed at once.
	DeliveryStream = "PINION_DELIVERIES"
	pendingPrefix  = "pinion.deliveries.pending."
	retryPrefix    = "pinion.deliveries.retry."
	deadPrefix     = "pinion.deliveries.dead."
	// MatcherConsumer is the durable consumer of resource events that
	// finds the subscriptions each change matches.
	MatcherConsumer  = "subscription-matcher"
	deliverConsumer  = "subscription-delivery"
	deliveryMaxAge   = 7 * 24 * time.Hour
	matchBatch       = 256
	maxSubscriptions = 1000 // per project, as Medplum's worker reads them
)

// delivery is one change to deliver through one subscription.
type delivery struct {
	Subscription string     `json:"subscription"`
	Project      string     `json:"project"`
	Event        repo.Event `json:"event"`
	// Committed is when the change's event was stored: the start of the
	// commit-to-delivery latency, and the AuditEvents' requestTime.
	Committed time.Time `json:"committed"`
	// Attempt is how many attempts were made before this message: a
	// scheduled retry is a new message, whose own count starts again.
	Attempt int `json:"attempt,omitempty"`
	// Deferred is how many times the delivery was put off because its
	// project held its share of the workers.
	Deferred int `json:"deferred,omitempty"`
	// Resent marks a delivery asked for by $resend: the resource as it
	// stands is sent, also as a delete's deleted resource.
	Resent bool `json:"resent,omitempty"`

	// What an attempt learnt: the subscription's retries, and whether its
	// endpoint is a bot.
	retries int
	bot     bool
}

func (d *delivery) key() string { return d.Subscription + "/" + d.Event.Type + "/" + d.Event.ID }

// matchLoop takes events in batches: one event, then those received
// within matchLinger. The subscriptions of a project are read once per
// batch, after every event in it was stored, so no subscription committed
// before a change is missed.
func (s *Deliverer) matchLoop() {
	defer s.wg.Done()
	linger := time.NewTimer(matchLinger)
	for {
		var batch []jetstream.Msg
		select {
		case m := <-s.events:
			batch = append(batch, m)
		case <-s.quit:
			return
		}
		linger.Reset(matchLinger)
	more:
		for len(batch) < matchBatch {
			select {
			case m := <-s.events:
				batch = append(batch, m)
			case <-linger.C:
				break more
			case <-s.quit:
				return // the batch is delivered again
			}
		}
		linger.Stop()
		s.match(batch)
	}
}

// matchLinger is how long a batch waits for more events. Reading a
// project's subscriptions is a search (some 30 µs), once per batch: at
// 16 clients creating, batches of one event each spent 5% of the
// server's CPU on it. A delivery starts that much later.
const matchLinger = 5 * time.Millisecond

// What one event or one project may take of the matcher, which every
// project shares. FHIRPath criteria cost what their author writes: an
// evaluation has fhirpath's own budget (its cost and MaxEvalTime), all of
// an event's evaluations share eventFHIRPathTime, and all of a project's
// in one batch share projectFHIRPathTime. An evaluation past any of them
// counts as no match for its subscription, and is recorded. An event that
// cannot be matched (its reads or publishes fail) is tried maxMatchTries
// times, each within matchTimeout, then set aside and recorded.
const (
	eventFHIRPathTime   = 500 * time.Millisecond
	projectFHIRPathTime = time.Second
	matchTimeout        = 10 * time.Second
	maxMatchTries       = 5
)

// match finds and publishes the deliveries of a batch of events.
func (s *Deliverer) match(batch []jetstream.Msg) {
	subs := map[string][]*subscription.Subscription{}
	shares := map[string]*time.Duration{} // each project's FHIRPath time left in this batch
	for _, m := range batch {
		var ev repo.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			_ = m.Term() // not an event: no retry will read it
			continue
		}
		if ev.Project == "" {
			_ = m.Ack() // no project, no subscriptions
			continue
		}
		md, err := m.Metadata()
		if err != nil {
			_ = m.Term()
			continue
		}
		list, ok := subs[ev.Project]
		if !ok {
			ctx, cancel := context.WithTimeout(context.Background(), matchTimeout)
			list, err = s.activeSubscriptions(ctx, ev.Project)
			cancel()
			if err != nil {
				s.unmatched(m, md, ev, nil, fmt.Errorf("reading the project's subscriptions: %w", err))
				continue
			}
			subs[ev.Project] = list
		}
		share, ok := shares[ev.Project]
		if !ok {
			share = new(time.Duration)
			*share = projectFHIRPathTime
			shares[ev.Project] = share
		}
		ctx, cancel := context.WithTimeout(context.Background(), matchTimeout)
		err = s.matchChange(ctx, change{ev: ev, committed: md.Timestamp, share: share}, list)
		cancel()
		if err != nil {
			s.unmatched(m, md, ev, list, err)
			continue
		}
		_ = m.Ack()
	}
}

// unmatched tries an event that could not be matched again later, a
// little later each time, and after maxMatchTries sets it aside: it is
// acknowledged, logged, and recorded by an AuditEvent for each of its
// project's subscriptions to its type, so one event is never retried for
// ever ahead of the others.
func (s *Deliverer) unmatched(m jetstream.Msg, md *jetstream.MsgMetadata, ev repo.Event, subs []*subscription.Subscription, cause error) {
	tries := int(md.NumDelivered)
	if tries < maxMatchTries {
		s.log.Warn("subscriptions: matching a change, retried", "project", ev.Project, "type", ev.Type, "id", ev.ID, "try", tries, "err", cause)
		_ = m.NakWithDelay(time.Second << min(tries-1, 4))
		return
	}
	s.log.Error("subscriptions: a change could not be matched; set aside", "project", ev.Project, "type", ev.Type, "id", ev.ID, "tries", tries, "err", cause)
	desc := fmt.Sprintf("Set aside after %d tries to match the change: %v", tries, cause)
	recorded := false
	for _, sub := range subs {
		if sub.Type == ev.Type {
			s.cfg.Audit(ev.Project, transmitAudit(&delivery{Subscription: sub.ID, Project: ev.Project, Event: ev}, "8", desc))
			recorded = true
		}
	}
	if !recorded {
		s.cfg.Audit(ev.Project, unmatchedAudit(ev, desc))
	}
	_ = m.Ack()
}

// unmatchedAudit is the record of a change set aside when the project's
// subscriptions could not be read: it names the change alone.
func unmatchedAudit(ev repo.Event, desc string) *resource.AuditEvent {
	a := transmitAudit(&delivery{Project: ev.Project, Event: ev}, "8", desc)
	a.Entity = a.Entity[:1]
	a.Source = nil
	return a
}

// activeSubscriptions reads a project's active subscriptions.
func (s *Deliverer) activeSubscriptions(ctx context.Context, project string) ([]*subscription.Subscription, error) {
	q, err := search.Parse("Subscription", url.Values{"status": {"active"}, "_count": {fmt.Sprint(maxSubscriptions)}})
	if err != nil {
		return nil, err
	}
	page, err := s.repo.Search(ctx, repo.Scope{Project: project}, "Subscription", q)
	if err != nil {
		return nil, err
	}
	if page.More {
		s.log.Warn("subscriptions: a project has more active subscriptions than are matched", "project", project, "matched", maxSubscriptions)
	}
	out := make([]*subscription.Subscription, 0, len(page.Resources))
	for _, res := range page.Resources {
		sub, err := subscriptionOf(res)
		if err != nil {
			// Stored before writes were checked, or by another version:
			// it can never match, as in Medplum.
			s.log.Debug("subscriptions: unreadable subscription skipped", "subscription", res.ID, "err", err)
			continue
		}
		out = append(out, sub)
	}
	return out, nil
}

// change is what the matcher matches: a committed write's event, or a
// resource $resend asks to send again (resend names that request).
type change struct {
	ev        repo.Event
	committed time.Time
	resend    string
	// share is the project's FHIRPath time left in the matcher's batch
	// (nil: the event's own share only).
	share *time.Duration
}

// matchChange publishes a delivery for each subscription the change
// meets. The criteria are evaluated on the change as the subscription's
// author may read it (authorView), so that criteria on a field the
// author's policy hides never match: a notification would otherwise
// reveal what a search on that field is refused for.
func (s *Deliverer) matchChange(ctx context.Context, c change, subs []*subscription.Subscription) error {
	ev := c.ev
	var changed *repo.Resource
	var at time.Time
	var doc *search.Doc
	var before func() *repo.Resource
	fhirPathLeft := eventFHIRPathTime
	for _, sub := range subs {
		if sub.Type != ev.Type {
			continue
		}
		if changed == nil {
			var err error
			if changed, at, err = s.changedVersion(ctx, ev, c.resend != ""); err != nil {
				if fhir.Missing(err) {
					return nil // the version is gone (an expired history): nothing to send
				}
				return err
			}
			doc = search.StoredDoc(changed.Type, changed.ID, changed.Project, changed.LastUpdated, changed.JSON)
			before = s.previousVersion(ctx, changed)
		}
		if c.resend == "" {
			ok, err := s.activeAt(ctx, sub, at)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
		}
		view, err := s.authorView(ctx, sub)
		if err != nil {
			return err
		}
		seen, err := view(changed)
		if err != nil {
			return err
		}
		if seen == nil {
			// Debug: a subscription whose author lost access would log at
			// every write of the type.
			s.log.Debug("subscriptions: the author may not read the change; not delivered",
				"subscription", sub.ID, "author", sub.Author, "resource", ev.Type+"/"+ev.ID)
			continue
		}
		seenDoc := doc
		if seen != changed {
			seenDoc = search.StoredDoc(seen.Type, seen.ID, seen.Project, seen.LastUpdated, seen.JSON)
		}
		route, err := s.route(ctx, c, sub, seenDoc, previousAs(before, view), &fhirPathLeft)
		if err != nil {
			// The criteria's cost is their author's: the subscription
			// misses this change, says so, and the others go on.
			s.log.Warn("subscriptions: FHIRPath criteria spent their budget; counted as no match",
				"project", sub.Project, "subscription", sub.ID, "type", ev.Type, "err", err)
			s.cfg.Audit(sub.Project, transmitAudit(&delivery{Subscription: sub.ID, Project: sub.Project, Event: ev},
				"4", "FHIRPath criteria not evaluated, counted as no match: "+err.Error()))
			continue
		}
		if route == subscription.NotRouted {
			continue
		}
		notified := route == subscription.BySocket
		if notified {
			// Sockets bound now see it; nothing is kept for later ones.
			if err := s.nc.Publish(bus.WSSubject(sub.ID), s.notification(sub.ID, seen)); err != nil {
				return err
			}
			continue
		}
		d := delivery{Subscription: sub.ID, Project: sub.Project, Event: ev, Committed: c.committed, Resent: c.resend != ""}
		b, _ := json.Marshal(d)
		id := sub.ID + "/" + ev.Type + "/" + ev.ID + "/" + ev.VersionID
		if c.resend != "" {
			id = "resend/" + c.resend + "/" + sub.ID
		}
		if _, err := s.cfg.JS.Publish(ctx, pendingPrefix+sub.Project+"."+sub.ID, b, jetstream.WithMsgID(id)); err != nil {
			return err
		}
	}
	return nil
}

// route is how the change reaches sub. FHIRPath criteria are evaluated
// within what is left of the event's share (*left) and of the project's
// (c.share), each reduced by the time they take.
func (s *Deliverer) route(ctx context.Context, c change, sub *subscription.Subscription, doc *search.Doc, previous func() map[string]any, left *time.Duration) (subscription.Routing, error) {
	if !sub.HasFHIRPath() {
		return sub.Route(ctx, c.ev.Op, doc, previous)
	}
	previous() // a read of the store, not the criteria's work
	budget, cause := *left, errEventShare
	if c.share != nil && *c.share < budget {
		budget, cause = *c.share, errProjectShare
	}
	fctx, cancel := context.WithTimeoutCause(ctx, max(budget, 0), cause)
	defer cancel()
	start := time.Now()
	r, err := sub.Route(fctx, c.ev.Op, doc, previous)
	used := time.Since(start)
	*left -= used
	if c.share != nil {
		*c.share -= used
	}
	return r, err
}

// Why a subscription's FHIRPath criteria were cut short, beyond their own
// budget.
var (
	errEventShare   = fmt.Errorf("the change's FHIRPath time (%s for all its subscriptions) is spent", eventFHIRPathTime)
	errProjectShare = fmt.Errorf("the project's FHIRPath time (%s in a batch of changes) is spent", projectFHIRPathTime)
)

// changedVersion is the resource as the change left it; for a delete, the
// last version before it (what Medplum sends as the deleted resource). A
// resent change is the version named, whatever the interaction. at is when
// the change was written.
func (s *Deliverer) changedVersion(ctx context.Context, ev repo.Event, resent bool) (res *repo.Resource, at time.Time, err error) {
	if ev.Op != subscription.Delete || resent {
		res, err = s.repo.VRead(ctx, repo.Scope{Project: ev.Project}, ev.Type, ev.ID, ev.VersionID)
		if err != nil {
			return nil, time.Time{}, err
		}
		return res, res.LastUpdated, nil
	}
	return s.versionBefore(ctx, ev.Project, ev.Type, ev.ID, ev.VersionID)
}

// versionBefore is the newest stored (not deleted) version older than
// version vid, and when vid was written; NotFound when there is none.
func (s *Deliverer) versionBefore(ctx context.Context, project, typ, id, vid string) (*repo.Resource, time.Time, error) {
	versions, err := s.repo.History(ctx, repo.Scope{Project: project}, typ, id)
	if err != nil {
		return nil, time.Time{}, err
	}
	for i, v := range versions {
		if v.VersionID != vid {
			continue
		}
		for _, older := range versions[i+1:] {
			if !older.Deleted {
				return older, v.LastUpdated, nil
			}
		}
		break
	}
	return nil, time.Time{}, fhir.NotFound()
}

// activeAt reports whether sub, active now, was already active when a
// change was written at at. The matcher may run well after a write, and a
// write is matched against the subscriptions of its moment, as in Medplum,
// not against those made or switched on since. Within one millisecond the
// order is not known, and the change is sent. Only a subscription written
// after the change needs its history read.
func (s *Deliverer) activeAt(ctx context.Context, sub *subscription.Subscription, at time.Time) (bool, error) {
	if !sub.Written.After(at) {
		return true, nil
	}
	versions, err := s.repo.History(ctx, repo.Scope{Project: sub.Project}, "Subscription", sub.ID)
	if err != nil {
		return false, err
	}
	for _, v := range versions { // newest first: the unbroken run of active versions
		if v.Deleted {
			return false, nil
		}
		if old, err := subscriptionOf(v); err != nil || !old.Active {
			return false, nil
		}
		if !v.LastUpdated.After(at) {
			return true, nil
		}
	}
	return false, nil
}

// previousVersion gives, when first asked, the version before res, nil
// when there is none (a create); read once for all subscriptions.
func (s *Deliverer) previousVersion(ctx context.Context, res *repo.Resource) func() *repo.Resource {
	var prev *repo.Resource
	read := false
	return func() *repo.Resource {
		if read {
			return prev
		}
		read = true
		older, _, err := s.versionBefore(ctx, res.Project, res.Type, res.ID, res.VersionID)
		switch {
		case err == nil:
			prev = older
		case !fhir.Missing(err):
			s.log.Warn("subscriptions: reading the previous version", "resource", res.Type+"/"+res.ID, "err", err)
		}
		return prev
	}
}

// previousAs is the version before, as FHIRPath criteria see it through
// view (the author's): {} when there is none or the author may not read
// it, as Medplum gives a create.
func previousAs(before func() *repo.Resource, view func(*repo.Resource) (*repo.Resource, error)) func() map[string]any {
	var prev map[string]any
	return func() map[string]any {
		if prev != nil {
			return prev
		}
		prev = map[string]any{}
		if older := before(); older != nil {
			if seen, err := view(older); err == nil && seen != nil {
				if m, err := fhir.Decode(seen.JSON); err == nil {
					prev = m
				}
			}
		}
		return prev
	}
}

// subscriptionOf is a stored Subscription, parsed once per version.
func subscriptionOf(res *repo.Resource) (*subscription.Subscription, error) {
	return repo.Memo(res, "botexec.subscription", func(j []byte) (*subscription.Subscription, error) {
		sub, err := subscription.Parse(res.ID, res.Project, j)
		if err == nil {
			sub.Written = res.LastUpdated
		}
		return sub, err
	})
}

// authorView is how the subscription's author — through its membership
// of the subscription's project, as it stands now — may read a version of
// the changed resource: nil when it may not read it at all (an author
// without an active membership there sees nothing), else without the
// fields its access policy hides, as a read would answer it. Criteria are
// matched on this view, and every notification and rest-hook body is
// it, so a subscription reveals no more than a read by its author.
func (s *Deliverer) authorView(ctx context.Context, sub *subscription.Subscription) (func(*repo.Resource) (*repo.Resource, error), error) {
	none := func(*repo.Resource) (*repo.Resource, error) { return nil, nil }
	if sub.Author == "" {
		return none, nil
	}
	p, err := s.cfg.Bots.MemberAs(ctx, sub.Project, sub.Author)
	if errors.Is(err, ErrNoMembership) {
		return none, nil
	}
	if err != nil {
		return nil, err
	}
	pol, err := s.policies.For(ctx, p)
	if err != nil {
		if fe := fhir.AsError(err); fe.Status < 500 {
			return none, nil // a policy that cannot be used grants nothing
		}
		return nil, err
	}
	return func(res *repo.Resource) (*repo.Resource, error) {
		if res.Project != sub.Project {
			return nil, nil
		}
		return readableAs(pol, res)
	}, nil
}

// readableAs is res as a caller under pol may read it: nil when it may not.
func readableAs(pol *access.Policy, res *repo.Resource) (*repo.Resource, error) {
	ok, err := pol.Readable(access.Read, res)
	if err != nil || !ok {
		return nil, err
	}
	return pol.Redact(res)
}

// notification is Medplum's event-notification Bundle for a WebSocket
// subscription, the changed resource included.
func (s *Deliverer) notification(subID string, res *repo.Resource) []byte {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	b, _ := json.Marshal(map[string]any{
		"resourceType": "Bundle", "id": uuid.NewString(), "type": "history", "timestamp": now,
		"entry": []any{
			map[string]any{"resource": map[string]any{
				"resourceType": "SubscriptionStatus", "id": uuid.NewString(), "status": "active", "type": "event-notification",
				"subscription":      map[string]any{"reference": "Subscription/" + subID},
				"notificationEvent": []any{map[string]any{"eventNumber": "0", "timestamp": now, "focus": map[string]any{"reference": res.Type + "/" + res.ID}}},
			}},
			map[string]any{"resource": json.RawMessage(res.JSON), "fullUrl": s.cfg.BaseURL + "fhir/R4/" + res.Type + "/" + res.ID},
		},
	})
	return b
}

// onUnbound ends a WebSocket subscription no socket is bound to any more,
// as Medplum drops it from Redis on disconnect. Only a websocket
// subscription is removed, whatever the message names.
func (s *Deliverer) onUnbound(m *nats.Msg) {
	id := string(m.Data)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.repo.Read(ctx, repo.AllProjects, "Subscription", id)
	if err != nil {
		if !fhir.Missing(err) {
			s.log.Warn("websocket subscription not ended", "subscription", id, "err", err)
		}
		return
	}
	sub, err := subscriptionOf(res)
	if err != nil || sub.Channel != subscription.WebSocket {
		return
	}
	if err := s.repo.Delete(ctx, repo.Scope{Project: res.Project}, "Subscription", id); err != nil && !fhir.Missing(err) {
		s.log.Warn("websocket subscription not ended", "subscription", id, "err", err)
	}
}
