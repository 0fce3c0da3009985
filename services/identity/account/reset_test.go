package account

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/mail"
	"github.com/pinion-health/pinion/pkg/saga"
	"github.com/pinion-health/pinion/services/identity/limits"
)

func TestFormEmail(t *testing.T) {
	cases := []struct {
		raw, email string
		ok         bool
	}{
		{"a@example.com", "a@example.com", true},
		{"  A@Example.COM \n", "a@example.com", true},
		{"alice", "alice", false},
		{" ", "", false},
		{"", "", false},
		// Pages and resets ask for an "@" only; an address that is no one's
		// finds no
		{"@", "@", true},
	}
	for _, tc := range cases {
		email, ok := FormEmail(tc.raw)
		if email != tc.email || ok != tc.ok {
			t.Errorf("FormEmail(%q) = %q %v, want %q %v", tc.raw, email, ok, tc.email, tc.ok)
		}
	}
}

// A reset mails a link to the user with the address, in its project for a
// project's own user; the link sets the password. An address without a
// user gets the same answer and no mail.
func TestResetPassword(t *testing.T) {
	ctx := context.Background()
	reset := func(email, project string) {
		t.Helper()
		resp, err := live.svc.ResetPassword(ctx, jsonRequest("10.4.0.1", map[string]any{"email": email, "projectId": project}))
		if err != nil || resp.Status != 200 || !strings.Contains(string(resp.Body), `"id":"ok"`) {
			t.Fatalf("%v %v", resp, err)
		}
	}
	p := newPerson(t, "reset")
	reset("  "+strings.ToUpper(p.email)+" ", "")
	m := mailTo(t, p.email)
	if m.Subject != "Pinion password reset" || !strings.HasPrefix(m.ID, "reset-") {
		t.Fatalf("mail %+v", m)
	}
	id, secret := linkIn(t, m.Text)
	resp, err := live.svc.SetPassword(ctx, jsonRequest("10.4.0.1", map[string]any{"id": id, "secret": secret, "password": "reset password"}))
	if err != nil || resp.Status != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	if got, err := live.svc.CheckPassword(ctx, p.email, "reset password", ""); got != p.userID || err != nil {
		t.Fatalf("the new password: %q %v", got, err)
	}

	nobody := newEmail("nobody")
	reset(nobody, "")
	if m, ok := lastMail(t); ok && m.To == nobody {
		t.Fatal("a mail to an address without a user")
	}

	project := newProject(t, "Reset scope")
	scoped := newEmail("scoped")
	newUser(t, scoped, "", project)
	reset(scoped, "")
	if m, ok := lastMail(t); ok && m.To == scoped {
		t.Fatal("a project's user was found without its project")
	}
	reset(scoped, project)
	mailTo(t, scoped)
}

// mailSeq is the saga stream's last sequence: mails queued after it are
// mailsTo's to count.
func mailSeq(t *testing.T) uint64 {
	t.Helper()
	st, err := live.conns.JS.Stream(context.Background(), saga.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// mailsTo counts the e-mails to an address queued after sequence from.
func mailsTo(t *testing.T, to string, from uint64) int {
	t.Helper()
	ctx := context.Background()
	st, err := live.conns.JS.Stream(ctx, saga.Stream)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for seq := from + 1; seq <= mailSeq(t); seq++ {
		raw, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var m mail.Message
		if raw.Subject == mail.Subject && json.Unmarshal(raw.Data, &m) == nil && m.To == to {
			n++
		}
	}
	return n
}

// A burst of resets for one address mails one link; the answer stays the
// same 200 for each. Later resets are mailed one a minute, a few an hour.
func TestResetThrottledPerRecipient(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "burst-reset")
	from := mailSeq(t)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			resp, err := live.svc.ResetPassword(ctx, jsonRequest("10.4.1.1", map[string]any{"email": p.email}))
			if err != nil || resp.Status != 200 || !strings.Contains(string(resp.Body), `"id":"ok"`) {
				t.Errorf("a throttled reset answers %v %v", resp, err)
			}
		})
	}
	wg.Wait()
	if n := mailsTo(t, p.email, from); n != 1 {
		t.Fatalf("%d e-mails for 20 resets at once, want 1", n)
	}
	// The link mailed still works: the throttled resets made none newer.
	id, secret := linkIn(t, mailTo(t, p.email).Text)
	if _, _, err := live.svc.CheckPasswordLink(ctx, id, secret); err != nil {
		t.Fatalf("the mailed link after throttled resets: %v", err)
	}

	// Over time: one a minute, at most maxResetsPerHour an hour.
	now := time.Now().Add(time.Hour) // past the burst's hour
	sent := 0
	for i := range 3 * maxResetsPerHour {
		at := now.Add(time.Duration(i) * resetGap / 2)
		ok, err := live.svc.TakeResetSlot(ctx, p.userID, at)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			sent++
		}
	}
	if sent != maxResetsPerHour {
		t.Fatalf("%d resets within %s, want %d", sent, 3*maxResetsPerHour*resetGap/2, maxResetsPerHour)
	}
}

