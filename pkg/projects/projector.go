package projects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
)

// The projector is the one writer of membership entries in the session
// bucket: it derives them (Entry) from what is stored, never from what a
// handler meant to store. It is driven two ways, which do the same thing:
//
//   - by the resource events of committed writes (the outbox stream), so
//     a write through any path — a transaction Bundle, a bot, a batch —
//     reaches the sessions, and a write that rolled back never does;
//   - by a request on bus.SubjSessionProject from a handler that must
//     answer only once the change holds (read-your-writes): the reply is
//     the bucket revision the gateway then waits for, as before.
//
// Every process with a repository runs one (queue group and one durable
// consumer), so a request is answered while any of them is up.

// projectorConsumer is the durable consumer of resource events.
const projectorConsumer = "session-projector"

// projectTimeout bounds a handler's wait for its projection.
const projectTimeout = 10 * time.Second

// projectorWorkers bounds the requests one process projects at once.
const projectorWorkers = 32

// projected types: a membership's own events, and a policy's (its address
// rules are part of each entry that uses it).
var projected = []string{"ProjectMembership", "AccessPolicy"}

type projectRequest struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Project string `json:"project,omitempty"`
}

type projectReply struct {
	Rev   uint64 `json:"rev"`
	Error string `json:"error,omitempty"`
}

// Projector runs the projection in one process.
type Projector struct {
	repo     *repo.Repo
	sessions *session.Store
	log      *slog.Logger
	// locks serialise the projection of one resource in this process, so
	// an older read never overwrites a newer entry here.
	locks [64]sync.Mutex
	slots chan struct{}
	sub   *nats.Subscription
	cc    jetstream.ConsumeContext
}

// StartProjector starts answering projection requests and following the
// events of stream. Stop ends both.
func StartProjector(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream string, r *repo.Repo, sessions *session.Store, log *slog.Logger) (*Projector, error) {
	if log == nil {
		log = slog.Default()
	}
	p := &Projector{repo: r, sessions: sessions, log: log.With("component", "session-projector"), slots: make(chan struct{}, projectorWorkers)}
	var err error
	if p.sub, err = nc.QueueSubscribe(bus.SubjSessionProject, "projector", p.onRequest); err != nil {
		return nil, fmt.Errorf("session projector: %w", err)
	}
	filters := make([]string, len(projected))
	for i, t := range projected {
		filters[i] = bus.EventSubject(t, "*")
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:        projectorConsumer,
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        30 * time.Second,
		MaxAckPending:  1024,
	})
	if err != nil {
		_ = p.sub.Unsubscribe()
		return nil, fmt.Errorf("session projector consumer: %w", err)
	}
	if p.cc, err = cons.Consume(p.onEvent); err != nil {
		_ = p.sub.Unsubscribe()
		return nil, fmt.Errorf("session projector consume: %w", err)
	}
	return p, nil
}

// Stop stops taking requests and events.
func (p *Projector) Stop() {
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
	}
	if p.cc != nil {
		p.cc.Stop()
	}
}

func (p *Projector) onRequest(m *nats.Msg) {
	var req projectRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		_ = m.Respond(mustJSON(projectReply{Error: "bad request"}))
		return
	}
	p.slots <- struct{}{}
	go func() {
		defer func() { <-p.slots }()
		ctx, cancel := context.WithTimeout(context.Background(), projectTimeout)
		defer cancel()
		rev, err := p.apply(ctx, req.Type, req.ID, req.Project)
		reply := projectReply{Rev: rev}
		if err != nil {
			p.log.Error("session projection", "type", req.Type, "id", req.ID, "err", err)
			reply.Error = err.Error()
		}
		_ = m.Respond(mustJSON(reply))
	}()
}

