// Package repo is the resource repository every service writes and reads
// through: FHIR resources over the storage port (pkg/store) with versions,
// history, project isolation, validation, search, change events and a read
// cache that those events keep honest across instances.
package repo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"github.com/google/uuid"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhirschema"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/store"
)

// Resource is one version of a resource as stored.
type Resource struct {
	Type        string
	ID          string
	VersionID   string
	LastUpdated time.Time
	Project     string
	Deleted     bool
	// JSON is the complete resource, id and meta included.
	JSON []byte
	// memo holds what callers decoded from this version (see Memo), made
	// at the first call: most versions, cached or not, are never decoded,
	// and a map each was an object more for every garbage collection to
	// walk. memoOK is false for a Resource made outside the repository.
	memoOK bool
	memo   atomic.Pointer[sync.Map]
}

// Memo returns decode(res.JSON), decoded once per version and key and
// shared by every later caller, who must not change it. A cached version
// serves every request that needs it (a bot, a membership, a project's
// secrets), and decoding it each time cost more than reading it.
func Memo[T any](res *Resource, key string, decode func([]byte) (T, error)) (T, error) {
	if !res.memoOK {
		return decode(res.JSON)
	}
	m := res.memo.Load()
	if m == nil {
		res.memo.CompareAndSwap(nil, new(sync.Map))
		m = res.memo.Load()
	}
	if v, ok := m.Load(key); ok {
		return v.(T), nil
	}
	v, err := decode(res.JSON)
	if err == nil {
		m.Store(key, v)
	}
	return v, err
}

// WithJSON is this version with b for its JSON (a view with fields
// removed): a Resource of its own, not a copy, since what callers decoded
// from this one (its memo) is not b's.
func (r *Resource) WithJSON(b []byte) *Resource {
	return &Resource{Type: r.Type, ID: r.ID, VersionID: r.VersionID, LastUpdated: r.LastUpdated,
		Project: r.Project, Deleted: r.Deleted, JSON: b}
}

// Decode parses the resource JSON (numbers kept exact).
func (r *Resource) Decode() (map[string]any, error) {
	return fhir.Decode(r.JSON)
}

// Scope confines an operation to a project; a super admin sees all.
type Scope struct {
	Project string
	// AllProjects lifts the confinement (super admins, and the services'
	// own bookkeeping).
	AllProjects bool
}

// AllProjects is the scope of every project: the services' own
// bookkeeping, and super admins.
var AllProjects = Scope{AllProjects: true}

func (s Scope) allows(project string) bool { return s.AllProjects || s.Project == project }

// Event is published after every write.
type Event struct {
	Op        string `json:"op"` // create, update, delete
	Type      string `json:"type"`
	ID        string `json:"id"`
	VersionID string `json:"v"`
	Project   string `json:"project"`
	// Trace is the traceparent of the request that wrote the version, for
	// what the change triggers (rest-hooks send it on, as Medplum does).
	Trace string `json:"trace,omitempty"`
}

// Repo is the repository. It is safe for concurrent use.
type Repo struct {
	st    store.Store
	nc    *nats.Conn
	js    jetstream.JetStream
	log   *slog.Logger
	cache *lru.Cache[cacheKey, *Resource]
	// cacheMu and cacheBytes bound the cache in bytes as well as entries:
	// an entry count alone let large resources (export files, uploads)
	// hold gigabytes.
	cacheMu    sync.Mutex
	cacheBytes atomic.Int64
	// gens guards the cache against a slow read putting back a version that
	// a concurrent write has already replaced: a read caches its result only
	// if its key's stripe saw no invalidation meanwhile.
	gens [256]atomic.Uint64
	// locks serialise updates of one resource within this process, so two
	// concurrent updates both land (the second on the first) rather than
	// one losing to the store's version check. Across processes the
	// version check decides, and an update that named no version is
	// retried (unpinned).
	locks [256]sync.Mutex
	// cleared are outbox records whose events are published, removed in batches.
	clearMu sync.Mutex
	cleared []string
	// acks counts the events published without waiting (publishAfter)
	// whose ack has not come yet; acksIn takes them to awaitAcks, started
	// with the first.
	acks     sync.WaitGroup
	acksOnce sync.Once
	acksIn   chan ackWait
	sub      *nats.Subscription
}

