package botexec

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// countReads counts the bucket reads bm makes.
func countReads(bm *botMemberships) *atomic.Int64 {
	var n atomic.Int64
	read := bm.read
	bm.read = func(ctx context.Context, id string) (*session.Membership, error) {
		n.Add(1)
		return read(ctx, id)
	}
	return &n
}

// A bot's membership entry is kept between runs, and is as fresh as the
// revision the gateway names: every write the gateway had applied is seen
// by the next run, however soon it follows.
func TestBotMembershipsFollowTheGateway(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	bm, err := watchBotMemberships(ctx, env.JS, env.Sessions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bm.stop)
	id := uuid.NewString()
	reads := countReads(bm)
	rev, err := env.Sessions.PutMembership(ctx, id, session.Membership{Project: "p1", Profile: "Bot/b1", Active: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if m, err := bm.get(ctx, id, rev); err != nil || !m.Active {
			t.Fatalf("%+v %v, want active", m, err)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("five runs read the bucket %d times, want once", n)
	}

	// Each write is followed at once by a run naming it.
	if rev, err = env.Sessions.PutMembership(ctx, id, session.Membership{Project: "p1", Profile: "Bot/b1", Active: true, AccessPolicy: true}); err != nil {
		t.Fatal(err)
	}
	if m, err := bm.get(ctx, id, rev); err != nil || !m.AccessPolicy {
		t.Fatalf("%+v %v, want the new access policy", m, err)
	}
	if rev, err = env.Sessions.PutMembership(ctx, id, session.Membership{Project: "p1", Profile: "Bot/b1", Active: false}); err != nil {
		t.Fatal(err)
	}
	if m, err := bm.get(ctx, id, rev); err != nil || m.Active {
		t.Fatalf("%+v %v, want inactive", m, err)
	}
	if rev, err = env.Sessions.DeleteMembership(ctx, id); err != nil {
		t.Fatal(err)
	}
	if m, err := bm.get(ctx, id, rev); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("%+v %v, want no entry", m, err)
	}

	// Without a revision (a subscription's run) the bucket is read.
	if _, err := env.Sessions.PutMembership(ctx, id, session.Membership{Project: "p1", Active: true}); err != nil {
		t.Fatal(err)
	}
	before := reads.Load()
	if m, err := bm.get(ctx, id, 0); err != nil || !m.Active {
		t.Fatalf("%+v %v, want active", m, err)
	}
	if reads.Load() != before+1 {
		t.Fatal("a run without a revision did not read the bucket")
	}
	// A revision the copy never reaches is read from the bucket too.
	if m, err := bm.get(ctx, id, 1<<62); err != nil || !m.Active {
		t.Fatalf("%+v %v, want active", m, err)
	}
}

// A run forwarded by the gateway acts with the bot's membership as the
// gateway's view has it, without a read of the bucket per run; a
// deactivation is refused (403) on the next run.
func TestRunAsKeepsTheBotsMembership(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	bm, err := watchBotMemberships(ctx, env.JS, env.Sessions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bm.stop)
	s := New(Config{JS: env.JS}, env.NC, env.Repo, env.Sessions, nil)
	s.botMembers = bm
	b := &bot{ID: uuid.NewString(), Project: "p1"}
	mid := uuid.NewString()
	s.members.Add("p1|Bot/"+b.ID, mid) // the membership id, as its search finds it
	reads := countReads(bm)
	rev, err := env.Sessions.PutMembership(ctx, mid, session.Membership{Project: "p1", Profile: "Bot/" + b.ID, Active: true, AccessPolicy: true})
	if err != nil {
		t.Fatal(err)
	}
	caller := &bus.Principal{Profile: "Practitioner/1", Project: "p1"}
	r := &bus.Request{Header: map[string]string{session.AppliedHeader: strconv.FormatUint(rev, 10)}}
	for range 3 {
		p, err := s.runAs(ctx, b, caller, appliedRevision(r))
		if err != nil || p.Membership != mid || !p.AccessPolicy || p.Profile != "Bot/"+b.ID {
			t.Fatalf("%+v %v", p, err)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("three runs read the bucket %d times, want once", n)
	}
	if rev, err = env.Sessions.PutMembership(ctx, mid, session.Membership{Project: "p1", Profile: "Bot/" + b.ID, Active: false}); err != nil {
		t.Fatal(err)
	}
	var fe *fhir.Error
	if _, err := s.runAs(ctx, b, caller, rev); !errors.As(err, &fe) || fe.Status != 403 {
		t.Fatalf("a deactivated bot's run: %v, want 403", err)
	}
}

// A watch that starts after the newest write's message is gone (a removed
// membership's marker purged) still counts the bucket's revision as
// applied: a gateway that saw that write names it, and runs must not wait
// for a message that will never come.
func TestBotMembershipsStartAtTheBucketsRevision(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	kept := uuid.NewString()
	if _, err := env.Sessions.PutMembership(ctx, kept, session.Membership{Project: "p1", Profile: "Bot/b1", Active: true}); err != nil {
		t.Fatal(err)
	}
	gone := uuid.NewString()
	if _, err := env.Sessions.PutMembership(ctx, gone, session.Membership{Project: "p1", Active: true}); err != nil {
		t.Fatal(err)
	}
	rev, err := env.Sessions.DeleteMembership(ctx, gone)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := env.JS.KeyValue(ctx, session.MembershipsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(-1)); err != nil {
		t.Fatal(err)
	}
	bm, err := watchBotMemberships(ctx, env.JS, env.Sessions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bm.stop)
	reads := countReads(bm)
	start := time.Now()
	for range 3 {
		if m, err := bm.get(ctx, kept, rev); err != nil || !m.Active {
			t.Fatalf("%+v %v", m, err)
		}
	}
	if d := time.Since(start); d >= appliedWait {
		t.Errorf("three runs took %v: they waited for a revision the watch had already passed", d)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("three runs read the bucket %d times, want once", n)
	}
}