func (p *Projector) onEvent(m jetstream.Msg) {
	var ev repo.Event
	if err := json.Unmarshal(m.Data(), &ev); err != nil {
		_ = m.Term() // not an event: no retry will read it
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), projectTimeout)
	defer cancel()
	if _, err := p.apply(ctx, ev.Type, ev.ID, ev.Project); err != nil {
		p.log.Warn("session projection of an event, retried", "type", ev.Type, "id", ev.ID, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.Ack()
}

// apply brings the entries fed by one resource in step with the store and
// returns the bucket revision that holds them (0 when no entry is fed).
func (p *Projector) apply(ctx context.Context, typ, id, project string) (uint64, error) {
	h := fnv.New32a()
	h.Write([]byte(typ + "/" + id))
	mu := &p.locks[h.Sum32()%uint32(len(p.locks))]
	mu.Lock()
	defer mu.Unlock()
	switch typ {
	case "ProjectMembership":
		return p.membership(ctx, id)
	case "AccessPolicy":
		return p.policyUsers(ctx, project, typ+"/"+id)
	}
	return 0, fmt.Errorf("no session entry is fed by %s", typ)
}

// membershipAttempts bounds how often membership starts over because
// another process wrote the entry meanwhile.
const membershipAttempts = 8

// membership brings one membership's entry in step with the store. The
// locks above order this process's projections of it; other processes
// project it too (one durable consumer and queue group), so the entry is
// written only at the revision read before the resource, and read again
// on a conflict: a projection of an older version of the membership (an
// admin since demoted, a member since removed) never lands last.
func (p *Projector) membership(ctx context.Context, id string) (uint64, error) {
	for attempt := 1; ; attempt++ {
		rev, err := p.membershipOnce(ctx, id)
		if !errors.Is(err, session.ErrConflict) || attempt == membershipAttempts {
			return rev, err
		}
	}
}

func (p *Projector) membershipOnce(ctx context.Context, id string) (uint64, error) {
	rev, err := p.sessions.MembershipRevision(ctx, id)
	if err != nil {
		return 0, err
	}
	res, err := p.repo.Read(ctx, repo.AllProjects, "ProjectMembership", id)
	if fhir.Missing(err) {
		return p.sessions.DeleteMembershipAt(ctx, id, rev)
	}
	if err != nil {
		return 0, err
	}
	e, err := p.entry(ctx, res)
	if err != nil {
		return 0, err
	}
	if testHookProjected != nil {
		testHookProjected(id)
	}
	return p.sessions.PutMembershipAt(ctx, id, *e, rev)
}

// testHookProjected, if set, runs between reading a membership and
// writing its entry: tests change the membership there, as another
// process would.
var testHookProjected func(id string)

// entry is a stored membership's entry (an inactive one stays, marked
// inactive: its tokens fail).
func (p *Projector) entry(ctx context.Context, res *repo.Resource) (*session.Membership, error) {
	var m membershipDoc
	if err := json.Unmarshal(res.JSON, &m); err != nil {
		return nil, err
	}
	_, projectID, _ := fhir.SplitReference(m.Project.Reference)
	pj, err := Get(ctx, p.repo, projectID)
	if err != nil {
		return nil, err
	}
	addresses, err := access.AddressRules(ctx, p.repo, res)
	if err != nil {
		return nil, err
	}
	return Entry(res.JSON, pj.SuperAdmin, addresses)
}

// policyUsers writes again the entry of every membership of the project
// that names the policy, and returns the last revision.
func (p *Projector) policyUsers(ctx context.Context, project, policy string) (uint64, error) {
	if project == "" {
		return 0, errors.New("a policy's projection needs its project")
	}
	var rev uint64
	for offset := 0; ; offset += 100 {
		q, err := search.Parse("ProjectMembership", url.Values{"access-policy": {policy}, "_count": {"100"}, "_offset": {strconv.Itoa(offset)}})
		if err != nil {
			return 0, err
		}
		page, err := p.repo.Search(ctx, repo.Scope{Project: project}, "ProjectMembership", q)
		if err != nil {
			return 0, err
		}
		for _, m := range page.Resources {
			// Read again under its revision: the search's copy may be
			// older than another process's projection.
			if rev, err = p.membership(ctx, m.ID); err != nil {
				return 0, err
			}
		}
		if !page.More {
			return rev, nil
		}
	}
}

// Project asks a projector to bring the session entries that a stored
// resource feeds (a ProjectMembership's own, or those of the memberships
// an AccessPolicy of project is named by) in step, after a handler wrote
// or deleted it. It returns the memberships bucket revision to answer
// with (bus.Response.WithSession), 0 when no entry changed.
func Project(ctx context.Context, nc *nats.Conn, typ, id, project string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, projectTimeout)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, bus.SubjSessionProject, mustJSON(projectRequest{Type: typ, ID: id, Project: project}))
	if err != nil {
		return 0, fmt.Errorf("session projection of %s/%s: %w", typ, id, err)
	}
	var reply projectReply
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return 0, fmt.Errorf("session projection of %s/%s: %w", typ, id, err)
	}
	if reply.Error != "" {
		return 0, fmt.Errorf("session projection of %s/%s: %s", typ, id, reply.Error)
	}
	return reply.Rev, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only this file's own structs are encoded
	}
	return b
}