// Options configures New.
type Options struct {
	// CacheSize is the number of resources kept for reads by id.
	CacheSize int
	Log       *slog.Logger
	// JS, when set, makes events durable through the outbox and the
	// resource stream; without it events are plain NATS messages.
	JS jetstream.JetStream
}

// New opens the repository. With nc set, writes publish events and the cache
// follows other instances' writes.
func New(st store.Store, nc *nats.Conn, o Options) (*Repo, error) {
	if o.CacheSize <= 0 {
		o.CacheSize = 100_000
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	r := &Repo{st: st, nc: nc, js: o.JS, log: o.Log}
	r.cache, _ = lru.NewWithEvict(o.CacheSize, func(_ cacheKey, res *Resource) { r.cacheBytes.Add(-int64(len(res.JSON))) })
	if nc != nil {
		sub, err := nc.Subscribe(bus.EventPrefix+">", r.onEvent)
		if err != nil {
			return nil, fmt.Errorf("repo events: %w", err)
		}
		sub.SetPendingLimits(1<<20, 256<<20)
		r.sub = sub
		// The server registers the subscription when it reads it: until
		// then another instance's write would not reach this cache, and a
		// version read meanwhile would be served stale. Wait for it.
		if err := nc.Flush(); err != nil {
			_ = sub.Unsubscribe()
			return nil, fmt.Errorf("repo events: %w", err)
		}
	}
	return r, nil
}

// Close stops following events and removes the last published outbox records.
func (r *Repo) Close() {
	r.settle()
	r.flushCleared()
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
	}
}

// cacheKey names a resource in the cache: two strings, not one joined,
// so that a cached version costs no object for its key (the strings are
// the version's own).
type cacheKey struct{ typ, id string }

// slotSeed seeds the hash of keys to their stripe and lock.
var slotSeed = maphash.MakeSeed()

func slot(k cacheKey) uint32 { return uint32(maphash.Comparable(slotSeed, k) % 256) }

func (r *Repo) stripe(k cacheKey) *atomic.Uint64 { return &r.gens[slot(k)] }

// lock takes the write lock of one resource.
func (r *Repo) lock(typ, id string) func() {
	m := &r.locks[slot(cacheKey{typ, id})]
	m.Lock()
	return m.Unlock
}

func (r *Repo) onEvent(m *nats.Msg) {
	var ev Event
	if json.Unmarshal(m.Data, &ev) != nil {
		return
	}
	key := cacheKey{ev.Type, ev.ID}
	if cur, ok := r.cache.Peek(key); ok && cur.VersionID == ev.VersionID {
		return // our own write, already cached
	}
	r.stripe(key).Add(1)
	r.cache.Remove(key)
}

// Read returns the current version of a resource: 404 if absent or in
// another project, 410 if deleted.
func (r *Repo) Read(ctx context.Context, sc Scope, typ, id string) (*Resource, error) {
	if project, seq, ok := trailEvent(typ, id); ok {
		return r.trailRead(ctx, sc, project, seq)
	}
	res, err := r.readAny(ctx, typ, id)
	if err != nil {
		return nil, err
	}
	if !sc.allows(res.Project) {
		return nil, fhir.NotFound()
	}
	if res.Deleted {
		return nil, fhir.Gone()
	}
	return res, nil
}

