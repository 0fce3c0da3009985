// Package storetest is the conformance suite of the storage port: every
// adapter of store.Store runs Run from its own tests and must pass it, so
// that nothing above the port can tell the adapters apart.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
)

// Options declare what an adapter does not guarantee.
type Options struct {
	// NotAtomic: a Write call of several writes may store some of them
	// when another fails (MongoDB on FerretDB, which has no
	// transactions). A single write is still all or nothing.
	NotAtomic bool
}

// Run runs the suite. open returns a fresh, empty store for each subtest;
// the caller closes it (t.Cleanup) and removes what it leaves. At most one
// Options may follow.
func Run(t *testing.T, open func(t *testing.T) store.Store, opts ...Options) {
	var o Options
	switch len(opts) {
	case 0:
	case 1:
		o = opts[0]
	default:
		t.Fatal("storetest.Run: more than one Options")
	}
	tests := []struct {
		name string
		run  func(t *testing.T, s store.Store)
	}{
		{"CreateGet", testCreateGet},
		{"ReplaceDelete", testReplaceDelete},
		{"SinglePartial", testSinglePartial},
		{"Atomic", func(t *testing.T, s store.Store) {
			if o.NotAtomic {
				t.Skip("the adapter declares Write calls not atomic")
			}
			testAtomic(t, s)
		}},
		{"SameResourceTwice", testSameResourceTwice},
		{"ConcurrentReplace", testConcurrentReplace},
		{"ConcurrentCreate", testConcurrentCreate},
		{"Claims", testClaims},
		{"ConcurrentClaim", testConcurrentClaim},
		{"Search", testSearch},
		{"SearchHand", testSearchHand},
		{"SearchKinds", testSearchKinds},
		{"Sort", testSort},
		{"Reindex", testReindex},
		{"ConcurrentReindex", testConcurrentReindex},
		{"Outbox", testOutbox},
		{"Secrets", testSecrets},
		{"ConcurrentSwapSecret", testConcurrentSwapSecret},
		{"ConcurrentSetSecret", testConcurrentSetSecret},
		{"Trail", testTrail},
		{"ConcurrentTrail", testConcurrentTrail},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, open(t))
		})
	}
}

// t0 is the suite's epoch: every time is at millisecond precision, UTC,
// as the port stores them.
var t0 = time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func record(typ, id, version, project string, at time.Time, json string) store.Record {
	r := store.Record{Type: typ, ID: id, Version: version, Time: at, Project: project}
	if json != "" {
		r.JSON = []byte(json)
	}
	return r
}

func create(r store.Record, fields map[string]any) *store.Write {
	return &store.Write{Record: r, Fields: fields}
}

func replace(r store.Record, prev string, fields map[string]any) *store.Write {
	return &store.Write{Record: r, Prev: prev, Fields: fields}
}

func deletion(typ, id, version, prev, project string, at time.Time) *store.Write {
	return &store.Write{Record: store.Record{Type: typ, ID: id, Version: version, Time: at, Project: project, Deleted: true}, Prev: prev}
}

func mustWrite(t *testing.T, s store.Store, ws ...*store.Write) {
	t.Helper()
	if err := s.Write(ctxOf(t), ws...); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func mustGet(t *testing.T, s store.Store, typ, id string) *store.Record {
	t.Helper()
	r, err := s.Get(ctxOf(t), typ, id)
	if err != nil {
		t.Fatalf("Get %s/%s: %v", typ, id, err)
	}
	return r
}

// sameRecord compares a stored record with the one written.
func sameRecord(t *testing.T, what string, got *store.Record, want store.Record) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: nil record", what)
	}
	switch {
	case got.Type != want.Type, got.ID != want.ID, got.Version != want.Version,
		got.Project != want.Project, got.Deleted != want.Deleted:
		t.Fatalf("%s: got %s/%s v%s project %q deleted %v, want %s/%s v%s project %q deleted %v", what,
			got.Type, got.ID, got.Version, got.Project, got.Deleted,
			want.Type, want.ID, want.Version, want.Project, want.Deleted)
	case !got.Time.Equal(want.Time):
		t.Fatalf("%s: time %v, want %v", what, got.Time, want.Time)
	case got.Time.Location() != time.UTC:
		t.Fatalf("%s: time %v is not UTC", what, got.Time)
	case want.Deleted && len(got.JSON) != 0:
		t.Fatalf("%s: deleted record has JSON %q", what, got.JSON)
	case !want.Deleted && !bytes.Equal(got.JSON, want.JSON):
		t.Fatalf("%s: JSON %q, want %q", what, got.JSON, want.JSON)
	}
}

