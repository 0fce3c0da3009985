package subscriptions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/subscription"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// An event that cannot be matched is tried again, later, and after
// maxMatchTries set aside: acknowledged (never delivered again), logged,
// and recorded for each subscription to its type.
func TestUnmatchableEventIsSetAside(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var logs bytes.Buffer
	audits := make(chan *resource.AuditEvent, 8)
	s := New(Config{JS: env.JS, Audit: func(_ string, ev *resource.AuditEvent) { audits <- ev },
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	cons, err := env.JS.CreateOrUpdateConsumer(ctx, testenv.ResourceStream, jetstream.ConsumerConfig{
		Durable: "set-aside", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := repo.Event{Project: "p1", Type: "Patient", ID: "pat1", VersionID: "v1", Op: subscription.Create}
	b, _ := json.Marshal(ev)
	if _, err := env.JS.Publish(ctx, bus.EventSubject("Patient", "create"), b); err != nil {
		t.Fatal(err)
	}
	parse := func(id, body string) *subscription.Subscription {
		sub, err := subscription.Parse(id, "p1", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return sub
	}
	subs := []*subscription.Subscription{
		parse("onPatients", `{"status":"active","criteria":"Patient","channel":{"type":"rest-hook","endpoint":"https://h.example/x"}}`),
		parse("onObservations", `{"status":"active","criteria":"Observation","channel":{"type":"rest-hook","endpoint":"https://h.example/x"}}`),
	}
	next := func(wait time.Duration) (jetstream.Msg, *jetstream.MsgMetadata) {
		t.Helper()
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			return m, md
		}
		return nil, nil
	}
	cause := errors.New("store unavailable")

	// The first failure: tried again a second later, nothing recorded.
	m, md := next(5 * time.Second)
	if m == nil {
		t.Fatal("no event")
	}
	s.unmatched(m, md, ev, subs, cause)
	if m, _ := next(300 * time.Millisecond); m != nil {
		t.Fatal("tried again at once")
	}
	m, md = next(5 * time.Second)
	if m == nil || md.NumDelivered != 2 {
		t.Fatalf("not tried again: %v", md)
	}
	if len(audits) != 0 {
		t.Fatal("a failure before the last try is recorded")
	}
	// Up to the last try, quickly (as if each had failed and waited).
	for md.NumDelivered < maxMatchTries {
		_ = m.Nak()
		if m, md = next(5 * time.Second); m == nil {
			t.Fatal("not delivered again")
		}
	}
	s.unmatched(m, md, ev, subs, cause)
	if m, _ := next(2 * time.Second); m != nil {
		t.Fatal("delivered again after it was set aside")
	}
	if len(audits) != 1 {
		t.Fatalf("%d AuditEvents, want one for the Patient subscription", len(audits))
	}
	a := <-audits
	desc := a.OutcomeDesc
	refs, _ := json.Marshal(a.Entity)
	if a.Outcome != "8" || !strings.Contains(desc, "Set aside after 5 tries") || !strings.Contains(desc, "store unavailable") ||
		!strings.Contains(string(refs), "Subscription/onPatients") || !strings.Contains(string(refs), "Patient/pat1") {
		t.Fatalf("AuditEvent %v", a)
	}
	if !strings.Contains(logs.String(), "set aside") || !strings.Contains(logs.String(), "project=p1") {
		t.Fatalf("log:\n%s", logs.String())
	}
}
