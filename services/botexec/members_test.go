package botexec

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// A run forwarded by the gateway acts with the bot's membership as the
// gateway's view has it (the kept entry: session.MemberCache); a
// deactivation is refused (403) on the next run.
func TestRunAsKeepsTheBotsMembership(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	bm, err := session.WatchMembers(ctx, env.JS, env.Sessions, maxBotMemberships)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bm.Stop)
	s := New(Config{JS: env.JS}, env.NC, env.Repo, env.Sessions, nil)
	s.botMembers = bm
	b := &bot{ID: uuid.NewString(), Project: "p1"}
	mid := uuid.NewString()
	s.members.Add("p1|Bot/"+b.ID, mid) // the membership id, as its search finds it
	rev, err := env.Sessions.PutMembership(ctx, mid, session.Membership{Project: "p1", Profile: "Bot/" + b.ID, Active: true, AccessPolicy: true})
	if err != nil {
		t.Fatal(err)
	}
	caller := &bus.Principal{Profile: "Practitioner/1", Project: "p1"}
	r := &bus.Request{Header: map[string]string{session.AppliedHeader: strconv.FormatUint(rev, 10)}}
	for range 3 {
		p, err := s.runAs(ctx, b, caller, session.AppliedRevision(r.Get(session.AppliedHeader)))
		if err != nil || p.Membership != mid || !p.AccessPolicy || p.Profile != "Bot/"+b.ID {
			t.Fatalf("%+v %v", p, err)
		}
	}
	if rev, err = env.Sessions.PutMembership(ctx, mid, session.Membership{Project: "p1", Profile: "Bot/" + b.ID, Active: false}); err != nil {
		t.Fatal(err)
	}
	var fe *fhir.Error
	if _, err := s.runAs(ctx, b, caller, rev); !errors.As(err, &fe) || fe.Status != 403 {
		t.Fatalf("a deactivated bot's run: %v, want 403", err)
	}
}