// A reset does not spend a pending invitation's link: both work until one
// is used, and then the other is spent.
func TestResetKeepsInvitationLink(t *testing.T) {
	ctx := context.Background()
	invited := func(t *testing.T) (email, inviteID, inviteSecret string) {
		t.Helper()
		email = newEmail("invited")
		id, msg := newInvite(t, invite.Request{ProjectID: newProject(t, "Invites"), FirstName: "Grace", LastName: "Hopper",
			Email: email, SendEmail: true})
		if err := live.svc.InviteUser(ctx, msg); err != nil {
			t.Fatal(err)
		}
		finishInvite(t, id)
		inviteID, inviteSecret = linkIn(t, mailTo(t, email).Text)
		resp, err := live.svc.ResetPassword(ctx, jsonRequest("10.4.2.1", map[string]any{"email": email}))
		if err != nil || resp.Status != 200 {
			t.Fatalf("reset: %v %v", resp, err)
		}
		if _, _, err := live.svc.CheckPasswordLink(ctx, inviteID, inviteSecret); err != nil {
			t.Fatalf("the invitation's link after a reset: %v", err)
		}
		return email, inviteID, inviteSecret
	}
	setPassword := func(id, secret string) error {
		_, err := live.svc.SetPassword(ctx, jsonRequest("10.4.2.1", map[string]any{"id": id, "secret": secret, "password": "a new password"}))
		return err
	}

	t.Run("reset link used", func(t *testing.T) {
		email, inviteID, inviteSecret := invited(t)
		resetID, resetSecret := linkIn(t, mailTo(t, email).Text)
		if err := setPassword(resetID, resetSecret); err != nil {
			t.Fatalf("the reset link: %v", err)
		}
		expectOutcome(t, setPassword(inviteID, inviteSecret), 400, "Already used", "")
	})
	t.Run("invitation link used", func(t *testing.T) {
		email, inviteID, inviteSecret := invited(t)
		resetID, resetSecret := linkIn(t, mailTo(t, email).Text)
		if err := setPassword(inviteID, inviteSecret); err != nil {
			t.Fatalf("the invitation's link: %v", err)
		}
		expectOutcome(t, setPassword(resetID, resetSecret), 400, "Already used", "")
	})
}

// The reset throttle is a limits.Rule: narrowing its rule narrows it.
func TestResetThrottleFollowsItsRule(t *testing.T) {
	with := func(r limits.Rule) {
		old := resetRule
		resetRule = r
		t.Cleanup(func() { resetRule = old })
	}
	// Two an hour, however far apart: the third is throttled though it
	// comes long after resetGap.
	with(limits.Rule{Max: 2, Window: time.Hour, Gap: resetGap})
	p := newPerson(t, "shared-limit")
	at := time.Now()
	for i, want := range []bool{true, true, false} {
		ok, err := live.svc.TakeResetSlot(context.Background(), p.userID, at.Add(time.Duration(i)*10*resetGap))
		if err != nil || ok != want {
			t.Fatalf("reset %d: %v %v, want %v", i, ok, err, want)
		}
	}
	// And a gap the rule sets is kept.
	with(limits.Rule{Max: 100, Window: time.Hour, Gap: 30 * time.Minute})
	q := newPerson(t, "shared-gap")
	for i, want := range []bool{true, false} {
		ok, err := live.svc.TakeResetSlot(context.Background(), q.userID, at.Add(time.Duration(i)*20*time.Minute))
		if err != nil || ok != want {
			t.Fatalf("gap reset %d: %v %v, want %v", i, ok, err, want)
		}
	}
}
