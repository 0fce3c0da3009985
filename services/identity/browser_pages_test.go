package identity

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/services/identity/web"
)

// aBrowser is a browser that has its cookie, and its forms' token from the
// live service.
func aBrowser(t *testing.T) (b web.Browser, csrf string, header map[string]string) {
	t.Helper()
	b = web.NewBrowser()
	b.IsNew = false
	csrf, err := live.svc.pages.CSRFToken(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return b, csrf, map[string]string{"Cookie": web.Cookie + "=" + b.ID}
}

// The authorization endpoint's answers to a new browser, which needs no
// lookup: a page when nothing may be redirected to, an error redirect for
// a bad request from a known client, and else the sign-in form.
func TestAuthorizeNewBrowser(t *testing.T) {
	s := live.svc
	start := func(kv ...string) *bus.Response {
		t.Helper()
		q := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		resp, err := s.signins.Authorize(context.Background(), &bus.Request{Method: "GET", Query: q, Header: map[string]string{}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	const cli, cb = "medplum-cli", "http://localhost:9615"

	for name, resp := range map[string]*bus.Response{
		"no client":           start("response_type", "code", "redirect_uri", cb),
		"unregistered return": start("response_type", "code", "client_id", cli, "redirect_uri", "https://evil.example/cb"),
	} {
		if resp.Status != 400 || resp.Header["Location"] != "" || !strings.Contains(string(resp.Body), "Sign-in cannot start") {
			t.Errorf("%s: %d %v", name, resp.Status, resp.Header)
		}
	}
	for name, c := range map[string]struct {
		resp     *bus.Response
		location string
	}{
		"implicit flow": {start("response_type", "token", "client_id", cli, "state", "s1"),
			cb + "?error=unsupported_response_type&error_description=Only+response_type%3Dcode+is+supported&state=s1"},
		"PKCE required": {start("response_type", "code", "client_id", auth.ConsoleClientID),
			testBase + "console/callback?error=invalid_request&error_description=Missing+code_challenge+%28PKCE+is+required%29"},
		"prompt=none, not signed in": {start("response_type", "code", "client_id", cli, "prompt", "none"),
			cb + "?error=login_required&error_description=Sign-in+required"},
	} {
		if c.resp.Status != 302 || c.resp.Header["Location"] != c.location {
			t.Errorf("%s: %d %q, want %q", name, c.resp.Status, c.resp.Header["Location"], c.location)
		}
	}

	resp := start("response_type", "code", "client_id", cli, "state", "s1", "login_hint", "a@example.com", "code_challenge", "ch")
	body := string(resp.Body)
	if resp.Status != 200 || !strings.HasPrefix(resp.Header["Set-Cookie"], web.Cookie+"=") {
		t.Fatalf("%d %v", resp.Status, resp.Header)
	}
	if csp := resp.Header["Content-Security-Policy"]; !strings.Contains(csp, "form-action 'self' http://localhost:9615;") {
		t.Fatalf("CSP %q", csp)
	}
	for _, part := range []string{
		`name="client_id" value="medplum-cli"`, `name="state" value="s1"`,
		`name="code_challenge" value="ch"`, `name="scope" value="openid"`, `value="a@example.com"`, "Medplum CLI",
	} {
		if !strings.Contains(body, part) {
			t.Errorf("no %q in the sign-in page", part)
		}
	}
	// The redirect URI was not sent: the form does not send one either, so
	// the token request need not (RFC 6749 §4.1.3).
	if strings.Contains(body, `name="redirect_uri"`) {
		t.Error("a redirect URI the request did not send is carried on")
	}
	if strings.Contains(body, `name="login_hint"`) {
		t.Error("the hint is carried on after it was used")
	}
}

// The CSRF key is made once and shared: another instance computes the
// same tokens.
func TestCSRFKeyShared(t *testing.T) {
	b, csrf, _ := aBrowser(t)
	other := New(live.svc.cfg, live.conns.NC, live.conns.JS, live.conns.Repo, live.conns.Sessions, quiet)
	ok, err := other.pages.CheckCSRF(context.Background(), b, csrf)
	if err != nil || !ok {
		t.Fatalf("another instance refuses the token: %v %v", ok, err)
	}
}
