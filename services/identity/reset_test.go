package identity

import (
	"context"
	"strings"
	"testing"
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
		// finds no account.
		{"@", "@", true},
	}
	for _, tc := range cases {
		email, ok := formEmail(tc.raw)
		if email != tc.email || ok != tc.ok {
			t.Errorf("formEmail(%q) = %q %v, want %q %v", tc.raw, email, ok, tc.email, tc.ok)
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
		resp, err := live.svc.resetPassword(ctx, jsonRequest("10.4.0.1", map[string]any{"email": email, "projectId": project}))
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
	resp, err := live.svc.setPassword(ctx, jsonRequest("10.4.0.1", map[string]any{"id": id, "secret": secret, "password": "reset password"}))
	if err != nil || resp.Status != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	if got, err := live.svc.checkPassword(ctx, p.email, "reset password", ""); got != p.userID || err != nil {
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
