package mail

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// courierEnv is a courier writing .eml files, over real NATS.
type courierEnv struct {
	courier *Courier
	invites *invite.Store
	dir     string
	env     *testenv.Env
}

func newCourierEnv(t *testing.T) *courierEnv {
	t.Helper()
	env := testenv.New(t)
	invites, err := invite.Open(context.Background(), env.JS)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	return &courierEnv{courier: NewCourier(Files{Dir: dir}, invites, nil), invites: invites, dir: dir, env: env}
}

// pendingInvite records an invite whose e-mail is still to send.
func (e *courierEnv) pendingInvite(t *testing.T, email string) *invite.Record {
	t.Helper()
	now := time.Now().UTC()
	rec := &invite.Record{ID: uuid.NewString(), Status: "pending", Created: now, Updated: now,
		Request: invite.Request{ProjectID: "p-1", ProjectName: "Clinic", Email: email, SendEmail: true},
		Steps:   map[string]invite.StepState{invite.StepEmail: {State: "pending"}}}
	if err := e.invites.Create(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

func (e *courierEnv) readMail(t *testing.T, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, id+".eml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCourierSends(t *testing.T) {
	e := newCourierEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Run("an invitation", func(t *testing.T) {
		rec := e.pendingInvite(t, "mail@example.com")
		m := Message{ID: "invite-" + rec.ID, To: "mail@example.com", Subject: "Hello", Text: "Body text\n", InviteID: rec.ID}
		b, _ := json.Marshal(m)
		if err := e.courier.send(ctx, b); err != nil {
			t.Fatal(err)
		}
		if eml := e.readMail(t, m.ID); !strings.Contains(eml, "Subject: Hello") || !strings.Contains(eml, "Body text") {
			t.Errorf("e-mail:\n%s", eml)
		}
		got, _ := e.invites.Get(ctx, rec.ID)
		if st := got.Steps[invite.StepEmail]; st.State != "done" || st.Attempts != 1 || st.Error != "" {
			t.Errorf("e-mail step %+v", st)
		}
	})

	t.Run("a failure is recorded and retried", func(t *testing.T) {
		rec := e.pendingInvite(t, "not an address")
		m := Message{ID: "invite-" + rec.ID, To: "not an address", Subject: "Hello", Text: "x", InviteID: rec.ID}
		b, _ := json.Marshal(m)
		for attempt := 1; attempt <= 2; attempt++ {
			err := e.courier.send(ctx, b)
			if err == nil || !strings.Contains(err.Error(), `recipient "not an address"`) {
				t.Fatalf("attempt %d: %v", attempt, err)
			}
			got, _ := e.invites.Get(ctx, rec.ID)
			if st := got.Steps[invite.StepEmail]; st.State != "pending" || st.Attempts != attempt || st.Error != err.Error() {
				t.Errorf("attempt %d: e-mail step %+v", attempt, st)
			}
		}
		if _, err := os.Stat(filepath.Join(e.dir, m.ID+".eml")); !os.IsNotExist(err) {
			t.Errorf("a file for a message that failed: %v", err)
		}
		// After the last retry.
		e.courier.dropped(ctx, b, errors.New("gave up"))
		got, _ := e.invites.Get(ctx, rec.ID)
		if st := got.Steps[invite.StepEmail]; st.State != "failed" || st.Attempts != 3 || st.Error != "gave up" {
			t.Errorf("e-mail step %+v", st)
		}
		if got.Status != "pending" {
			t.Errorf("a lost e-mail failed the invite: %s", got.Status)
		}
	})

	t.Run("not of an invite", func(t *testing.T) {
		m := Message{ID: "reset-" + uuid.NewString(), To: "reset@example.com", Subject: "Reset", Text: "x"}
		b, _ := json.Marshal(m)
		if err := e.courier.send(ctx, b); err != nil {
			t.Fatal(err)
		}
		e.readMail(t, m.ID)
		e.courier.dropped(ctx, b, errors.New("gave up")) // nothing to record
	})

	t.Run("not a message", func(t *testing.T) {
		if err := e.courier.send(ctx, []byte(`{"to":`)); err == nil {
			t.Error("a message that cannot be read was sent")
		}
		e.courier.dropped(ctx, []byte(`{"to":`), errors.New("gave up"))
	})
}

// What any service queues, the courier sends.
func TestQueueIsSentByTheCourier(t *testing.T) {
	e := newCourierEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stop, err := e.courier.Consume(ctx, e.env.JS)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	m := Message{ID: "reset-" + uuid.NewString(), To: "queued@example.com", Subject: "Reset your password", Text: "x"}
	if err := Queue(ctx, e.env.JS, m); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.dir, m.ID+".eml")
	testenv.Eventually(t, "the queued e-mail to be sent", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
	if eml := e.readMail(t, m.ID); !strings.Contains(eml, "Subject: Reset your password") {
		t.Errorf("e-mail:\n%s", eml)
	}
}
