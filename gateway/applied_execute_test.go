package gateway

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/session"
)

// A bot run tells the bot service the memberships revision this gateway's
// view has applied, so the bot acts with its membership's rights as this
// gateway last saw them (botexec keeps the entries); a caller cannot name
// the revision itself.
func TestExecuteNamesTheAppliedRevision(t *testing.T) {
	s := startBearerStack(t)
	svc, err := micro.AddService(s.nc, micro.Config{Name: "applied-execute", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	_ = svc.AddEndpoint("execute", micro.HandlerFunc(func(r micro.Request) {
		req, _ := bus.DecodeRequest(natsHeader(r), r.Data())
		b, _ := json.Marshal(map[string]string{"applied": req.Get(session.AppliedHeader)})
		_ = r.Respond(b, micro.WithHeaders(micro.Headers(bus.EncodeResponse(&bus.Response{Status: 200}))))
	}), micro.WithEndpointSubject(bus.SubjectOf("POST", "/fhir/R4/Bot/:id/$execute")))

	ctx := context.Background()
	tok, _ := s.access(t, s.login(t, "u-exec"), time.Hour)
	rev, err := s.sessions.PutMembership(ctx, "m-bot", session.Membership{Project: "p1", Profile: "Bot/b1", Active: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.view.WaitApplied(ctx, session.MembershipsBucket, rev); err != nil {
		t.Fatal(err)
	}
	h := map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json", session.AppliedHeader: "99999999"}
	st, m, _ := send(t, "POST", s.url+"fhir/R4/Bot/b1/$execute", []byte(`{}`), h)
	if st != 200 {
		t.Fatalf("status %d: %v", st, m)
	}
	got, err := strconv.ParseUint(m["applied"].(string), 10, 64)
	if err != nil {
		t.Fatalf("applied %q: %v", m["applied"], err)
	}
	if want := s.view.Applied(session.MembershipsBucket); got != want || got < rev {
		t.Fatalf("the gateway named %d, want its view's %d (at least the write's %d)", got, want, rev)
	}
}
