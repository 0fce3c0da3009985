package session

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
)

// watchCounted starts a cache over a fresh bucket and counts its reads of
// the bucket.
func watchCounted(t *testing.T, js jetstream.JetStream, s *Store) (*MemberCache, *atomic.Int64) {
	t.Helper()
	c, err := WatchMembers(context.Background(), js, s, 100)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	var n atomic.Int64
	read := c.read
	c.read = func(ctx context.Context, id string) (*Membership, error) {
		n.Add(1)
		return read(ctx, id)
	}
	return c, &n
}

// An entry is kept between requests, and is as fresh as the revision the
// gateway names: every write the gateway had applied is seen by the next
// request, however soon it follows.
func TestMembersFollowTheGateway(t *testing.T) {
	js, s := openWithJS(t, Config{})
	ctx := context.Background()
	c, reads := watchCounted(t, js, s)
	id := uuid.NewString()
	rev, err := s.PutMembership(ctx, id, Membership{Project: "p1", Profile: "Bot/b1", Active: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if m, err := c.Get(ctx, id, rev); err != nil || !m.Active {
			t.Fatalf("%+v %v, want active", m, err)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("five requests read the bucket %d times, want once", n)
	}

	// Each write is followed at once by a request naming it.
	if rev, err = s.PutMembership(ctx, id, Membership{Project: "p1", Profile: "Bot/b1", Active: true, AccessPolicy: true}); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Get(ctx, id, rev); err != nil || !m.AccessPolicy {
		t.Fatalf("%+v %v, want the new access policy", m, err)
	}
	if rev, err = s.PutMembership(ctx, id, Membership{Project: "p1", Profile: "Bot/b1", Active: false}); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Get(ctx, id, rev); err != nil || m.Active {
		t.Fatalf("%+v %v, want inactive", m, err)
	}
	if rev, err = s.DeleteMembership(ctx, id); err != nil {
		t.Fatal(err)
	}
	before := reads.Load()
	for range 2 {
		if m, err := c.Get(ctx, id, rev); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%+v %v, want no entry", m, err)
		}
	}
	if reads.Load() != before+1 {
		t.Fatal("the absence of an entry was not kept")
	}

	// Without a revision (a subscription's run) the bucket is read.
	if _, err := s.PutMembership(ctx, id, Membership{Project: "p1", Active: true}); err != nil {
		t.Fatal(err)
	}
	before = reads.Load()
	if m, err := c.Get(ctx, id, 0); err != nil || !m.Active {
		t.Fatalf("%+v %v, want active", m, err)
	}
	if reads.Load() != before+1 {
		t.Fatal("a request without a revision did not read the bucket")
	}
	// A revision the copy never reaches is read from the bucket too.
	if m, err := c.Get(ctx, id, 1<<62); err != nil || !m.Active {
		t.Fatalf("%+v %v, want active", m, err)
	}
}

// A watch that starts after the newest write's message is gone (a removed
// membership's marker purged) still counts the bucket's revision as
// applied: a gateway that saw that write names it, and requests must not
// wait for a message that will never come.
func TestMembersStartAtTheBucketsRevision(t *testing.T) {
	js, s := openWithJS(t, Config{})
	ctx := context.Background()
	kept := uuid.NewString()
	if _, err := s.PutMembership(ctx, kept, Membership{Project: "p1", Profile: "Bot/b1", Active: true}); err != nil {
		t.Fatal(err)
	}
	gone := uuid.NewString()
	if _, err := s.PutMembership(ctx, gone, Membership{Project: "p1", Active: true}); err != nil {
		t.Fatal(err)
	}
	rev, err := s.DeleteMembership(ctx, gone)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, MembershipsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(-1)); err != nil {
		t.Fatal(err)
	}
	c, reads := watchCounted(t, js, s)
	start := time.Now()
	for range 3 {
		if m, err := c.Get(ctx, kept, rev); err != nil || !m.Active {
			t.Fatalf("%+v %v", m, err)
		}
	}
	if d := time.Since(start); d >= appliedWait {
		t.Errorf("three requests took %v: they waited for a revision the watch had already passed", d)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("three requests read the bucket %d times, want once", n)
	}
}

func TestAppliedRevision(t *testing.T) {
	for in, want := range map[string]uint64{"": 0, "42": 42, "-1": 0, "x": 0, "18446744073709551616": 0} {
		if got := AppliedRevision(in); got != want {
			t.Errorf("AppliedRevision(%q) = %d, want %d", in, got, want)
		}
	}
}
