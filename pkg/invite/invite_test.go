package invite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/saga"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// openStore opens the invite records and the step stream on a fresh NATS
// server.
func openStore(t *testing.T) (*Store, *testenv.Env) {
	t.Helper()
	env := testenv.New(t)
	s, err := Open(context.Background(), env.JS)
	if err != nil {
		t.Fatal(err)
	}
	return s, env
}

func pendingRecord(id string) *Record {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return &Record{
		ID: id,
		Request: Request{ProjectID: "p1", ProjectName: "Clinic", ResourceType: "Practitioner", FirstName: "Ada", LastName: "Lovelace",
			Email: "ada@example.com", SendEmail: true, Membership: map[string]any{"admin": true}, InvitedBy: "Practitioner/1"},
		Status:  "pending",
		Steps:   map[string]StepState{StepUser: {State: "pending"}},
		Created: now, Updated: now,
	}
}

// A record is read back as it was stored, and an id is taken once.
func TestRecordRoundTrip(t *testing.T) {
	t.Parallel() // each test has its own NATS server
	s, _ := openStore(t)
	ctx := context.Background()
	want := pendingRecord("inv-1")
	if err := s.Create(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "inv-1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, want)
	}
	if err := s.Create(ctx, pendingRecord("inv-1")); err == nil {
		t.Error("a second record under one id was stored")
	}
	if _, err := s.Get(ctx, "inv-none"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a missing record: %v, want ErrKeyNotFound", err)
	}
}

// Update applies its change to the record as it is at the time, so
// concurrent updates are all kept; a change that fails is not stored.
func TestUpdate(t *testing.T) {
	t.Parallel() // each test has its own NATS server
	s, _ := openStore(t)
	ctx := context.Background()
	if err := s.Create(ctx, pendingRecord("inv-2")); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := s.Update(ctx, "inv-2", func(r *Record) error {
				r.Steps[fmt.Sprint("step-", i)] = StepState{State: "done"}
				return nil
			})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Get(ctx, "inv-2")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if r.Steps[fmt.Sprint("step-", i)].State != "done" {
			t.Errorf("step-%d lost: %v", i, r.Steps)
		}
	}
	if !r.Updated.After(r.Created) {
		t.Errorf("updated %v, not after created %v", r.Updated, r.Created)
	}

	refused := errors.New("no")
	if _, err := s.Update(ctx, "inv-2", func(r *Record) error { r.Status = "done"; return refused }); !errors.Is(err, refused) {
		t.Errorf("a failing change returned %v", err)
	}
	if r, _ := s.Get(ctx, "inv-2"); r.Status != "pending" {
		t.Errorf("a failing change was stored: status %q", r.Status)
	}
	if _, err := s.Update(ctx, "inv-none", func(*Record) error { return nil }); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("updating a missing record: %v", err)
	}
}

// Save stores a step's change at the revision the step read, and when
// someone changed the record since, applies the change to theirs instead
// of overwriting it.
func TestSave(t *testing.T) {
	t.Parallel() // each test has its own NATS server
	s, _ := openStore(t)
	ctx := context.Background()
	if err := s.Create(ctx, pendingRecord("inv-s")); err != nil {
		t.Fatal(err)
	}
	_, rec, _, err := s.Load(ctx, []byte(`{"invite":"inv-s"}`))
	if err != nil {
		t.Fatal(err)
	}
	saved, err := s.Save(ctx, rec, func(r *Record) error { r.UserID = "u-1"; return nil })
	if err != nil || saved.UserID != "u-1" {
		t.Fatalf("save: %+v, %v", saved, err)
	}
	// A step holding the record as it read it, while another writes it.
	if _, err := s.Update(ctx, "inv-s", func(r *Record) error { MarkStep(r, StepEmail, "done", ""); return nil }); err != nil {
		t.Fatal(err)
	}
	applied := 0
	saved, err = s.Save(ctx, saved, func(r *Record) error { applied++; r.ProfileRef = "Practitioner/p-1"; return nil })
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "inv-s")
	if err != nil {
		t.Fatal(err)
	}
	if got.UserID != "u-1" || got.ProfileRef != "Practitioner/p-1" || got.Steps[StepEmail].State != "done" || applied != 2 {
		t.Errorf("record %+v after %d applications; want every change kept, the stale one applied again", got, applied)
	}
	if !reflect.DeepEqual(saved, got) {
		t.Errorf("saved %+v\nstored %+v", saved, got)
	}
}

