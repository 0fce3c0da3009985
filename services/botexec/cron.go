package botexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/botcron"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/kvcas"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/writerules"
	"github.com/pinion-health/pinion/services/botexec/worker"
)

// Scheduled bots (Bot.cronString, Bot.cronTiming; Medplum's
// workers/cron.ts). The schedule is durable and shared by every botexec
// instance: a JetStream key-value bucket holds each scheduled bot's next
// run. A durable consumer of the Bot events keeps the bucket in step with
// the bots (a new or changed schedule is put with its next run from now;
// a removed schedule or deleted bot removes the key). Every instance
// watches the bucket and, each poll, claims the runs that are due by
// updating the key to its following run, conditional on the revision it
// saw: of the instances that see a run due, exactly one claim succeeds,
// and only that one runs the bot. A run that fell due while every
// instance was down is due once at start; its following run is counted
// from then, so missed ticks run once, not once each. A crash between a
// claim and the run loses that run rather than repeating it.
//
// The same consumer follows the Project events, since a schedule runs
// only while its project's features include cron: a project that gains
// them schedules its bots written before (or while it lacked them), one
// that loses them drops theirs. And, as the one follower of every Bot
// event, it removes a deleted bot's own secrets (botsecrets.go) from the
// store.
const (
	cronBucket   = "pinion_bot_cron"
	cronConsumer = "bot-cron"
	// defaultCronPoll is how often an instance looks for due runs: cron's
	// resolution is a minute, so a run starts within a second of its time.
	defaultCronPoll = time.Second
	// maxCronRuns bounds the scheduled runs one instance starts at once;
	// the project's concurrency bounds them further.
	maxCronRuns = 64
	// claimWorkers bounds the claims one instance makes at once.
	claimWorkers = 16
)

// Clock tells the scheduler the time.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// cronEntry is one scheduled bot in the bucket.
type cronEntry struct {
	Project string    `json:"project"`
	Spec    string    `json:"spec"`
	Next    time.Time `json:"next"`
}

// heldEntry is an entry as this instance last saw it.
type heldEntry struct {
	cronEntry
	rev   uint64
	sched *botcron.Schedule
}

// cronFire runs a claimed tick of a bot.
type cronFire func(ctx context.Context, bot, project string, due time.Time)

// scheduler is one instance's part of the shared schedule.
type scheduler struct {
	js     jetstream.JetStream
	repo   *repo.Repo
	stream string
	clock  Clock
	poll   time.Duration
	fire   cronFire
	log    *slog.Logger

	kv      jetstream.KeyValue
	watcher jetstream.KeyWatcher
	cc      jetstream.ConsumeContext
	mu      sync.Mutex
	entries map[string]*heldEntry
	synced  chan struct{}
	runs    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func newScheduler(js jetstream.JetStream, r *repo.Repo, stream string, clock Clock, poll time.Duration, fire cronFire, log *slog.Logger) *scheduler {
	if clock == nil {
		clock = systemClock{}
	}
	if poll <= 0 {
		poll = defaultCronPoll
	}
	return &scheduler{js: js, repo: r, stream: stream, clock: clock, poll: poll, fire: fire, log: log,
		entries: map[string]*heldEntry{}, synced: make(chan struct{}), runs: make(chan struct{}, maxCronRuns)}
}

// Start opens the bucket and follows the Bot events and the bucket.
func (c *scheduler) Start(ctx context.Context) error {
	var err error
	if c.kv, err = c.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: cronBucket, Storage: jetstream.FileStorage}); err != nil {
		return fmt.Errorf("bucket %s: %w", cronBucket, err)
	}
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.stream, jetstream.ConsumerConfig{
		Durable:        cronConsumer,
		FilterSubjects: []string{bus.EventPrefix + "Bot.>", bus.EventPrefix + "Project.>"},
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        30 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("bot schedule consumer: %w", err)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if c.watcher, err = c.kv.WatchAll(c.ctx); err != nil {
		c.cancel()
		return err
	}
	if c.cc, err = cons.Consume(c.onEvent); err != nil {
		_ = c.watcher.Stop()
		c.cancel()
		return err
	}
	c.wg.Add(2)
	go c.watch()
	go c.loop()
	return nil
}

// Stop stops claiming runs and waits for those started.
func (c *scheduler) Stop() {
	if c.cancel == nil {
		return
	}
	c.cc.Stop()
	_ = c.watcher.Stop()
	c.cancel()
	c.wg.Wait()
}

