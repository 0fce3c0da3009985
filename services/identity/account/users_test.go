package account

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/saga"
	"github.com/pinion-health/pinion/services/identity/internal/testkit"
)

func TestPasswordRequestUsable(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	const id, secret = "r1", "link-secret"
	fresh := passwordRequest{ID: id, User: "u1", Type: "reset", Digest: auth.SecretDigest(secret), Expires: now.Add(time.Hour)}
	cases := []struct {
		name           string
		edit           func(*passwordRequest)
		latest, secret string
		at             time.Time
		text           string
	}{
		{name: "fresh", latest: id, secret: secret, at: now},
		{name: "at its expiry", latest: id, secret: secret, at: now.Add(time.Hour)},
		{name: "used", edit: func(pr *passwordRequest) { pr.Used = true }, latest: id, secret: secret, at: now, text: "Already used"},
		{name: "a newer one was sent", latest: "r2", secret: secret, at: now, text: "Already used"},
		{name: "no newest recorded", latest: "", secret: secret, at: now, text: "Already used"},
		{name: "expired", latest: id, secret: secret, at: now.Add(time.Hour + time.Nanosecond), text: "Request expired"},
		{name: "wrong secret", latest: id, secret: "guess", at: now, text: "Incorrect secret"},
		{name: "no secret", latest: id, secret: "", at: now, text: "Incorrect secret"},
		{name: "used and expired: used", edit: func(pr *passwordRequest) { pr.Used = true }, latest: id, secret: secret,
			at: now.Add(2 * time.Hour), text: "Already used"},
		{name: "expired and wrong: expired", latest: id, secret: "guess", at: now.Add(2 * time.Hour), text: "Request expired"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pr := fresh
			if tc.edit != nil {
				tc.edit(&pr)
			}
			err := pr.usable(id, tc.latest, tc.secret, tc.at)
			if tc.text == "" {
				expectOutcome(t, err, 0, "", "")
				return
			}
			expectOutcome(t, err, 400, tc.text, "")
		})
	}
}

func newInvite(t *testing.T, req invite.Request) (id string, msg []byte) {
	t.Helper()
	return testkit.Invite(t, live.svc.Invites(), req)
}

