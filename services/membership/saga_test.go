package membership

import (
	"encoding/json"
	"testing"

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
			pm := newMembership(tc.req, "User/u-1", "Practitioner/pr-1")
			got, _ := json.Marshal(pm)
			if string(got) != tc.want {
				t.Errorf("membership\n %s\nwant\n %s", got, tc.want)
			}
		})
	}
	// The record's template is not written through: the saga may run the step again.
	pm := newMembership(invite.Request{Membership: tmpl}, "User/u-1", "Practitioner/pr-1")
	pm["admin"] = false
	if tmpl["admin"] != true || tmpl["resourceType"] != nil {
		t.Errorf("template changed: %v", tmpl)
	}
}

func TestInviteMail(t *testing.T) {
	req := invite.Request{FirstName: "Ada", ProjectName: "Clinic", Email: "ada@example.com"}
	const link = "https://app.example.com/setpassword/id/secret"
	welcome := mail.Message{ID: "invite-inv-1", To: "ada@example.com", InviteID: "inv-1", Subject: "Welcome to Pinion",
		Text: "Hello Ada,\n\nYou were invited to Clinic.\n\nSet your password to sign in:\n" + link + "\n\nThe link works once and expires in 7 days.\n"}
	added := mail.Message{ID: "invite-inv-1", To: "ada@example.com", InviteID: "inv-1", Subject: "Pinion: Welcome to Clinic",
		Text: "Hello Ada,\n\nYou were added to Clinic. You will see it the next time you sign in:\nhttps://app.example.com/signin\n"}
	cases := []struct {
		name    string
		newUser bool
		link    string
		want    mail.Message
	}{
		{"new user", true, link, welcome},
		{"existing user", false, "", added},
		// The link is only for a new user; without one, say where to sign in.
		{"new user without a link", true, "", added},
		{"existing user, link ignored", false, link, added},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &invite.Record{ID: "inv-1", Request: req, NewUser: tc.newUser}
			if got := inviteMail(rec, tc.link, "https://app.example.com/"); got != tc.want {
				t.Errorf("mail\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}