// readAny reads the current document, deleted or not, through the cache.
func (r *Repo) readAny(ctx context.Context, typ, id string) (*Resource, error) {
	if !fhirschema.IsResourceType(typ) {
		return nil, fhir.BadRequest("Unknown resource type: "+typ, "resourceType")
	}
	if !validID(id) {
		return nil, fhir.NotFound()
	}
	if tx := r.txOf(ctx); tx != nil {
		if res, ok := tx.read(typ, id); ok {
			return res, nil
		}
	}
	key := cacheKey{typ, id}
	if res, ok := r.cache.Get(key); ok {
		return res, nil
	}
	gen := r.stripe(key).Load()
	rec, err := r.st.Get(ctx, typ, id)
	if err != nil {
		return nil, storeError(err, typ, id)
	}
	res := fromRecord(rec)
	if r.stripe(key).Load() == gen {
		r.remember(res)
	}
	return res, nil
}

// The cache's bounds beside its entry count: no resource over
// maxCachedResource is kept, and the least recently used go once the
// resources kept pass maxCacheBytes.
const (
	maxCachedResource = 256 << 10
	maxCacheBytes     = 256 << 20
)

// remember caches a version within the cache's bounds.
func (r *Repo) remember(res *Resource) {
	r.cacheMu.Lock()
	defer r.cacheMu.Unlock()
	// Add would replace an entry without evicting it, so its bytes would
	// stay counted: remove it first (the eviction takes them off).
	k := cacheKey{res.Type, res.ID}
	r.cache.Remove(k)
	if len(res.JSON) > maxCachedResource {
		return
	}
	r.cacheBytes.Add(int64(len(res.JSON)))
	r.cache.Add(k, res)
	for r.cacheBytes.Load() > maxCacheBytes {
		if _, _, ok := r.cache.RemoveOldest(); !ok {
			break
		}
	}
}

func fromRecord(rec *store.Record) *Resource {
	return &Resource{Type: unique.Make(rec.Type).Value(), ID: rec.ID, VersionID: rec.Version, LastUpdated: rec.Time,
		Project: unique.Make(rec.Project).Value(), Deleted: rec.Deleted, JSON: rec.JSON, memoOK: true}
}

// storeError maps the port's errors to the answers callers see.
func storeError(err error, typ, id string) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fhir.NotFound()
	case errors.Is(err, store.ErrConflict):
		// The write was conditional on the version it read, as an
		// If-Match is: the same answer either way.
		return fhir.PreconditionFailed()
	case errors.Is(err, store.ErrExists) && typ == "":
		return fhir.Conflict("Resource already exists")
	case errors.Is(err, store.ErrExists):
		return fhir.Conflict("Resource already exists: " + typ + "/" + id)
	}
	return err
}

// VRead returns one version from the history.
func (r *Repo) VRead(ctx context.Context, sc Scope, typ, id, vid string) (*Resource, error) {
	if _, _, ok := trailEvent(typ, id); ok {
		// A trail event has one version, never changed.
		res, err := r.Read(ctx, sc, typ, id)
		if err == nil && vid != res.VersionID {
			return nil, fhir.NotFound()
		}
		return res, err
	}
	if _, err := r.Read(ctx, sc, typ, id); err != nil && !errors.Is(err, fhir.ErrGone) {
		return nil, err
	}
	if !validID(vid) {
		return nil, fhir.NotFound()
	}
	rec, err := r.st.GetVersion(ctx, typ, id, vid)
	if err != nil {
		return nil, storeError(err, typ, id)
	}
	res := fromRecord(rec)
	if !sc.allows(res.Project) {
		return nil, fhir.NotFound()
	}
	if res.Deleted {
		return nil, fhir.Gone()
	}
	return res, nil
}

// History lists every version of a resource, newest first.
func (r *Repo) History(ctx context.Context, sc Scope, typ, id string) ([]*Resource, error) {
	if _, _, ok := trailEvent(typ, id); ok {
		res, err := r.Read(ctx, sc, typ, id)
		if err != nil {
			return nil, err
		}
		return []*Resource{res}, nil
	}
	if _, err := r.Read(ctx, sc, typ, id); err != nil && !errors.Is(err, fhir.ErrGone) {
		return nil, err
	}
	recs, err := r.st.History(ctx, typ, id, 1000)
	if err != nil {
		return nil, err
	}
	out := make([]*Resource, len(recs))
	for i, rec := range recs {
		out[i] = fromRecord(rec)
	}
	return out, nil
}