func versions(rs []*store.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Version
	}
	return out
}

func ids(rs []*store.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func search(t *testing.T, s store.Store, typ string, q store.Query) []*store.Record {
	t.Helper()
	rs, err := s.Search(ctxOf(t), typ, &q)
	if err != nil {
		t.Fatalf("Search %s %+v: %v", typ, q, err)
	}
	return rs
}

// sortedIDs lists the ids of a search, sorted, for set comparisons.
func sortedIDs(t *testing.T, s store.Store, typ string, q store.Query) []string {
	t.Helper()
	out := ids(search(t, s, typ, q))
	slices.Sort(out)
	return out
}

func testCreateGet(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	a := record("Patient", "a", "1", "p1", t0, `{"resourceType":"Patient","id":"a"}`)
	mustWrite(t, s, create(a, map[string]any{"s_name": []string{"ann"}}))
	sameRecord(t, "Get", mustGet(t, s, "Patient", "a"), a)
	v, err := s.GetVersion(ctx, "Patient", "a", "1")
	if err != nil {
		t.Fatalf("GetVersion: %v", err)
	}
	sameRecord(t, "GetVersion", v, a)

	_, err = s.Get(ctx, "Patient", "nobody")
	wantErr(t, "Get absent", err, store.ErrNotFound)
	_, err = s.Get(ctx, "Observation", "a")
	wantErr(t, "Get of the id under another type", err, store.ErrNotFound)
	_, err = s.GetVersion(ctx, "Patient", "a", "2")
	wantErr(t, "GetVersion absent version", err, store.ErrNotFound)
	_, err = s.GetVersion(ctx, "Patient", "nobody", "1")
	wantErr(t, "GetVersion absent resource", err, store.ErrNotFound)
	h, err := s.History(ctx, "Patient", "nobody", 10)
	if len(h) != 0 || err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("History of an absent resource: %d records, error %v", len(h), err)
	}

	// The same id under another type is another resource.
	o := record("Observation", "a", "7", "p1", t0, `{"resourceType":"Observation","id":"a"}`)
	mustWrite(t, s, create(o, nil))
	sameRecord(t, "Get other type", mustGet(t, s, "Observation", "a"), o)
	sameRecord(t, "Get first type", mustGet(t, s, "Patient", "a"), a)

	// A create of a taken id stores nothing.
	taken := record("Patient", "a", "1b", "p2", t0.Add(time.Minute), `{"taken":true}`)
	err = s.Write(ctx, &store.Write{Record: taken, Fields: map[string]any{"s_name": []string{"zed"}}, Event: []byte("e")})
	wantErr(t, "create of a taken id", err, store.ErrExists)
	sameRecord(t, "Get after refused create", mustGet(t, s, "Patient", "a"), a)
	_, err = s.GetVersion(ctx, "Patient", "a", "1b")
	wantErr(t, "GetVersion of the refused create", err, store.ErrNotFound)
	if got := sortedIDs(t, s, "Patient", store.Query{Filter: []store.Cond{store.Eq("s_name", "zed")}, Limit: 100}); len(got) != 0 {
		t.Fatalf("refused create left search values: %v", got)
	}
	if got := sortedIDs(t, s, "Patient", store.Query{Filter: []store.Cond{store.Eq("s_name", "ann")}, Limit: 100}); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("search after refused create: %v", got)
	}
	if p := pending(t, s); len(p) != 0 {
		t.Fatalf("refused create left an event: %v", p)
	}
}

