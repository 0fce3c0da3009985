package gateway

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/session"
)

// A token request tells identity the memberships revision this gateway's
// view has applied, so identity refuses a client this gateway already
// knows to be removed; a caller cannot name the revision itself.
func TestTokenRequestNamesTheAppliedRevision(t *testing.T) {
	base, nc := startGatewayWith(t, Config{RequestTimeout: 2 * time.Second})
	svc, err := micro.AddService(nc, micro.Config{Name: "applied", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	_ = svc.AddEndpoint("token", micro.HandlerFunc(func(r micro.Request) {
		req, _ := bus.DecodeRequest(natsHeader(r), r.Data())
		b, _ := json.Marshal(map[string]string{"applied": req.Get(session.AppliedHeader)})
		_ = r.Respond(b, micro.WithHeaders(micro.Headers(bus.EncodeResponse(&bus.Response{Status: 200}))))
	}), micro.WithEndpointSubject(bus.SubjectOf("POST", "/oauth2/token")))
	applied := func() uint64 {
		h := map[string]string{"Content-Type": "application/x-www-form-urlencoded", session.AppliedHeader: "99999999"}
		st, m, _ := post(t, base+"oauth2/token", []byte("grant_type=client_credentials"), h)
		if st != 200 {
			t.Fatalf("status %d: %v", st, m)
		}
		rev, err := strconv.ParseUint(m["applied"].(string), 10, 64)
		if err != nil {
			t.Fatalf("applied %q: %v", m["applied"], err)
		}
		return rev
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sessions, err := session.Open(ctx, js, session.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := sessions.PutMembership(ctx, "m1", session.Membership{Project: "p1", Active: true})
	if err != nil {
		t.Fatal(err)
	}
	// The view applies the write a moment later; until then it names less.
	for deadline := time.Now().Add(5 * time.Second); ; {
		got := applied()
		if got > rev {
			t.Fatalf("the gateway named %d, past the bucket's %d: the caller's header counted", got, rev)
		}
		if got == rev {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway still names %d, want %d", got, rev)
		}
	}
}
