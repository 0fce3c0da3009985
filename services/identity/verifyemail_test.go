package identity

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
)

// verificationLink is the verify-email link in a text, as id and secret.
func verificationLink(t *testing.T, text string) (id, secret string) {
	t.Helper()
	i := strings.Index(text, testBase+"verifyemail/")
	if i < 0 {
		t.Fatalf("no verification link in %q", text)
	}
	rest := strings.Fields(text[i+len(testBase+"verifyemail/"):])[0]
	id, secret, ok := strings.Cut(rest, "/")
	if !ok {
		t.Fatalf("link %q", rest)
	}
	return id, secret
}

func TestVerifyEmail(t *testing.T) {
	ctx := context.Background()
	email := newEmail("verify")
	loginID := register(t, live.svc, map[string]any{"email": email})
	l, err := live.conns.Sessions.GetLogin(ctx, loginID)
	if err != nil {
		t.Fatal(err)
	}
	uid := strings.TrimPrefix(l.User, "User/")
	msg := mailTo(t, email)
	id, secret := verificationLink(t, msg.Text)
	if readJSON(t, "User", uid)["emailVerified"] != nil {
		t.Fatal("verified before the link was used")
	}
	verify := func(body map[string]any) error {
		_, err := live.svc.accounts.VerifyEmail(ctx, jsonRequest("10.3.4.1", body))
		return err
	}
	for _, tc := range []struct {
		name        string
		body        map[string]any
		status      int
		text, field string
	}{
		{"no id", map[string]any{"secret": secret}, 400, "Invalid request ID", "id"},
		{"no secret", map[string]any{"id": id}, 400, "Missing secret", "secret"},
		{"an unknown id", map[string]any{"id": "00000000-0000-4000-8000-000000000000", "secret": secret}, 404, "Not found", ""},
		{"a wrong secret", map[string]any{"id": id, "secret": strings.Repeat("0", len(secret))}, 400, "Incorrect secret", ""},
	} {
		t.Run(tc.name, func(t *testing.T) { expectOutcome(t, verify(tc.body), tc.status, tc.text, tc.field) })
	}
	if err := verify(map[string]any{"id": id, "secret": secret}); err != nil {
		t.Fatal(err)
	}
	if readJSON(t, "User", uid)["emailVerified"] != true {
		t.Fatal("not verified")
	}
	expectOutcome(t, verify(map[string]any{"id": id, "secret": secret}), 400, "Already used", "")
}

// A project may require a verified e-mail of its members before they sign
// in; a set-password link, which came by e-mail, verifies it too.
func TestRequireVerifiedEmail(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "unverified")
	setProject(t, p.project, func(doc map[string]any) {
		doc["setting"] = []any{map[string]any{"name": "requireVerifiedEmail", "valueBoolean": true}}
	})
	_, err := p.login(t, "10.3.5.1", nil)
	expectOutcome(t, err, 400, "Email verification is required", "")

	id, link, err := live.svc.accounts.NewPasswordRequest(ctx, p.userID, "reset", "")
	if err != nil {
		t.Fatal(err)
	}
	secret := link[strings.LastIndex(link, "/")+1:]
	if _, err := live.svc.accounts.UsePasswordLink(ctx, id, secret, p.password); err != nil {
		t.Fatal(err)
	}
	resp, err := p.login(t, "10.3.5.1", nil)
	decoded(t, resp, err, 200)
}

// The page the e-mail links to: opening it changes nothing; its button,
// posted from the same browser, verifies once.
func TestVerifyEmailPage(t *testing.T) {
	ctx := context.Background()
	email := newEmail("verifypage")
	loginID := register(t, live.svc, map[string]any{"email": email})
	l, err := live.conns.Sessions.GetLogin(ctx, loginID)
	if err != nil {
		t.Fatal(err)
	}
	uid := strings.TrimPrefix(l.User, "User/")
	id, secret := verificationLink(t, mailTo(t, email).Text)
	_, csrf, header := aBrowser(t)
	call := func(method, id string, form url.Values, header map[string]string) *bus.Response {
		t.Helper()
		r := formRequest(form, header)
		r.Method = method
		r.Params = map[string]string{"id": id, "secret": secret}
		resp, err := live.svc.accounts.VerifyEmailPage(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	expectPage := func(resp *bus.Response, status int, text string) {
		t.Helper()
		if resp.Status != status || !strings.Contains(string(resp.Body), text) {
			t.Fatalf("%d, want %d with %q:\n%s", resp.Status, status, text, resp.Body)
		}
	}
	expectPage(call("GET", id, nil, header), 200, "Verify my address")
	expectPage(call("GET", "not-an-id", nil, header), 404, "Link not valid")
	if readJSON(t, "User", uid)["emailVerified"] != nil {
		t.Fatal("opening the page verified the address")
	}
	expectPage(call("POST", id, url.Values{"csrf": {csrf}}, nil), 403, "Form expired")
	expectPage(call("POST", id, url.Values{"csrf": {csrf}}, header), 200, "Your e-mail address is verified.")
	if readJSON(t, "User", uid)["emailVerified"] != true {
		t.Fatal("not verified")
	}
	expectPage(call("POST", id, url.Values{"csrf": {csrf}}, header), 400, "Link already used")
}