func testReplaceDelete(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	v1 := record("Patient", "a", "1", "p1", t0, `{"v":1}`)
	v2 := record("Patient", "a", "2", "p1", t0.Add(time.Minute), `{"v":2}`)
	mustWrite(t, s, create(v1, map[string]any{"s_name": []string{"ann", "anna"}, "s_birth": t0}))
	mustWrite(t, s, replace(v2, "1", map[string]any{"s_name": []string{"bob"}}))
	sameRecord(t, "Get after replace", mustGet(t, s, "Patient", "a"), v2)
	old, err := s.GetVersion(ctx, "Patient", "a", "1")
	if err != nil {
		t.Fatalf("GetVersion 1: %v", err)
	}
	sameRecord(t, "old version", old, v1)

	// The search values are the new version's only.
	find := func(c store.Cond) []string {
		return sortedIDs(t, s, "Patient", store.Query{Filter: []store.Cond{c}, Limit: 100})
	}
	if got := find(store.Eq("s_name", "ann")); len(got) != 0 {
		t.Fatalf("old value still found: %v", got)
	}
	if got := find(store.Exists("s_birth", true)); len(got) != 0 {
		t.Fatalf("dropped field still found: %v", got)
	}
	if got := find(store.Eq("s_name", "bob")); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("new value: got %v, want [a]", got)
	}

	// A stale Prev changes nothing.
	stale := record("Patient", "a", "3x", "p1", t0.Add(2*time.Minute), `{"stale":true}`)
	err = s.Write(ctx, &store.Write{Record: stale, Prev: "1", Fields: map[string]any{"s_name": []string{"stale"}}, Event: []byte("e")})
	wantErr(t, "replace with a stale Prev", err, store.ErrConflict)
	sameRecord(t, "Get after conflict", mustGet(t, s, "Patient", "a"), v2)
	_, err = s.GetVersion(ctx, "Patient", "a", "3x")
	wantErr(t, "GetVersion of the refused version", err, store.ErrNotFound)
	if got := find(store.Eq("s_name", "stale")); len(got) != 0 {
		t.Fatalf("refused replace left search values: %v", got)
	}
	if p := pending(t, s); len(p) != 0 {
		t.Fatalf("refused replace left an event: %v", p)
	}

	// A replace of a resource that does not exist stores nothing.
	ghost := record("Patient", "ghost", "2", "p1", t0, `{}`)
	if err := s.Write(ctx, replace(ghost, "1", nil)); !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("replace of an absent resource: got %v, want ErrConflict or ErrNotFound", err)
	}
	_, err = s.Get(ctx, "Patient", "ghost")
	wantErr(t, "Get after refused replace", err, store.ErrNotFound)

	// Delete: a new, deleted version; history keeps the others.
	mustWrite(t, s, deletion("Patient", "a", "3", "2", "p1", t0.Add(3*time.Minute)))
	del := mustGet(t, s, "Patient", "a")
	sameRecord(t, "Get deleted", del, store.Record{Type: "Patient", ID: "a", Version: "3", Time: t0.Add(3 * time.Minute), Project: "p1", Deleted: true})
	if got := find(store.Eq("s_name", "bob")); len(got) != 0 {
		t.Fatalf("deleted resource found by its values: %v", got)
	}
	if got := sortedIDs(t, s, "Patient", store.Query{Limit: 100}); len(got) != 0 {
		t.Fatalf("deleted resource listed: %v", got)
	}
	if got := find(store.Exists("s_name", false)); len(got) != 0 {
		t.Fatalf("deleted resource found by a missing field: %v", got)
	}
	if n, err := s.Count(ctx, "Patient", &store.Query{}); err != nil || n != 0 {
		t.Fatalf("Count after delete: %d, %v", n, err)
	}
	h, err := s.History(ctx, "Patient", "a", 10)
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	if got := versions(h); !slices.Equal(got, []string{"3", "2", "1"}) {
		t.Fatalf("History: %v, want [3 2 1]", got)
	}
	if !h[0].Deleted || h[1].Deleted {
		t.Fatalf("History: deleted flags %v %v", h[0].Deleted, h[1].Deleted)
	}
	sameRecord(t, "History[1]", h[1], v2)
	sameRecord(t, "History[2]", h[2], v1)
	h, err = s.History(ctx, "Patient", "a", 2)
	if err != nil || !slices.Equal(versions(h), []string{"3", "2"}) {
		t.Fatalf("History limit 2: %v, %v", versions(h), err)
	}

	// Writing on from the deleted version brings it back.
	v4 := record("Patient", "a", "4", "p2", t0.Add(4*time.Minute), `{"v":4}`)
	mustWrite(t, s, replace(v4, "3", map[string]any{"s_name": []string{"cy"}}))
	sameRecord(t, "revived", mustGet(t, s, "Patient", "a"), v4)
	if got := find(store.Eq("s_name", "cy")); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("revived resource: got %v", got)
	}
	if got := sortedIDs(t, s, "Patient", store.Query{Project: "p1", Limit: 100}); len(got) != 0 {
		t.Fatalf("resource moved to p2 still listed in p1: %v", got)
	}
	if got := sortedIDs(t, s, "Patient", store.Query{Project: "p2", Filter: []store.Cond{store.Eq("s_name", "cy")}, Limit: 100}); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("resource moved to p2 not found there: %v", got)
	}
}

