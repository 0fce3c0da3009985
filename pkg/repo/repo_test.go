package repo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/pkg/store/sqlstore"
)

// The repository's tests run on the default store; every store's own
// behaviour is held to pkg/store/storetest.
var (
	st         store.Store
	natsServer *server.Server
)

func TestMain(m *testing.M) {
	dir, _ := os.MkdirTemp("", "pinion-repo-")
	ns, err := embedded.StartNATS(embedded.NATSOptions{Dir: dir + "/nats", NoListen: true})
	if err != nil {
		panic(err)
	}
	if st, err = sqlstore.Open(context.Background(), dir+"/pinion.db", sqlstore.Options{}); err != nil {
		panic(err)
	}
	natsServer = ns
	code := m.Run()
	_ = st.Close()
	ns.Shutdown()
	os.RemoveAll(dir)
	os.Exit(code)
}

// instance is one repository as one service process would have it.
func instance(t *testing.T) *Repo {
	t.Helper()
	return instanceOn(t, st)
}

// instanceOn is a repository over the store s.
func instanceOn(t *testing.T, s store.Store) *Repo {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(natsServer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r, err := New(s, nc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func statusOf(err error) int {
	var fe *fhir.Error
	if errors.As(err, &fe) {
		return fe.Status
	}
	return 0
}

func patient(family string) map[string]any {
	return map[string]any{"resourceType": "Patient", "name": []any{map[string]any{"family": family}}}
}

func TestVersionsAndScope(t *testing.T) {
	ctx := context.Background()
	r := instance(t)
	a := Scope{Project: "project-a"}
	res, err := r.Create(ctx, a, patient("One"), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Project != "project-a" {
		t.Fatalf("project %q", res.Project)
	}
	if _, err := r.Read(ctx, Scope{Project: "project-b"}, "Patient", res.ID); statusOf(err) != 404 {
		t.Fatalf("other project read: %v", err)
	}
	if _, err := r.Read(ctx, AllProjects, "Patient", res.ID); err != nil {
		t.Fatalf("system read: %v", err)
	}
	m, _ := res.Decode()
	m["gender"] = "female"
	if _, err := r.Update(ctx, a, m, WriteOptions{IfMatch: "stale"}); statusOf(err) != 412 {
		t.Fatalf("stale If-Match: %v", err)
	}
	v2, err := r.Update(ctx, a, m, WriteOptions{IfMatch: res.VersionID})
	if err != nil || v2.VersionID == res.VersionID {
		t.Fatalf("update: %v", err)
	}
	same, err := r.Update(ctx, a, m, WriteOptions{})
	if err != nil || same.VersionID != v2.VersionID {
		t.Fatalf("identical update made a version: %v", err)
	}
	if old, err := r.VRead(ctx, a, "Patient", res.ID, res.VersionID); err != nil || old.VersionID != res.VersionID {
		t.Fatalf("vread: %v", err)
	}
	if err := r.Delete(ctx, a, "Patient", res.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(ctx, a, "Patient", res.ID); statusOf(err) != 410 {
		t.Fatalf("read after delete: %v", err)
	}
	h, err := r.History(ctx, a, "Patient", res.ID)
	if err != nil || len(h) != 3 || !h[0].Deleted {
		t.Fatalf("history: %d entries, %v", len(h), err)
	}
	if _, err := r.Create(ctx, a, map[string]any{"resourceType": "Patient", "bogus": 1}, WriteOptions{}); statusOf(err) != 400 {
		t.Fatalf("invalid resource stored: %v", err)
	}
}

// Two instances share the database; a write through one must not leave the
// other answering its cached, older version.
func TestCacheFollowsOtherInstances(t *testing.T) {
	ctx := context.Background()
	r1, r2 := instance(t), instance(t)
	sc := Scope{Project: "p"}
	res, err := r1.Create(ctx, sc, patient("Before"), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Read(ctx, sc, "Patient", res.ID); err != nil { // now cached in r2
		t.Fatal(err)
	}
	m, _ := res.Decode()
	m["name"] = []any{map[string]any{"family": "After"}}
	v2, err := r1.Update(ctx, sc, m, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the other instance to serve the new version", func() bool {
		got, err := r2.Read(ctx, sc, "Patient", res.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.VersionID == v2.VersionID
	})
	if err := r1.Delete(ctx, sc, "Patient", res.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the other instance to answer 410 for the deleted resource", func() bool {
		_, err := r2.Read(ctx, sc, "Patient", res.ID)
		return statusOf(err) == 410
	})
}

// eventually polls cond until it holds, failing the test, naming what it
// waited for, after 10 s (testenv.WaitLimit; testenv is built on this
// package, so its tests cannot import it).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(pause)
	}
}

// Concurrent updates of one version: exactly one wins, the rest conflict.
func TestConcurrentUpdatesDoNotBothWin(t *testing.T) {
	ctx := context.Background()
	r := instance(t)
	sc := Scope{Project: "p"}
	res, err := r.Create(ctx, sc, patient("Race"), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]error, 8)
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			m, _ := res.Decode()
			m["name"] = []any{map[string]any{"family": fmt.Sprint("Writer", i)}}
			_, results[i] = r.Update(ctx, sc, m, WriteOptions{IfMatch: res.VersionID})
		}(i)
	}
	wg.Wait()
	wins := 0
	for _, err := range results {
		switch statusOf(err) {
		case 0:
			if err != nil {
				t.Fatal(err)
			}
			wins++
		case 412:
		default:
			t.Fatalf("unexpected: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d writers won", wins)
	}
	h, _ := r.History(ctx, sc, "Patient", res.ID)
	cur, _ := r.Read(ctx, AllProjects, "Patient", res.ID)
	var m map[string]any
	_ = json.Unmarshal(cur.JSON, &m)
	if len(h) < 2 || h[0].VersionID != cur.VersionID {
		t.Fatalf("history head %s, current %s", h[0].VersionID, cur.VersionID)
	}
}

// Two processes updating one resource without If-Match: every update
// lands, as in Medplum, though each process's lock cannot see the other's.
// Named versions still race: exactly one writer of a version wins, and the
// others get 412, from whichever process.
// An instance whose cache has not yet heard of another's write still
// takes an update naming the version that write made: the If-Match is
// checked against the store before a 412. A stale If-Match is refused.
func TestIfMatchPastAStaleCache(t *testing.T) {
	ctx := context.Background()
	sc := Scope{Project: "p"}
	r1 := instance(t)
	r2, err := New(st, nil, Options{}) // no events: its cache stays behind
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r2.Close)
	v1, err := r1.Create(ctx, sc, patient("Stale"), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Read(ctx, sc, "Patient", v1.ID); err != nil { // cached
		t.Fatal(err)
	}
	m, _ := v1.Decode()
	m["gender"] = "male"
	v2, err := r1.Update(ctx, sc, m, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m["gender"] = "female"
	if _, err := r2.Update(ctx, sc, m, WriteOptions{IfMatch: v2.VersionID}); err != nil {
		t.Fatalf("If-Match of the current version, through a stale cache: %v", err)
	}
	m["gender"] = "other"
	if _, err := r2.Update(ctx, sc, m, WriteOptions{IfMatch: v2.VersionID}); !errors.Is(err, fhir.ErrPreconditionFailed) {
		t.Fatalf("If-Match of a replaced version: %v, want 412", err)
	}
}

func TestUnpinnedUpdatesAcrossInstances(t *testing.T) {
	ctx := context.Background()
	r1, r2 := instance(t), instance(t)
	sc := Scope{Project: "p"}
	res, err := r1.Create(ctx, sc, patient("Shared"), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const perWriter = 5
	var wg sync.WaitGroup
	errs := make(chan error, 4*perWriter)
	for w, r := range []*Repo{r1, r2, r1, r2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				m, _ := res.Decode()
				m["name"] = []any{map[string]any{"family": fmt.Sprintf("Writer%d-%d", w, i)}}
				if _, err := r.Update(ctx, sc, m, WriteOptions{}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("an update without If-Match was refused: %v", err)
	}
	h, err := r1.History(ctx, sc, "Patient", res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 1+4*perWriter {
		t.Fatalf("history has %d versions, want %d", len(h), 1+4*perWriter)
	}

	// The newest version from the store: r2's cache may not have heard of
	// the last writes yet.
	cur := h[0]
	results := make([]error, 6)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, _ := cur.Decode()
			m["gender"] = []string{"male", "female", "other"}[i%3]
			_, results[i] = []*Repo{r1, r2}[i%2].Update(ctx, sc, m, WriteOptions{IfMatch: cur.VersionID})
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range results {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, fhir.ErrPreconditionFailed):
			t.Fatalf("a lost race answered %v, want 412", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d writers of one version won", wins)
	}
}

func TestClaims(t *testing.T) {
	ctx := context.Background()
	r := instance(t)
	var wg sync.WaitGroup
	winners := make([]string, 10)
	for i := range winners {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			w, err := r.Claim(ctx, "k:race", fmt.Sprint("owner", i))
			if err != nil {
				t.Error(err)
			}
			winners[i] = w
		}(i)
	}
	wg.Wait()
	for _, w := range winners {
		if w != winners[0] {
			t.Fatalf("claim has several winners: %v", winners)
		}
	}
	if err := r.Release(ctx, "k:race", "someone else"); err != nil {
		t.Fatal(err)
	}
	if o, _ := r.ClaimOwner(ctx, "k:race"); o != winners[0] {
		t.Fatal("released by a non-owner")
	}
	if err := r.Release(ctx, "k:race", winners[0]); err != nil {
		t.Fatal(err)
	}
	if o, _ := r.ClaimOwner(ctx, "k:race"); o != "" {
		t.Fatal("not released")
	}
}

// eventedRepo is a repository that publishes its events to a stream, and
// the count of the messages the stream holds.
func eventedRepo(t *testing.T) (*Repo, func() uint64) {
	t.Helper()
	ctx := context.Background()
	nc, err := nats.Connect("", nats.InProcessServer(natsServer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	stream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: "OUTBOX_TEST", Subjects: []string{"pinion.events.resource.>"}, Duplicates: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(st, nc, Options{JS: js})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, func() uint64 {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
}

// The outbox: events reach the stream once, a crashed writer's event is
// relayed, and an event for a write that never happened is dropped.
func TestOutbox(t *testing.T) {
	ctx := context.Background()
	r, count := eventedRepo(t)
	before := count()
	_, err := r.Create(ctx, Scope{Project: "p"}, patient("Outbox"), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.settle() // the answer does not wait for the stream's ack
	if got := count(); got != before+1 {
		t.Fatalf("stream has %d new events, want 1", got-before)
	}
	r.flushCleared()
	pending := func() int {
		t.Helper()
		p, err := st.Pending(ctx, time.Now().Add(time.Hour), time.Now().Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return len(p)
	}
	if n := pending(); n != 0 {
		t.Fatalf("outbox not cleared: %d left", n)
	}

	// A writer that died after storing a version, before publishing.
	w := &store.Write{Record: store.Record{Type: "Patient", ID: "crashed", Version: "v1", Time: time.Now().UTC().Add(-time.Minute), Project: "p",
		JSON: []byte(`{"resourceType":"Patient","id":"crashed"}`)}}
	w.Event, _ = json.Marshal(Event{Op: "create", Type: "Patient", ID: "crashed", VersionID: "v1", Project: "p"})
	if err := st.Write(ctx, w); err != nil {
		t.Fatal(err)
	}
	before = count()
	outboxGrace = 0
	defer func() { outboxGrace = 3 * time.Second }()
	// The relay takes events recorded before now, to the millisecond: let
	// one pass, or a fast store leaves the event in the same millisecond
	// as the relay and it is (rightly) not yet due. A clock that must pass,
	// not an event to wait for: two milliseconds always cross into the next.
	time.Sleep(2 * time.Millisecond)
	n, err := r.RelayOnce(ctx)
	if err != nil || n != 1 {
		t.Fatalf("relayed %d, %v", n, err)
	}
	if got := count(); got != before+1 {
		t.Fatalf("relay published %d events, want 1", got-before)
	}
	// Relayed again (say by a second process before the first cleared it):
	// the duplicate window keeps it single.
	if _, err := r.RelayOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := count(); got != before+1 {
		t.Fatalf("relay duplicated an event: %d new", got-before)
	}
	r.flushCleared()
	if n := pending(); n != 0 {
		t.Fatalf("outbox after relay: %d left", n)
	}
}

// TestAuditEventsHaveNoCreateEvent: a new AuditEvent is recorded and
// published nowhere (Medplum runs no subscriptions for audit events), but a
// change to one still tells the caches.
func TestAuditEventsHaveNoCreateEvent(t *testing.T) {
	ctx := context.Background()
	r, count := eventedRepo(t)
	audit := func() map[string]any {
		return map[string]any{"resourceType": "AuditEvent", "recorded": "2026-01-01T00:00:00Z",
			"type": map[string]any{"code": "execute"}, "agent": []any{map[string]any{"requestor": true}},
			"source": map[string]any{"observer": map[string]any{"reference": "Bot/b"}}}
	}
	before, cached := count(), r.cache.Len()
	if err := r.CreateMany(ctx, Scope{Project: "p"}, "AuditEvent", []map[string]any{audit(), audit()}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Written in bulk, they are not cached either: at a bot's rate they
	// would push out what is read.
	if got := r.cache.Len(); got != cached {
		t.Fatalf("CreateMany cached %d resources, want none", got-cached)
	}
	created, err := r.Create(ctx, Scope{Project: "p"}, audit(), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.settle()
	if got := count(); got != before {
		t.Fatalf("creating audit events published %d events, want none", got-before)
	}
	p, err := st.Pending(ctx, time.Now().Add(time.Hour), time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range p {
		if strings.HasPrefix(e.ID, "AuditEvent/") {
			t.Fatalf("an audit event's creation left an outbox record: %s", e.ID)
		}
	}
	doc, _ := created.Decode()
	doc["outcome"] = "4"
	if _, err := r.Update(ctx, Scope{Project: "p"}, doc, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.settle()
	if got := count(); got != before+1 {
		t.Fatalf("updating an audit event published %d events, want 1", got-before)
	}
}

// TestMemo: a version read through the repository is decoded once per key;
// a new version is decoded afresh.
func TestMemo(t *testing.T) {
	ctx := context.Background()
	r := instance(t)
	sc := Scope{Project: "memo"}
	res, err := r.Create(ctx, sc, patient("Memo"), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	decodes := 0
	family := func(res *Resource) string {
		t.Helper()
		v, err := Memo(res, "test.family", func(b []byte) (string, error) {
			decodes++
			var p struct {
				Name []struct{ Family string } `json:"name"`
			}
			err := json.Unmarshal(b, &p)
			return p.Name[0].Family, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for range 3 {
		got, err := r.Read(ctx, sc, "Patient", res.ID)
		if err != nil {
			t.Fatal(err)
		}
		if f := family(got); f != "Memo" {
			t.Fatalf("family %q", f)
		}
	}
	if decodes != 1 {
		t.Fatalf("three reads of one version decoded it %d times, want 1", decodes)
	}
	doc, _ := res.Decode()
	doc["name"] = []any{map[string]any{"family": "Changed"}}
	if _, err := r.Update(ctx, sc, doc, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(ctx, sc, "Patient", res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if f := family(got); f != "Changed" || decodes != 2 {
		t.Fatalf("after an update: family %q after %d decodes", f, decodes)
	}
	// A view of it with other JSON (an access policy's, fields removed)
	// decodes its own JSON, not what the version's memo holds.
	view := got.WithJSON([]byte(`{"resourceType":"Patient","name":[{"family":"Viewed"}]}`))
	if f := family(view); f != "Viewed" {
		t.Fatalf("a view with other JSON gave the version's memo: family %q", f)
	}
	// The view is the same version otherwise: every other field carried
	// over, so that a field added to Resource cannot be left behind.
	gv, vv := reflect.ValueOf(got).Elem(), reflect.ValueOf(view).Elem()
	for i := range gv.NumField() {
		switch name := gv.Type().Field(i).Name; name {
		case "JSON", "memo", "memoOK":
		default:
			if !reflect.DeepEqual(gv.Field(i).Interface(), vv.Field(i).Interface()) {
				t.Errorf("WithJSON dropped %s", name)
			}
		}
	}
}

// TestCacheBounds checks the read cache's byte bounds: a large resource is
// not kept, and the bytes counted follow replacements and evictions.
func TestCacheBounds(t *testing.T) {
	r := &Repo{}
	r.cache, _ = lru.NewWithEvict(1000, func(_ cacheKey, res *Resource) { r.cacheBytes.Add(-int64(len(res.JSON))) })
	res := func(id string, n int) *Resource { return &Resource{Type: "Binary", ID: id, JSON: make([]byte, n)} }
	r.remember(res("a", 100))
	r.remember(res("a", 300))
	if got := r.cacheBytes.Load(); got != 300 || r.cache.Len() != 1 {
		t.Fatalf("after a replacement: %d bytes, %d entries", got, r.cache.Len())
	}
	r.remember(res("big", maxCachedResource+1))
	if _, ok := r.cache.Peek(cacheKey{"Binary", "big"}); ok || r.cacheBytes.Load() != 300 {
		t.Fatalf("a resource over the bound was kept")
	}
	r.remember(res("a", maxCachedResource+1))
	if r.cache.Len() != 0 || r.cacheBytes.Load() != 0 {
		t.Fatalf("a replacement over the bound left %d bytes", r.cacheBytes.Load())
	}
	n := maxCacheBytes/maxCachedResource + 10
	for i := range n {
		r.remember(res(fmt.Sprint(i), maxCachedResource))
	}
	if r.cacheBytes.Load() > maxCacheBytes || r.cache.Len() >= n {
		t.Fatalf("%d bytes in %d entries, bound %d", r.cacheBytes.Load(), r.cache.Len(), maxCacheBytes)
	}
	r.cache.Purge()
	if r.cacheBytes.Load() != 0 {
		t.Fatalf("%d bytes counted in an empty cache", r.cacheBytes.Load())
	}
}
