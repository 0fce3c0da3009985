package membership

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/mail"
)

func TestOtherScope(t *testing.T) {
	if got := otherScope(invite.Request{ProjectID: "p-1", ProjectScoped: true}); got != "" {
		t.Errorf("project-scoped invite looks at %q, want the server's users", got)
	}
	if got := otherScope(invite.Request{ProjectID: "p-1"}); got != "p-1" {
		t.Errorf("server-scoped invite looks at %q, want the project's users", got)
	}
}

func TestNewMembership(t *testing.T) {
	tmpl := map[string]any{
		"admin": true, "externalId": "e-1", "invitedBy": map[string]any{"reference": "User/admin"},
		"access": []any{map[string]any{"policy": map[string]any{"reference": "AccessPolicy/1"}}},
	}
	cases := []struct {
		name string
		req  invite.Request
		want string
	}{
		{"by e-mail", invite.Request{
			ProjectID: "p-1", ProjectName: "Clinic", FirstName: "Ada", LastName: "Lovelace", Email: "ada@example.com", ExternalID: "e-1",
			Membership: tmpl,
		}, `{"access":[{"policy":{"reference":"AccessPolicy/1"}}],"admin":true,"externalId":"e-1",` +
			`"invitedBy":{"reference":"User/admin"},"profile":{"display":"Ada Lovelace","reference":"Practitioner/pr-1"},` +
			`"project":{"display":"Clinic","reference":"Project/p-1"},"resourceType":"ProjectMembership",` +
			`"user":{"display":"ada@example.com","reference":"User/u-1"}}`},
		{"by externalId", invite.Request{
			ProjectID: "p-1", ProjectName: "Clinic", FirstName: "Ada", LastName: "Lovelace", ExternalID: "e-1",
			Membership: map[string]any{"admin": false},
		}, `{"admin":false,"profile":{"display":"Ada Lovelace","reference":"Practitioner/pr-1"},` +
			`"project":{"display":"Clinic","reference":"Project/p-1"},"resourceType":"ProjectMembership",` +
			`"user":{"display":"e-1","reference":"User/u-1"}}`},
		// What the invite names wins over a template that tried to.
		{"template cannot name the project", invite.Request{
			ProjectID: "p-1", ProjectName: "Clinic", FirstName: "Ada", LastName: "Lovelace", Email: "ada@example.com",
			Membership: map[string]any{"project": "elsewhere", "user": "someone", "profile": "other", "resourceType": "Bot"},
		}, `{"profile":{"display":"Ada Lovelace","reference":"Practitioner/pr-1"},` +
			`"project":{"display":"Clinic","reference":"Project/p-1"},"resourceType":"ProjectMembership",` +
			`"user":{"display":"ada@example.com","reference":"User/u-1"}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pm, err := newMembership(tc.req, "User/u-1", "Practitioner/pr-1")
			if err != nil {
				t.Fatal(err)
			}
			// As the repository takes it (and so with its keys in order).
			m, err := resource.Map(pm)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(m)
			if string(got) != tc.want {
				t.Errorf("membership\n %s\nwant\n %s", got, tc.want)
			}
		})
	}
	// The record's template is not written through: the saga may run the step again.
	pm, err := newMembership(invite.Request{Membership: tmpl}, "User/u-1", "Practitioner/pr-1")
	if err != nil {
		t.Fatal(err)
	}
	pm.Other["admin"] = json.RawMessage("false")
	if tmpl["admin"] != true || tmpl["resourceType"] != nil {
		t.Errorf("template changed: %v", tmpl)
	}
}

// A membership step delivered again after its invite ended does nothing.
func TestInviteMembershipAfterTheEnd(t *testing.T) {
	ctx := testCtx(t)
	project := fixtureProject(t, nil)
	rec := invite.NewRecord(uuid.NewString(), invite.Request{ProjectID: project, Email: "late@example.com", Membership: map[string]any{}}, time.Now().UTC())
	rec.Status, rec.UserID, rec.ProfileRef = "failed", uuid.NewString(), fixturePractitioner(t, project)
	if err := stack.invites.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(invite.Message{InviteID: rec.ID})
	if err := stack.svc.inviteMembership(ctx, b); err != nil {
		t.Fatal(err)
	}
	if ms := membersOf(t, project); len(ms) != 0 {
		t.Errorf("memberships %v", ms)
	}
	if err := stack.svc.inviteMembership(ctx, []byte(`[`)); err == nil {
		t.Error("a step that cannot be read succeeded")
	}
	if err := stack.svc.inviteMembership(ctx, []byte(`{"invite":"`+uuid.NewString()+`"}`)); err == nil {
		t.Error("a step of no invite succeeded")
	}
}

// A membership step delivered again after it ended its invite, but before
// it handed the e-mail on (a crash between the two), hands it on: the
// e-mail is sent once all the same.
func TestInviteMembershipDoneHandsOnTheEmail(t *testing.T) {
	ctx := testCtx(t)
	project := fixtureProject(t, nil)
	email := invitee("handed-on")
	rec := invite.NewRecord(uuid.NewString(), invite.Request{ProjectID: project, ProjectName: "Clinic", Email: email,
		FirstName: "Hand", LastName: "Over", SendEmail: true, Membership: map[string]any{}}, time.Now().UTC())
	rec.Status, rec.UserID, rec.ProfileRef, rec.MembershipID = "done", uuid.NewString(), fixturePractitioner(t, project), uuid.NewString()
	invite.MarkStep(rec, invite.StepMembership, "done", "")
	if err := stack.invites.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(invite.Message{InviteID: rec.ID})
	if err := stack.svc.inviteMembership(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitInvite(t, rec.ID, func(r *invite.Record) bool { return r.Steps[invite.StepEmail].State == "done" })
	if eml := readMail(t, "invite-"+rec.ID); !strings.Contains(eml, "To: <"+email+">") {
		t.Errorf("e-mail:\n%s", eml)
	}
	if ms := membersOf(t, project); len(ms) != 0 {
		t.Errorf("a redelivered step of a done invite wrote memberships %v", ms)
	}
}

// A membership step delivered again after a crash between its write and
// the record's update ends the invite with the membership it wrote.
func TestInviteMembershipRedelivered(t *testing.T) {
	ctx := testCtx(t)
	project := fixtureProject(t, nil)
	user := uuid.NewString()
	rec := invite.NewRecord(uuid.NewString(), invite.Request{ProjectID: project, ProjectName: "Clinic", Email: "again@example.com",
		FirstName: "Re", LastName: "Delivered", Membership: map[string]any{"admin": false}}, time.Now().UTC())
	rec.UserID, rec.ProfileRef = user, fixturePractitioner(t, project)
	if err := stack.invites.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(invite.Message{InviteID: rec.ID})
	if err := stack.svc.inviteMembership(ctx, b); err != nil {
		t.Fatal(err)
	}
	first, _ := stack.invites.Get(ctx, rec.ID)
	if first.Status != "done" || first.MembershipID == "" {
		t.Fatalf("record %+v", first)
	}
	// The crash: the membership is stored, the record not yet updated.
	if _, err := stack.invites.Update(ctx, rec.ID, func(r *invite.Record) error {
		r.Status, r.MembershipID = "pending", ""
		invite.MarkStep(r, invite.StepMembership, "pending", "")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := stack.svc.inviteMembership(ctx, b); err != nil {
		t.Fatal(err)
	}
	again, _ := stack.invites.Get(ctx, rec.ID)
	if again.Status != "done" || again.MembershipID != first.MembershipID {
		t.Errorf("record %+v, want done with %s", again, first.MembershipID)
	}
	if ms := membersOf(t, project)["User/"+user]; len(ms) != 1 || ms[0]["id"] != first.MembershipID {
		t.Errorf("memberships %v, want %s alone", ms, first.MembershipID)
	}
	if e := sessionEntry(t, first.MembershipID); e == nil || !e.Active {
		t.Errorf("session entry %+v", e)
	}
}

func TestFromConfig(t *testing.T) {
	dir := t.TempDir()
	c := &infra.Conns{NC: stack.nc, JS: stack.js, Repo: stack.repo, Sessions: stack.sessions}
	s, err := FromConfig(&config.Config{BaseURL: "https://from.config/", DataDir: dir}, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.BaseURL != "https://from.config/" || s.mailer != (mail.Files{Dir: filepath.Join(dir, "mail")}) || s.repo != stack.repo || s.sessions != stack.sessions {
		t.Errorf("service %+v", s)
	}
	if _, err := FromConfig(&config.Config{SMTPURL: "http://mail.example"}, c, nil); err == nil || err.Error() != "PINION_SMTP_URL: want smtp://user:pass@host:port" {
		t.Errorf("a bad SMTP address: %v", err)
	}
}