// testSinglePartial: a failing single write stores nothing, on every
// adapter (the port's promise even without transactions).
func testSinglePartial(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	a := record("Patient", "a", "1", "p1", t0, `{"v":1}`)
	mustWrite(t, s, create(a, map[string]any{"s_name": []string{"ann"}}))
	for _, w := range []*store.Write{
		{Record: record("Patient", "a", "9", "p1", t0, `{}`), Prev: "8", Fields: map[string]any{"s_name": "x"}, Event: []byte("x")},
		{Record: record("Patient", "a", "9", "p1", t0, `{}`), Fields: map[string]any{"s_name": "x"}, Event: []byte("x")},
	} {
		if err := s.Write(ctx, w); err == nil {
			t.Fatalf("write with Prev %q succeeded", w.Prev)
		}
		sameRecord(t, "after failure", mustGet(t, s, "Patient", "a"), a)
		if h, err := s.History(ctx, "Patient", "a", 10); err != nil || len(h) != 1 {
			t.Fatalf("History after failure: %v, %v", versions(h), err)
		}
		if got := sortedIDs(t, s, "Patient", store.Query{Filter: []store.Cond{store.Eq("s_name", "x")}, Limit: 10}); len(got) != 0 {
			t.Fatalf("failed write left search values")
		}
		if p := pending(t, s); len(p) != 0 {
			t.Fatalf("failed write left an event: %v", p)
		}
	}
}

func testAtomic(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	x1 := record("Patient", "x", "1", "p1", t0, `{"x":1}`)
	mustWrite(t, s, create(x1, nil))

	y := record("Patient", "y", "1", "p1", t0, `{"y":1}`)
	z := record("Patient", "z", "1", "p1", t0, `{"z":1}`)
	x2 := record("Patient", "x", "2", "p1", t0.Add(time.Minute), `{"x":2}`)
	withEvent := func(w *store.Write) *store.Write { w.Event = []byte("event of " + w.ID); return w }

	err := s.Write(ctx, withEvent(create(y, map[string]any{"s_k": "y"})), withEvent(replace(x2, "wrong", nil)))
	wantErr(t, "second write conflicts", err, store.ErrConflict)
	_, err = s.Get(ctx, "Patient", "y")
	wantErr(t, "first write of a failed call", err, store.ErrNotFound)
	sameRecord(t, "x after failed call", mustGet(t, s, "Patient", "x"), x1)

	err = s.Write(ctx, withEvent(create(z, map[string]any{"s_k": "z"})), withEvent(create(x2, nil)))
	wantErr(t, "second write exists", err, store.ErrExists)
	_, err = s.Get(ctx, "Patient", "z")
	wantErr(t, "first write of a failed call", err, store.ErrNotFound)

	// The failure comes first: nothing after it is stored either.
	err = s.Write(ctx, withEvent(replace(x2, "wrong", nil)), withEvent(create(z, nil)))
	wantErr(t, "first write conflicts", err, store.ErrConflict)
	_, err = s.Get(ctx, "Patient", "z")
	wantErr(t, "second write of a failed call", err, store.ErrNotFound)

	if got := sortedIDs(t, s, "Patient", store.Query{Filter: []store.Cond{store.Exists("s_k", true)}, Limit: 10}); len(got) != 0 {
		t.Fatalf("failed calls left search values: %v", got)
	}
	if p := pending(t, s); len(p) != 0 {
		t.Fatalf("failed calls left events: %v", p)
	}

	// All good: all stored.
	mustWrite(t, s, withEvent(create(y, map[string]any{"s_k": "y"})), withEvent(create(z, map[string]any{"s_k": "z"})), withEvent(replace(x2, "1", nil)))
	sameRecord(t, "y", mustGet(t, s, "Patient", "y"), y)
	sameRecord(t, "z", mustGet(t, s, "Patient", "z"), z)
	sameRecord(t, "x", mustGet(t, s, "Patient", "x"), x2)
	if got := sortedIDs(t, s, "Patient", store.Query{Filter: []store.Cond{store.Exists("s_k", true)}, Limit: 10}); !slices.Equal(got, []string{"y", "z"}) {
		t.Fatalf("search after the good call: %v", got)
	}
	if p := pending(t, s); len(p) != 3 {
		t.Fatalf("events after the good call: %v", p)
	}
}