// onEvent brings a bot's key in step with the bot as it now stands (not
// as the event's version: events of one bot may be handled out of order).
func (c *scheduler) onEvent(m jetstream.Msg) {
	var ev repo.Event
	if err := json.Unmarshal(m.Data(), &ev); err != nil || ev.ID == "" {
		c.log.Error("bot schedule: unreadable event", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return
	}
	sync := c.sync
	if ev.Type == "Project" {
		sync = c.syncProject
	}
	if err := sync(c.ctx, ev.ID); err != nil {
		c.log.Error("bot schedule: could not update", "type", ev.Type, "id", ev.ID, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.Ack()
}

// syncAttempts bounds how often sync starts over because another
// instance changed the bot's key while it looked.
const syncAttempts = 8

// testHookSynced, if set, runs in sync between reading the bot and writing
// its key: tests change the bot there, as another instance would.
var testHookSynced func(id string)

// sync brings the bot's key in step with the bot. It reads the key's
// revision before the bot and writes only at that revision: instances
// handle one bot's events at once, and one holding an older version of
// the bot must not overwrite the key another wrote from a newer one (a
// bot made and then given a schedule lost it that way, now and then, with
// two instances). On a conflict it reads both again.
func (c *scheduler) sync(ctx context.Context, id string) error {
	for attempt := 1; ; attempt++ {
		err := c.syncOnce(ctx, id)
		if !kvcas.Conflict(err) || attempt == syncAttempts {
			return err
		}
	}
}

func (c *scheduler) syncOnce(ctx context.Context, id string) error {
	var held *cronEntry
	var rev uint64
	switch cur, err := c.kv.Get(ctx, id); {
	case err == nil:
		rev, held = cur.Revision(), &cronEntry{}
		if json.Unmarshal(cur.Value(), held) != nil {
			held.Spec = "" // unreadable: written again
		}
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return err
	}
	want, err := c.wanted(ctx, id)
	if err != nil {
		return err
	}
	if testHookSynced != nil {
		testHookSynced(id)
	}
	switch {
	case want == nil && held == nil:
		return nil
	case want == nil:
		return c.kv.Delete(ctx, id, jetstream.LastRevision(rev))
	case held != nil && held.Spec == want.sched.Spec && held.Project == want.project:
		return nil // the same schedule: its next run stands
	}
	// A new or changed schedule: its next run from now.
	b, _ := json.Marshal(cronEntry{Project: want.project, Spec: want.sched.Spec, Next: want.sched.Next(c.clock.Now())})
	if held == nil {
		_, err = c.kv.Create(ctx, id, b)
	} else {
		_, err = c.kv.Update(ctx, id, b, rev)
	}
	return err
}

// wantedSchedule is the schedule a bot should have.
type wantedSchedule struct {
	project string
	sched   *botcron.Schedule
}

// wanted is the schedule the bot should have now, or nil for none. A
// deleted bot's own secrets go with it here.
func (c *scheduler) wanted(ctx context.Context, id string) (*wantedSchedule, error) {
	res, err := c.repo.Read(ctx, repo.AllProjects, "Bot", id)
	if fhir.Missing(err) {
		// nil deletes; none is fine.
		return nil, c.repo.SetSecret(ctx, botSecretsKey(id), nil)
	}
	if err != nil {
		return nil, err
	}
	var body map[string]any
	if err := json.Unmarshal(res.JSON, &body); err != nil {
		return nil, err
	}
	sched, err := botcron.Of(body)
	if err != nil {
		// Written before the check, or by the services themselves.
		c.log.Warn("bot schedule: not scheduled", "bot", id, "err", err)
		return nil, nil
	}
	if sched == nil {
		return nil, nil
	}
	features, err := writerules.ProjectFeatures(ctx, c.repo, res.Project)
	if err != nil {
		return nil, err
	}
	if !botcron.Enabled(features) {
		return nil, nil
	}
	return &wantedSchedule{project: res.Project, sched: sched}, nil
}

// projectBotsPage is how many of a project's bots syncProject reads at once.
const projectBotsPage = 500

// syncProject brings every bot of the project in step with the project's
// features as they now stand.
func (c *scheduler) syncProject(ctx context.Context, project string) error {
	for offset := 0; ; offset += projectBotsPage {
		q, err := search.Parse("Bot", url.Values{"_count": {strconv.Itoa(projectBotsPage)}, "_offset": {strconv.Itoa(offset)}})
		if err != nil {
			return err
		}
		page, err := c.repo.Search(ctx, repo.Scope{Project: project}, "Bot", q)
		if err != nil {
			return err
		}
		for _, b := range page.Resources {
			if err := c.sync(ctx, b.ID); err != nil {
				return err
			}
		}
		if !page.More {
			return nil
		}
	}
}

// watch keeps this instance's copy of the bucket.
func (c *scheduler) watch() {
	defer c.wg.Done()
	for u := range c.watcher.Updates() {
		if u == nil {
			close(c.synced)
			continue
		}
		c.apply(u)
	}
}

func (c *scheduler) apply(u jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := u.Key()
	if u.Operation() != jetstream.KeyValuePut {
		delete(c.entries, id)
		return
	}
	if h, ok := c.entries[id]; ok && h.rev >= u.Revision() {
		return // this instance's own claim got here first
	}
	var e cronEntry
	if err := json.Unmarshal(u.Value(), &e); err != nil {
		c.log.Error("bot schedule: unreadable entry", "bot", id, "err", err)
		delete(c.entries, id)
		return
	}
	h := &heldEntry{cronEntry: e, rev: u.Revision()}
	if old, ok := c.entries[id]; ok && old.Spec == e.Spec {
		h.sched = old.sched
	} else {
		s, err := botcron.Of(map[string]any{"cronString": e.Spec})
		if err != nil || s == nil {
			c.log.Error("bot schedule: unreadable schedule", "bot", id, "spec", e.Spec, "err", err)
			delete(c.entries, id)
			return
		}
		h.sched = s
	}
	c.entries[id] = h
}

// loop claims the due runs every poll, once this instance has read the
// whole bucket.
func (c *scheduler) loop() {
	defer c.wg.Done()
	select {
	case <-c.synced:
	case <-c.ctx.Done():
		return
	}
	t := time.NewTicker(c.poll)
	defer t.Stop()
	for {
		c.claimDue()
		select {
		case <-t.C:
		case <-c.ctx.Done():
			return
		}
	}
}

func (c *scheduler) claimDue() {
	now := c.clock.Now()
	type due struct {
		id string
		h  heldEntry
	}
	var list []due
	c.mu.Lock()
	for id, h := range c.entries {
		if !h.Next.After(now) {
			list = append(list, due{id, *h})
		}
	}
	c.mu.Unlock()
	// A claim is a JetStream round trip: made one after the other, those
	// of 10,000 bots due at one minute started up to ten seconds late
	// (BenchmarkScheduler10kBots); claimWorkers of them go at once.
	sem := make(chan struct{}, claimWorkers)
	var wg sync.WaitGroup
	for _, d := range list {
		select {
		case sem <- struct{}{}:
		case <-c.ctx.Done():
			wg.Wait()
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			c.claim(now, d.id, d.h)
		})
	}
	wg.Wait()
}

// claim takes one due run, if no other instance took it first, and starts
// it.
func (c *scheduler) claim(now time.Time, id string, h heldEntry) {
	next := h.sched.Next(now)
	b, _ := json.Marshal(cronEntry{Project: h.Project, Spec: h.Spec, Next: next})
	rev, err := c.kv.Update(c.ctx, id, b, h.rev)
	if err != nil {
		// Another instance claimed it, or the schedule changed: the
		// watcher brings the entry as it now is.
		return
	}
	c.mu.Lock()
	if cur, ok := c.entries[id]; ok && cur.rev == h.rev {
		cur.Next, cur.rev = next, rev
	}
	c.mu.Unlock()
	select {
	case c.runs <- struct{}{}:
	case <-c.ctx.Done():
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() { <-c.runs }()
		c.fire(c.ctx, id, h.Project, h.Next)
	}()
}

// runScheduled runs a claimed tick: as the bot's own membership, with the
// Bot as input (application/fhir+json), as Medplum's cron worker does,
// through the path every run takes (sandbox limits, the project's
// concurrency, an AuditEvent that says it was scheduled).
func (s *Service) runScheduled(ctx context.Context, id, project string, due time.Time) {
	start := time.Now()
	log := s.log.With("bot", id, "project", project, "due", due)
	res, err := s.repo.Read(ctx, repo.Scope{Project: project}, "Bot", id)
	if fhir.Missing(err) {
		return // deleted since: its key goes with the delete's event
	}
	if err != nil {
		log.Error("scheduled bot: could not read the bot; this run is missed", "err", err)
		return
	}
	features, err := writerules.ProjectFeatures(ctx, s.repo, project)
	if err != nil {
		log.Error("scheduled bot: could not read the project; this run is missed", "err", err)
		return
	}
	if !botcron.Enabled(features) {
		log.Warn("scheduled bot: the project's features no longer include cron and bots; not run")
		return
	}
	bt, err := botOf(res)
	if err != nil {
		log.Error("scheduled bot: unreadable bot; not run", "err", err)
		return
	}
	runAs, err := deliveryBots{s}.MemberAs(ctx, project, "Bot/"+id)
	if err != nil {
		log.Error("scheduled bot: could not find project membership for bot; not run", "err", err)
		return
	}
	_, err = s.run(ctx, &execution{
		bot: bt, in: &input{kind: worker.InputJSON, body: res.JSON, mediaType: "application/fhir+json"},
		requester: runAs, runAs: runAs, start: start, requestID: uuid.NewString(),
		contentType: "application/fhir+json", scheduled: due,
	})
	if err != nil {
		log.Error("scheduled bot: not run", "err", err)
	}
}
