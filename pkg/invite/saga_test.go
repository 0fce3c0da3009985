package invite

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/saga"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// The map names each step once, with its own subject and consumer, and
// says what each does and what becomes of it.
func TestSagaIsAMap(t *testing.T) {
	names, subjects, consumers := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, st := range Saga {
		if names[st.Name] || subjects[st.Subject] || consumers[st.Consumer] {
			t.Errorf("step %q repeats a name, subject or consumer", st.Name)
		}
		names[st.Name], subjects[st.Subject], consumers[st.Consumer] = true, true, true
		if !strings.HasPrefix(st.Subject, saga.SubjectPrefix) || !strings.HasPrefix(st.Consumer, st.Service+"-") {
			t.Errorf("step %q: subject %q is not a saga step's, or consumer %q not its service's", st.Name, st.Subject, st.Consumer)
		}
		if st.Does == "" || st.Undo == "" {
			t.Errorf("step %q does not say what it does and what undoes it", st.Name)
		}
	}
	if got := len(NewRecord("x", Request{}, time.Now()).Steps); got != len(Saga) {
		t.Errorf("a new record lists %d steps, the saga has %d", got, len(Saga))
	}
}

// A new record has every step to do but those its request skips.
func TestNewRecord(t *testing.T) {
	now := time.Now().UTC()
	for _, tc := range []struct {
		name  string
		req   Request
		email string
	}{
		{"an e-mail to send", Request{Email: "a@example.com", SendEmail: true}, "pending"},
		{"sendEmail false", Request{Email: "a@example.com"}, "skipped"},
		{"no address", Request{ExternalID: "x", SendEmail: true}, "skipped"},
	} {
		rec := NewRecord("inv-1", tc.req, now)
		want := map[string]StepState{StepUser: {State: "pending"}, StepProfile: {State: "pending"},
			StepMembership: {State: "pending"}, StepEmail: {State: tc.email}}
		if rec.ID != "inv-1" || rec.Status != "pending" || !rec.Created.Equal(now) || !reflect.DeepEqual(rec.Steps, want) {
			t.Errorf("%s: %+v", tc.name, rec)
		}
	}
}

// Advance publishes the next step still to do, in the saga's order, and
// announces the end when none is left.
func TestAdvance(t *testing.T) {
	t.Parallel() // each test has its own NATS server
	s, env := openStore(t)
	ctx := context.Background()
	published := func(id string) []string {
		t.Helper()
		st, err := env.JS.Stream(ctx, saga.Stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(anyStep))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for subj := range info.State.Subjects {
			m, err := st.GetLastMsgForSubject(ctx, subj)
			if err == nil && strings.Contains(string(m.Data), `"`+id+`"`) {
				out = append(out, subj)
			}
		}
		return out
	}
	ended := make(chan *nats.Msg, 8)
	sub, err := env.NC.ChanSubscribe(DoneSubject("*"), ended)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := env.NC.Flush(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, id, after string
		done            []string // steps an earlier delivery did
		skipEmail       bool
		want            string // the subject published, "" for the end
	}{
		{"user, then profile", "a1", StepUser, nil, false, SubjProfile},
		{"profile, then membership", "a2", StepProfile, nil, false, SubjMembership},
		{"membership, then e-mail", "a3", StepMembership, nil, false, SubjEmail},
		{"membership, no e-mail: the end", "a4", StepMembership, nil, true, ""},
		{"e-mail: the end", "a5", StepEmail, nil, false, ""},
		{"a step done already is passed over", "a6", StepUser, []string{StepProfile}, false, SubjMembership},
	} {
		rec := NewRecord(tc.id, Request{Email: "a@example.com", SendEmail: !tc.skipEmail}, time.Now())
		for _, d := range tc.done {
			MarkStep(rec, d, "done", "")
		}
		if err := s.Advance(ctx, rec, tc.after); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := published(tc.id)
		if tc.want == "" {
			select {
			case m := <-ended:
				if m.Subject != DoneSubject(tc.id) || Announced(m.Data) == nil {
					t.Errorf("%s: announced %s %s", tc.name, m.Subject, m.Data)
				}
			case <-time.After(testenv.WaitLimit):
				t.Errorf("%s: the end was not announced", tc.name)
			}
			if len(got) != 0 {
				t.Errorf("%s: published %v after the last step", tc.name, got)
			}
			continue
		}
		if !reflect.DeepEqual(got, []string{tc.want}) {
			t.Errorf("%s: published %v, want %s", tc.name, got, tc.want)
		}
	}
}

// Run consumes the step's subject with its handler, and a step that fails
// for good fails its invite with the step's answer and tells whoever waits.
func TestRun(t *testing.T) {
	t.Parallel() // each test has its own NATS server
	s, env := openStore(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	refusal := fhir.BadRequest("E-mail already used", "email")
	stop, err := s.Run(ctx, StepUser, func(ctx context.Context, data []byte) error {
		return saga.Permanent(refusal)
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	rec := NewRecord("doomed", Request{}, time.Now().UTC())
	if err := s.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	done := make(chan *nats.Msg, 1)
	sub, err := env.NC.ChanSubscribe(DoneSubject(rec.ID), done)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := env.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Begin(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	var m *nats.Msg
	select {
	case m = <-done:
	case <-time.After(testenv.WaitLimit):
		t.Fatal("the end was not announced")
	}
	got, err := s.Get(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != "failed" || got.Failure == nil || !reflect.DeepEqual(got.Failure.Err(), refusal) || got.Steps[StepUser].State != "failed" {
		t.Fatalf("record %+v", got)
	}
	if ended := Announced(m.Data); ended == nil || ended.Status != "failed" || !reflect.DeepEqual(ended.Failure, got.Failure) {
		t.Errorf("announced %+v, want the failure", ended)
	}
}