// testSameResourceTwice: later writes of a call see the earlier ones.
func testSameResourceTwice(t *testing.T, s store.Store) {
	v1 := record("Patient", "a", "1", "p1", t0, `{"v":1}`)
	v2 := record("Patient", "a", "2", "p1", t0.Add(time.Minute), `{"v":2}`)
	v3 := record("Patient", "a", "3", "p1", t0.Add(2*time.Minute), `{"v":3}`)
	mustWrite(t, s, create(v1, map[string]any{"s_n": "one"}), replace(v2, "1", map[string]any{"s_n": "two"}), replace(v3, "2", map[string]any{"s_n": "three"}))
	sameRecord(t, "Get", mustGet(t, s, "Patient", "a"), v3)
	h, err := s.History(ctxOf(t), "Patient", "a", 0)
	if err != nil || !slices.Equal(versions(h), []string{"3", "2", "1"}) {
		t.Fatalf("History: %v, %v", versions(h), err)
	}
	for n, want := range map[string][]string{"one": nil, "two": nil, "three": {"a"}} {
		if got := sortedIDs(t, s, "Patient", store.Query{Filter: []store.Cond{store.Eq("s_n", n)}, Limit: 10}); !slices.Equal(got, want) {
			t.Fatalf("s_n=%s: %v, want %v", n, got, want)
		}
	}
}