// The end of an invite is announced with its outcome and nothing of the
// request; an announcement without one says only that it ended.
func TestAnnounce(t *testing.T) {
	t.Parallel() // each test has its own NATS server
	env := testenv.New(t)
	sub, err := env.NC.SubscribeSync(DoneSubject("inv-a"))
	if err != nil {
		t.Fatal(err)
	}
	rec := pendingRecord("inv-a")
	rec.Request.PasswordHash = "$argon2id$secret"
	rec.Status, rec.Failure = "failed", NewFailure(fhir.BadRequest("Bad e-mail", "email"))
	Announce(env.NC, "inv-a", rec)
	Announce(env.NC, "inv-a", nil)
	m, err := sub.NextMsg(testenv.WaitLimit)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(m.Data), "argon2id") || strings.Contains(string(m.Data), "ada@example.com") {
		t.Errorf("the announcement carries the request: %s", m.Data)
	}
	got := Announced(m.Data)
	if got == nil || got.ID != "inv-a" || got.Status != "failed" || !reflect.DeepEqual(got.Failure.Err(), fhir.BadRequest("Bad e-mail", "email")) {
		t.Errorf("announced %+v", got)
	}
	if m, err = sub.NextMsg(testenv.WaitLimit); err != nil {
		t.Fatal(err)
	}
	if got := Announced(m.Data); got != nil {
		t.Errorf("an announcement without an outcome read as %+v", got)
	}
}

// MarkStep counts the attempts that ended (not a step marked pending again).
func TestMarkStep(t *testing.T) {
	t.Parallel() // no server, no global
	r := pendingRecord("inv-3")
	MarkStep(r, StepUser, "failed", "timeout")
	MarkStep(r, StepUser, "pending", "")
	MarkStep(r, StepUser, "done", "")
	st := r.Steps[StepUser]
	if st.State != "done" || st.Error != "" || st.Attempts != 2 || st.At.IsZero() {
		t.Errorf("step %+v, want done after 2 attempts, the error cleared", st)
	}
}