// WriteOptions are the caller's choices for a create or update.
type WriteOptions struct {
	// Project stamps meta.project on a new resource (create only).
	Project string
	// ID asks for this id on create (idempotent steps pick their own ids).
	ID string
	// IfMatch is the expected current version (update only): 412 otherwise.
	IfMatch string
	// Author is the reference recorded as meta.author.
	Author string
	// Strict validates with the project's strictMode rules.
	Strict bool
}

// Create stores a new resource.
func (r *Repo) Create(ctx context.Context, sc Scope, res map[string]any, o WriteOptions) (*Resource, error) {
	typ, _ := res["resourceType"].(string)
	if err := Check(res, o.Strict); err != nil {
		return nil, err
	}
	id := o.ID
	if id == "" {
		id = NewID()
	} else if !validID(id) {
		return nil, fhir.BadRequest("Invalid id", "id")
	}
	project := o.Project
	if project == "" {
		project = sc.Project
	}
	out, err := r.write(ctx, "create", typ, id, project, res, o.Author, "")
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Update replaces the current version. An identical resource (ignoring
// meta) is returned unchanged, with no new version.
func (r *Repo) Update(ctx context.Context, sc Scope, res map[string]any, o WriteOptions) (*Resource, error) {
	if err := Check(res, o.Strict); err != nil {
		return nil, err
	}
	var out *Resource
	err := r.unpinned(o.IfMatch, func() (err error) {
		out, err = r.update(ctx, sc, res, o)
		return err
	})
	return out, err
}

// unpinned runs a write again when another process wrote the resource
// between its read and its write, unless the caller named the version
// (ifMatch): a caller who named none is owed no refusal, as in Medplum,
// which serialises the writes of one resource. Writers in one process
// already wait for each other (lock).
func (r *Repo) unpinned(ifMatch string, write func() error) error {
	for attempt := 1; ; attempt++ {
		err := write()
		if ifMatch != "" || attempt == maxUnpinnedAttempts || !errors.Is(err, fhir.ErrPreconditionFailed) {
			return err
		}
		// A little jitter, so that writers in step fall out of it.
		time.Sleep(time.Duration(rand.Int64N(int64(attempt) * int64(time.Millisecond))))
	}
}

// maxUnpinnedAttempts bounds unpinned: past it, the 412 is answered.
const maxUnpinnedAttempts = 8

func (r *Repo) update(ctx context.Context, sc Scope, res map[string]any, o WriteOptions) (*Resource, error) {
	typ, _ := res["resourceType"].(string)
	id, _ := res["id"].(string)
	defer r.lock(typ, id)()
	cur, err := r.Read(ctx, sc, typ, id)
	if err != nil {
		return nil, err
	}
	if o.IfMatch != "" && o.IfMatch != cur.VersionID {
		// The cached version may be behind another instance's write whose
		// event has not arrived: ask the store before refusing a caller
		// who names the version that write made.
		r.forget(typ, id)
		if cur, err = r.Read(ctx, sc, typ, id); err != nil {
			return nil, err
		}
		if o.IfMatch != cur.VersionID {
			return nil, fhir.PreconditionFailed()
		}
	}
	if same, err := sameContent(cur, res); err != nil {
		return nil, err
	} else if same {
		return cur, nil
	}
	out, err := r.write(ctx, "update", typ, id, cur.Project, res, o.Author, cur.VersionID)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Delete marks a resource deleted; reads then answer 410.
func (r *Repo) Delete(ctx context.Context, sc Scope, typ, id string) error {
	return r.unpinned("", func() error { return r.delete(ctx, sc, typ, id) })
}

func (r *Repo) delete(ctx context.Context, sc Scope, typ, id string) error {
	defer r.lock(typ, id)()
	cur, err := r.Read(ctx, sc, typ, id)
	if err != nil {
		return err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	vid := uuid.NewString()
	ev := Event{Op: "delete", Type: typ, ID: id, VersionID: vid, Project: cur.Project, Trace: bus.TraceFrom(ctx)}
	w := &store.Write{Record: store.Record{Type: typ, ID: id, Version: vid, Time: now, Project: cur.Project, Deleted: true},
		Prev: cur.VersionID, Event: r.outboxEvent(ev), Strict: strictTypes[typ]}
	return r.commit(ctx, &version{ev: ev, w: w, out: fromRecord(&w.Record)})
}

// write stores a new version, replacing prevVersion ("" creates).
func (r *Repo) write(ctx context.Context, op, typ, id, project string, res map[string]any, author, prevVersion string) (*Resource, error) {
	v, err := r.prepare(ctx, op, typ, id, project, res, author)
	if err != nil {
		return nil, err
	}
	v.w.Prev = prevVersion
	if err := r.commit(ctx, v); err != nil {
		return nil, err
	}
	return v.out, nil
}

// commit stores a version, or adds it to the transaction ctx carries.
func (r *Repo) commit(ctx context.Context, v *version) error {
	if tx := r.txOf(ctx); tx != nil {
		tx.add(v)
		return nil
	}
	if err := r.st.Write(ctx, v.w); err != nil {
		if v.w.Prev != "" {
			r.forget(v.out.Type, v.out.ID)
		}
		return storeError(err, v.out.Type, v.out.ID)
	}
	r.stored(v)
	return nil
}

// forget drops a cached version a write found stale.
func (r *Repo) forget(typ, id string) {
	key := cacheKey{typ, id}
	r.stripe(key).Add(1)
	r.cache.Remove(key)
}

// version is one new version, ready to store.
type version struct {
	ev  Event
	w   *store.Write
	out *Resource
	// quiet: no event is recorded or published (see eventless).
	quiet bool
}

// eventless reports whether a write has no resource event. A new
// AuditEvent has none: Medplum never runs subscriptions for audit events,
// and a new id is in no cache to invalidate. Bots write one per execution,
// so an event each (recorded, published to the stream, cleared) would cost
// more than the audit record itself. Changes to existing AuditEvents keep
// their events, which caches rely on.
func eventless(op, typ string) bool { return op == "create" && typ == "AuditEvent" }

// prepare stamps id and meta on a resource and builds its write.
func (r *Repo) prepare(ctx context.Context, op, typ, id, project string, res map[string]any, author string) (*version, error) {
	if _, _, ok := trailEvent(typ, id); ok {
		// The trail's places are the audit writers' alone (trail.go).
		return nil, fhir.BadRequest("An audit trail event is never written as a resource", "id")
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	vid := uuid.NewString()
	res["id"] = id
	meta, _ := res["meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta["versionId"] = vid
	meta["lastUpdated"] = now.Format("2006-01-02T15:04:05.000Z")
	if project != "" {
		meta["project"] = project
	} else {
		delete(meta, "project")
	}
	if author != "" {
		meta["author"] = map[string]any{"reference": author}
	} else {
		delete(meta, "author")
	}
	// The server's to set (Medplum computes them; Pinion has no use for
	// them yet): whatever path a write came by (a patch, a bot, a batch),
	// a caller's value is never stored.
	delete(meta, "account")
	delete(meta, "accounts")
	delete(meta, "compartment")
	res["meta"] = meta
	body, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("encode %s/%s: %w", typ, id, err)
	}
	v := &version{
		ev: Event{Op: op, Type: typ, ID: id, VersionID: vid, Project: project, Trace: bus.TraceFrom(ctx)},
		out: &Resource{Type: unique.Make(typ).Value(), ID: id, VersionID: vid, LastUpdated: now,
			Project: unique.Make(project).Value(), JSON: body, memoOK: true},
		quiet: eventless(op, typ),
	}
	v.w = &store.Write{Record: store.Record{Type: typ, ID: id, Version: vid, Time: now, Project: project, JSON: body},
		Fields: search.Fields(typ, res), Strict: strictTypes[typ]}
	if !v.quiet {
		v.w.Event = r.outboxEvent(v.ev)
	}
	return v, nil
}

// stored caches a version just written and publishes its event.
func (r *Repo) stored(v *version) {
	key := cacheKey{v.out.Type, v.out.ID}
	r.stripe(key).Add(1)
	r.remember(v.out)
	if !v.quiet {
		r.publishAfter(v.ev, v.w.Event)
	}
}

// CreateMany stores new resources of one type in a few round trips (one
// insert each for the outbox, the history and the current documents), for
// high-volume writes such as audit events. Each is validated; one
// invalid resource fails the batch before anything is written. A resource
// that names its id is created with it (a taken id fails the batch as a
// create finds it taken); the others get new ids.
func (r *Repo) CreateMany(ctx context.Context, sc Scope, typ string, list []map[string]any, o WriteOptions) error {
	if len(list) == 0 {
		return nil
	}
	project := o.Project
	if project == "" {
		project = sc.Project
	}
	vs := make([]*version, 0, len(list))
	ws := make([]*store.Write, 0, len(list))
	for _, res := range list {
		if t, _ := res["resourceType"].(string); t != typ {
			return fhir.BadRequest("Incorrect resource type", "resourceType")
		}
		if err := Check(res, o.Strict); err != nil {
			return err
		}
		id, _ := res["id"].(string)
		if id == "" {
			id = NewID()
		} else if !validID(id) {
			return fhir.BadRequest("Invalid id", "id")
		}
		v, err := r.prepare(ctx, "create", typ, id, project, res, o.Author)
		if err != nil {
			return err
		}
		vs = append(vs, v)
		ws = append(ws, v.w)
	}
	if err := r.st.Write(ctx, ws...); err != nil {
		return storeError(err, typ, "")
	}
	// Not cached, unlike stored: nothing reads them at once, and at a
	// bot's rate of audit events they would push out of the cache what
	// is read (and keep the heap large for the collector to walk).
	for _, v := range vs {
		if !v.quiet {
			r.publishAfter(v.ev, v.w.Event)
		}
	}
	return nil
}

// sameContent reports whether res equals the stored resource, meta aside.
func sameContent(cur *Resource, res map[string]any) (bool, error) {
	old, err := cur.Decode()
	if err != nil {
		return false, err
	}
	a, _ := json.Marshal(withoutMeta(old))
	b, _ := json.Marshal(withoutMeta(res))
	return bytes.Equal(a, b), nil
}

// withoutMeta is a shallow copy without the server-managed meta fields, for
// validation and comparison.
// Check is the validation every write makes: it drops from res, in place,
// the empty values Medplum ignores, then checks what is left (that is what
// gets stored) against the resource's definition. $validate, and any check
// made before a write, call it too.
func Check(res map[string]any, strict bool) error {
	fhir.DropEmpty(res)
	return fhirschema.Validate(withoutMeta(res), fhirschema.Options{Strict: strict})
}

func withoutMeta(res map[string]any) map[string]any {
	out := make(map[string]any, len(res))
	for k, v := range res {
		out[k] = v
	}
	if m, ok := res["meta"].(map[string]any); ok {
		mm := make(map[string]any, len(m))
		for k, v := range m {
			switch k {
			case "versionId", "lastUpdated", "project", "author", "account", "compartment":
			default:
				mm[k] = v
			}
		}
		if len(mm) == 0 {
			delete(out, "meta")
		} else {
			out["meta"] = mm
		}
	}
	return out
}

// NewID names a new resource: a UUID whose leading 48 bits are the time
// of its making (version 7), the rest random. The store's index of
// resources by type and id then grows at its end, in pages the previous
// creates just wrote, where random (version 4) ids dirtied a page of it
// chosen at random by each create (issue 38). It still holds 74 random
// bits, and tells no more than the first version's meta.lastUpdated.
func NewID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	return uuid.NewString()
}

// validID checks the FHIR id syntax, which also keeps ids safe as keys.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