// nextStep is the step message the user step sent on for an invite.
func nextStep(t *testing.T, inviteID string) invite.Message {
	t.Helper()
	ctx := context.Background()
	st, err := live.conns.JS.Stream(ctx, saga.Stream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetLastMsgForSubject(ctx, invite.SubjProfile)
	if err != nil {
		t.Fatal(err)
	}
	var m invite.Message
	if err := json.Unmarshal(raw.Data, &m); err != nil || m.InviteID != inviteID {
		t.Fatalf("next step %+v %v, want invite %s", m, err, inviteID)
	}
	return m
}

// The invite saga's user step: a new person gets a User (with the
// password given, or a link to set one), an e-mail already in use reuses
// its user, and a redelivered step does its work once.
func TestInviteUser(t *testing.T) {
	ctx := context.Background()
	project := newProject(t, "Invites")
	email := newEmail("invitee")
	id, msg := newInvite(t, invite.Request{ProjectID: project, FirstName: "Grace", LastName: "Hopper", Email: email,
		SendEmail: true, PasswordHash: mustHash(t, "initial password")})
	if err := live.svc.InviteUser(ctx, msg); err != nil {
		t.Fatal(err)
	}
	rec, err := live.svc.Invites().Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	userID := uuid.NewSHA1(IDNamespace, []byte("invite-user:"+id)).String()
	if rec.UserID != userID || !rec.NewUser || rec.Steps[invite.StepUser].State != "done" {
		t.Fatalf("record %+v", rec)
	}
	user, err := live.conns.Repo.Read(ctx, repo.AllProjects, "User", userID)
	if err != nil {
		t.Fatal(err)
	}
	if doc, _ := user.Decode(); doc["email"] != email || doc["firstName"] != "Grace" || doc["lastName"] != "Hopper" || doc["project"] != nil {
		t.Fatalf("user %v", doc)
	}
	if owner, _ := live.conns.Repo.ClaimOwner(ctx, repo.UserEmailKey("", email)); owner != userID {
		t.Fatalf("the e-mail is %q's, want %s", owner, userID)
	}
	if got, err := live.svc.CheckPassword(ctx, email, "initial password", ""); got != userID || err != nil {
		t.Fatalf("the initial password: %q %v", got, err)
	}
	nextStep(t, id)
	// The link comes with the e-mail, once the invite has succeeded.
	finishInvite(t, id)
	welcome := mailTo(t, email)
	linkID, secret := linkIn(t, welcome.Text)
	if _, _, err := live.svc.CheckPasswordLink(ctx, linkID, secret); err != nil {
		t.Fatalf("the link sent: %v", err)
	}
	if welcome.Subject != "Welcome to Pinion" || welcome.ID != "invite-"+id || welcome.InviteID != id {
		t.Errorf("e-mail %+v", welcome)
	}

	// Redelivered: nothing new.
	if err := live.svc.InviteUser(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if again, _ := live.svc.Invites().Get(ctx, id); again.Steps[invite.StepUser].Attempts != 1 {
		t.Fatalf("the step ran twice: %+v", again.Steps)
	}

	// A second invite of the same person reuses the user, sends no link and
	// keeps the password.
	id2, msg2 := newInvite(t, invite.Request{ProjectID: newProject(t, "Second"), ProjectName: "Second", FirstName: "G", Email: email, SendEmail: true,
		PasswordHash: mustHash(t, "another password")})
	if err := live.svc.InviteUser(ctx, msg2); err != nil {
		t.Fatal(err)
	}
	if rec, _ := live.svc.Invites().Get(ctx, id2); rec.UserID != userID || rec.NewUser {
		t.Fatalf("record %+v, want user %s reused", rec, userID)
	}
	nextStep(t, id2)
	finishInvite(t, id2)
	if added := mailTo(t, email); added.ID != "invite-"+id2 || added.Subject != "Pinion: Welcome to Second" || strings.Contains(added.Text, "setpassword") {
		t.Fatalf("e-mail %+v, want no link for an existing user", added)
	}
	if _, err := live.conns.Repo.Read(ctx, repo.AllProjects, "User", uuid.NewSHA1(IDNamespace, []byte("invite-user:"+id2)).String()); fhir.AsError(err).Status != 404 {
		t.Fatalf("a second user was made: %v", err)
	}
	if got, _ := live.svc.CheckPassword(ctx, email, "initial password", ""); got != userID {
		t.Fatal("a second invite changed the password")
	}
}

// A project-scoped invite makes a user of the project only; an invite
// without an e-mail makes a user no one can sign in as.
func TestInviteUserScopes(t *testing.T) {
	ctx := context.Background()
	project := newProject(t, "Scoped invites")
	email := newEmail("scoped")
	id, msg := newInvite(t, invite.Request{ProjectID: project, ProjectScoped: true, FirstName: "S", LastName: "Coped", Email: email})
	if err := live.svc.InviteUser(ctx, msg); err != nil {
		t.Fatal(err)
	}
	rec, _ := live.svc.Invites().Get(ctx, id)
	user, err := live.conns.Repo.Read(ctx, repo.AllProjects, "User", rec.UserID)
	if err != nil {
		t.Fatal(err)
	}
	if doc, _ := user.Decode(); !reflect.DeepEqual(doc["project"], map[string]any{"reference": "Project/" + project}) || user.Project != project {
		t.Fatalf("user %v in %q", doc, user.Project)
	}
	if owner, _ := live.conns.Repo.ClaimOwner(ctx, repo.UserEmailKey(project, email)); owner != rec.UserID {
		t.Fatalf("the project's claim is %q's", owner)
	}
	if owner, _ := live.conns.Repo.ClaimOwner(ctx, repo.UserEmailKey("", email)); owner != "" {
		t.Fatalf("the server-wide claim is %q's", owner)
	}
	nextStep(t, id)

	id, msg = newInvite(t, invite.Request{ProjectID: project, FirstName: "No", LastName: "Mail", SendEmail: true})
	if err := live.svc.InviteUser(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if rec, _ := live.svc.Invites().Get(ctx, id); !rec.NewUser || rec.UserID == "" {
		t.Fatalf("record %+v", rec)
	}
	nextStep(t, id)
}

// finishInvite stands in for the membership step: the invite succeeds,
// and identity's e-mail step runs when the invite has an e-mail to send.
func finishInvite(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := live.svc.Invites().Update(ctx, id, func(r *invite.Record) error {
		r.Status = "done"
		invite.MarkStep(r, invite.StepMembership, "done", "")
		if r.Request.SendEmail && r.Request.Email != "" {
			r.Steps[invite.StepEmail] = invite.StepState{State: "pending"}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	msg, _ := json.Marshal(invite.Message{InviteID: id})
	if err := live.svc.InviteEmail(ctx, msg); err != nil {
		t.Fatal(err)
	}
}

// The e-mail step queues an invitation only for an invite that succeeded
// and has one to send, once: a redelivery after it was sent does nothing.
func TestInviteEmail(t *testing.T) {
	ctx := context.Background()
	email := newEmail("mailed")
	id, msg := newInvite(t, invite.Request{ProjectID: newProject(t, "Mailed"), ProjectName: "Mailed", FirstName: "M", LastName: "Ailed", Email: email, SendEmail: true})
	if err := live.svc.InviteUser(ctx, msg); err != nil {
		t.Fatal(err)
	}
	before := mailSeq(t)
	step, _ := json.Marshal(invite.Message{InviteID: id})
	// Still pending (the membership step has not run): nothing yet.
	if err := live.svc.InviteEmail(ctx, step); err != nil {
		t.Fatal(err)
	}
	if n := mailsTo(t, email, before); n != 0 {
		t.Fatalf("%d e-mails for an invite not yet done", n)
	}
	// The end is announced once the e-mail is queued, for the request
	// waiting on it.
	ended, err := live.conns.NC.SubscribeSync(invite.DoneSubject(id))
	if err != nil {
		t.Fatal(err)
	}
	defer ended.Unsubscribe()
	finishInvite(t, id)
	if n := mailsTo(t, email, before); n != 1 {
		t.Fatalf("%d e-mails, want 1", n)
	}
	m, err := ended.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no announcement: %v", err)
	}
	if rec := invite.Announced(m.Data); rec == nil || rec.Status != "done" || rec.Steps[invite.StepMembership].State != "done" {
		t.Errorf("announced %+v, want the invite done", rec)
	}
	// Sent (the courier recorded it): a redelivered step makes no new link.
	first := mailTo(t, email)
	if _, err := live.svc.Invites().Update(ctx, id, func(r *invite.Record) error {
		invite.MarkStep(r, invite.StepEmail, "done", "")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := live.svc.InviteEmail(ctx, step); err != nil {
		t.Fatal(err)
	}
	linkID, secret := linkIn(t, first.Text)
	if _, _, err := live.svc.CheckPasswordLink(ctx, linkID, secret); err != nil {
		t.Fatalf("the link sent, after a redelivery: %v", err)
	}

	// Queued but the step never finished (a crash in between): run again,
	// it spends the link already sent, so a new e-mail must carry the new
	// one rather than be dropped as the same message.
	if _, err := live.svc.Invites().Update(ctx, id, func(r *invite.Record) error {
		invite.MarkStep(r, invite.StepEmail, "pending", "")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := live.svc.InviteEmail(ctx, step); err != nil {
		t.Fatal(err)
	}
	if n := mailsTo(t, email, before); n != 2 {
		t.Fatalf("%d e-mails queued after the step ran again, want 2", n)
	}
	again := mailTo(t, email)
	newID, newSecret := linkIn(t, again.Text)
	if _, _, err := live.svc.CheckPasswordLink(ctx, newID, newSecret); err != nil {
		t.Fatalf("the link of the step run again: %v", err)
	}

	// No e-mail asked for: the step has nothing to do.
	quiet := newEmail("quiet")
	id, msg = newInvite(t, invite.Request{ProjectID: newProject(t, "Quiet"), FirstName: "Q", LastName: "Uiet", Email: quiet})
	if err := live.svc.InviteUser(ctx, msg); err != nil {
		t.Fatal(err)
	}
	finishInvite(t, id)
	if n := mailsTo(t, quiet, before); n != 0 {
		t.Fatalf("%d e-mails though none was asked for", n)
	}
}

// An invite that has ended, or a message that names none, does nothing.
func TestInviteUserNothingToDo(t *testing.T) {
	ctx := context.Background()
	id, msg := newInvite(t, invite.Request{FirstName: "Late", Email: newEmail("late")})
	if _, err := live.svc.Invites().Update(ctx, id, func(r *invite.Record) error { r.Status = "failed"; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := live.svc.InviteUser(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if rec, _ := live.svc.Invites().Get(ctx, id); rec.UserID != "" || rec.Steps[invite.StepUser].State != "pending" {
		t.Fatalf("an ended invite was worked on: %+v", rec)
	}
	if err := live.svc.InviteUser(ctx, []byte("{")); err == nil {
		t.Fatal("an unreadable message was taken")
	}
}

func TestActiveChoices(t *testing.T) {
	res := func(json string) *repo.Resource { return &repo.Resource{Type: "ProjectMembership", JSON: []byte(json)} }
	got, err := activeChoices([]*repo.Resource{
		res(`{"id":"m1","project":{"reference":"Project/p1","display":"One"},"profile":{"reference":"Practitioner/x"}}`),
		res(`{"id":"m2","active":false,"project":{"reference":"Project/p2"}}`),
		res(`{"id":"m3","active":true,"project":{"reference":"Project/p3"},"admin":true}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []Choice{
		{ID: "m1", Project: &fhir.Reference{Reference: "Project/p1", Display: "One"}, Profile: &fhir.Reference{Reference: "Practitioner/x"}},
		{ID: "m3", Project: &fhir.Reference{Reference: "Project/p3"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%+v, want %+v", got, want)
	}
	if got, err := activeChoices(nil); got != nil || err != nil {
		t.Fatalf("none: %v %v", got, err)
	}
	if _, err := activeChoices([]*repo.Resource{res(`{"id":`)}); err == nil {
		t.Fatal("a membership that cannot be read is skipped")
	}
}