// Next publishes a step once per invite and subject, however often it is
// called (a step redelivered after a crash calls it again).
func TestNextIsIdempotent(t *testing.T) {
	t.Parallel() // each test has its own NATS server
	s, env := openStore(t)
	ctx := context.Background()
	for range 3 {
		if err := s.Next(ctx, SubjProfile, Message{InviteID: "inv-4"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Next(ctx, SubjMembership, Message{InviteID: "inv-4"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Next(ctx, SubjProfile, Message{InviteID: "inv-5"}); err != nil {
		t.Fatal(err)
	}
	st, err := env.JS.Stream(ctx, saga.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(anyStep))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{SubjProfile: 2, SubjMembership: 1}
	if !reflect.DeepEqual(info.State.Subjects, want) {
		t.Errorf("steps by subject %v, want %v", info.State.Subjects, want)
	}
	m, err := st.GetLastMsgForSubject(ctx, SubjMembership)
	if err != nil {
		t.Fatal(err)
	}
	var got Message
	if err := json.Unmarshal(m.Data, &got); err != nil || got.InviteID != "inv-4" {
		t.Errorf("message %s (%v)", m.Data, err)
	}
}

// anyStep matches every invite step.
const anyStep = saga.SubjectPrefix + "invite.>"

// Load reads a step's invite, says whether it has ended, and refuses a
// message it cannot read as a permanent failure.
func TestLoad(t *testing.T) {
	t.Parallel() // each test has its own NATS server
	s, _ := openStore(t)
	ctx := context.Background()
	for id, status := range map[string]string{"inv-p": "pending", "inv-d": "done", "inv-f": "failed"} {
		r := pendingRecord(id)
		r.Status = status
		if err := s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ id, status string }{{"inv-p", "pending"}, {"inv-d", "done"}, {"inv-f", "failed"}} {
		m, rec, pending, err := s.Load(ctx, []byte(`{"invite":"`+tc.id+`"}`))
		if err != nil {
			t.Fatalf("%s: %v", tc.id, err)
		}
		if m.InviteID != tc.id || rec.ID != tc.id || pending != (tc.status == "pending") {
			t.Errorf("%s: message %+v, record %s, pending %v", tc.id, m, rec.ID, pending)
		}
	}
	_, _, _, err := s.Load(ctx, []byte(`{"invite":`))
	if err == nil || reflect.TypeOf(err) != reflect.TypeOf(saga.Permanent(nil)) {
		t.Errorf("an unreadable message: %v (%T), want a permanent failure", err, err)
	}
	if _, _, _, err := s.Load(ctx, []byte(`{"invite":"inv-none"}`)); err == nil {
		t.Error("a message of a missing invite loaded")
	}
}

// Fail ends a pending invite with its step's error (a *fhir.Error kept
// whole, anything else a 500) and tells whoever waits; an
// invite that has already ended keeps its outcome.
func TestFail(t *testing.T) {
	t.Parallel() // each test has its own NATS server
	s, env := openStore(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cases := []struct {
		name, id, status string
		cause            error
		want             *fhir.Error // the answer the failure gives, whole
	}{
		{"a refusal", "inv-409", "pending", fmt.Errorf("membership step: %w", fhir.Conflict("Already a member")), fhir.Conflict("Already a member")},
		{"a refusal naming its field", "inv-400", "pending", saga.Permanent(fhir.BadRequest("Bad e-mail", "email")), fhir.BadRequest("Bad e-mail", "email")},
		{"a busy service, with its Retry-After", "inv-503", "pending", fhir.Busy("Busy"), fhir.Busy("Busy")},
		{"an internal error", "inv-500", "pending", errors.New("disk on fire"), fhir.Internal()},
		{"an invite already done", "inv-done", "done", fhir.Conflict("late"), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := pendingRecord(tc.id)
			r.Status = tc.status
			if err := s.Create(ctx, r); err != nil {
				t.Fatal(err)
			}
			done := make(chan *nats.Msg, 1)
			sub, err := env.NC.ChanSubscribe(DoneSubject(tc.id), done)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := env.NC.Flush(); err != nil {
				t.Fatal(err)
			}
			Fail(ctx, s, env.NC, []byte(`{"invite":"`+tc.id+`"}`), StepMembership, tc.cause, log)
			select {
			case <-done:
			case <-time.After(testenv.WaitLimit):
				t.Fatal("the end was not announced")
			}
			got, err := s.Get(ctx, tc.id)
			if err != nil {
				t.Fatal(err)
			}
			if st := got.Steps[StepMembership]; st.State != "failed" || st.Error != tc.cause.Error() {
				t.Errorf("step %+v, want failed with %q", st, tc.cause)
			}
			wantStatus := "failed"
			if tc.want == nil {
				wantStatus = tc.status
			}
			if got.Status != wantStatus || (got.Failure == nil) != (tc.want == nil) {
				t.Fatalf("status %q, failure %+v; want %q, %+v", got.Status, got.Failure, wantStatus, tc.want)
			}
			if tc.want != nil && !reflect.DeepEqual(got.Failure.Err(), tc.want) {
				t.Errorf("failure answers %+v, want %+v", got.Failure.Err(), tc.want)
			}
		})
	}
}