func pending(t *testing.T, s store.Store) []store.Pending {
	t.Helper()
	p, err := s.Pending(ctxOf(t), time.Now().Add(time.Hour), time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	return p
}

func testOutbox(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	a := record("Patient", "a", "1", "p1", t0, `{}`)
	b := record("Patient", "b", "1", "p1", t0, `{}`)
	mustWrite(t, s, &store.Write{Record: a, Event: []byte(`{"event":"a"}`)})
	mustWrite(t, s, &store.Write{Record: b})
	p := pending(t, s)
	if len(p) != 1 || p[0].ID != store.OutboxID("Patient", "a", "1") || string(p[0].Event) != `{"event":"a"}` {
		t.Fatalf("Pending: %+v", p)
	}
	past, err := s.Pending(ctx, time.Now().Add(-time.Hour), time.Now().Add(-2*time.Hour))
	if err != nil || len(past) != 0 {
		t.Fatalf("Pending before the write: %+v, %v", past, err)
	}
	// A deletion's event too.
	mustWrite(t, s, &store.Write{Record: store.Record{Type: "Patient", ID: "a", Version: "2", Time: t0, Project: "p1", Deleted: true}, Prev: "1", Event: []byte("gone")})
	p = pending(t, s)
	got := map[string]string{}
	for _, e := range p {
		got[e.ID] = string(e.Event)
	}
	if len(p) != 2 || got[store.OutboxID("Patient", "a", "2")] != "gone" {
		t.Fatalf("Pending after delete: %+v", p)
	}
	if err := s.ClearOutbox(ctx, []string{store.OutboxID("Patient", "a", "1"), "no/such/event"}); err != nil {
		t.Fatalf("ClearOutbox: %v", err)
	}
	p = pending(t, s)
	if len(p) != 1 || p[0].ID != store.OutboxID("Patient", "a", "2") {
		t.Fatalf("Pending after clear: %+v", p)
	}
	if err := s.ClearOutbox(ctx, []string{p[0].ID}); err != nil {
		t.Fatalf("ClearOutbox: %v", err)
	}
	if p := pending(t, s); len(p) != 0 {
		t.Fatalf("Pending after clearing all: %+v", p)
	}
}

// A purge removes resources as though never written, and only them: no
// version, search value or event of theirs remains, their ids are free,

func testClaims(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	if o, err := s.ClaimOwner(ctx, "k"); err != nil || o != "" {
		t.Fatalf("ClaimOwner of a free key: %q, %v", o, err)
	}
	if w, err := s.Claim(ctx, "k", "alice"); err != nil || w != "alice" {
		t.Fatalf("first Claim: %q, %v", w, err)
	}
	if w, err := s.Claim(ctx, "k", "bob"); err != nil || w != "alice" {
		t.Fatalf("second Claim: %q, %v", w, err)
	}
	if w, err := s.Claim(ctx, "k", "alice"); err != nil || w != "alice" {
		t.Fatalf("Claim again by the winner: %q, %v", w, err)
	}
	if w, err := s.Claim(ctx, "other", "bob"); err != nil || w != "bob" {
		t.Fatalf("Claim of another key: %q, %v", w, err)
	}
	if err := s.Release(ctx, "k", "bob"); err != nil {
		t.Fatalf("Release by a loser: %v", err)
	}
	if o, err := s.ClaimOwner(ctx, "k"); err != nil || o != "alice" {
		t.Fatalf("owner after a loser's release: %q, %v", o, err)
	}
	if err := s.Release(ctx, "k", "alice"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if o, err := s.ClaimOwner(ctx, "k"); err != nil || o != "" {
		t.Fatalf("owner after release: %q, %v", o, err)
	}
	if w, err := s.Claim(ctx, "k", "bob"); err != nil || w != "bob" {
		t.Fatalf("Claim after release: %q, %v", w, err)
	}
	if o, err := s.ClaimOwner(ctx, "other"); err != nil || o != "bob" {
		t.Fatalf("other key: %q, %v", o, err)
	}
}

func testSecrets(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	v1 := []byte("one\x00\xff")
	v2 := []byte("two")
	_, err := s.Secret(ctx, "k")
	wantErr(t, "Secret absent", err, store.ErrNotFound)
	wantErr(t, "SwapSecret from a value on an absent key", s.SwapSecret(ctx, "k", v1, v2), store.ErrNotFound)
	if err := s.SwapSecret(ctx, "k", nil, v1); err != nil {
		t.Fatalf("SwapSecret create: %v", err)
	}
	wantErr(t, "SwapSecret create again", s.SwapSecret(ctx, "k", nil, v2), store.ErrExists)
	secretIs(t, s, "k", v1)
	wantErr(t, "SwapSecret from a wrong value", s.SwapSecret(ctx, "k", []byte("one"), v2), store.ErrConflict)
	secretIs(t, s, "k", v1)
	if err := s.SwapSecret(ctx, "k", v1, v2); err != nil {
		t.Fatalf("SwapSecret: %v", err)
	}
	secretIs(t, s, "k", v2)
	wantErr(t, "SwapSecret from the old value", s.SwapSecret(ctx, "k", v1, v2), store.ErrConflict)
	if err := s.SwapSecret(ctx, "k", v2, nil); err != nil {
		t.Fatalf("SwapSecret delete: %v", err)
	}
	_, err = s.Secret(ctx, "k")
	wantErr(t, "Secret after delete", err, store.ErrNotFound)

	if err := s.SetSecret(ctx, "s", v1); err != nil {
		t.Fatalf("SetSecret: %v", err)
	}
	secretIs(t, s, "s", v1)
	if err := s.SetSecret(ctx, "s", v2); err != nil {
		t.Fatalf("SetSecret overwrite: %v", err)
	}
	secretIs(t, s, "s", v2)
	_, err = s.Secret(ctx, "k")
	wantErr(t, "keys are apart", err, store.ErrNotFound)
	if err := s.SetSecret(ctx, "s", nil); err != nil {
		t.Fatalf("SetSecret nil: %v", err)
	}
	_, err = s.Secret(ctx, "s")
	wantErr(t, "Secret after SetSecret nil", err, store.ErrNotFound)
	if err := s.SetSecret(ctx, "s", nil); err != nil {
		t.Fatalf("SetSecret nil on an absent key: %v", err)
	}
}

func secretIs(t *testing.T, s store.Store, key string, want []byte) {
	t.Helper()
	got, err := s.Secret(ctxOf(t), key)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Secret %s: %q, %v; want %q", key, got, err, want)
	}
}
