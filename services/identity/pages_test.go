package identity

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store/sqlstore"
	"github.com/pinion-health/pinion/services/identity/web"
)

// storeOnly is the service over a real SQLite store and nothing else:
// enough for what only reads and writes credentials.
func storeOnly(t *testing.T) *Service {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), filepath.Join(t.TempDir(), "pinion.db"), sqlstore.Options{Sync: "off", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r, err := repo.New(st, nil, repo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{BaseURL: "https://pinion.example/"}, nil, nil, r, nil, nil)
}

// Each way a set-password link can be unusable gets its own page, with a
// way to ask for a new link, and the form is never shown.
func TestSetPasswordLinkPages(t *testing.T) {
	s := storeOnly(t)
	ctx := context.Background()
	page := func(link string) *bus.Response {
		t.Helper()
		parts := strings.Split(strings.TrimPrefix(link, s.cfg.BaseURL+"setpassword/"), "/")
		resp, err := s.setPasswordPage(ctx, &bus.Request{Method: "GET", Params: map[string]string{"id": parts[0], "secret": parts[1]}, Header: map[string]string{}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	expectPage := func(resp *bus.Response, status int, text string) {
		t.Helper()
		body := string(resp.Body)
		if resp.Status != status || !strings.Contains(body, text) || strings.Contains(body, `type="password"`) && status != 200 {
			t.Fatalf("want %d %q, got %d:\n%s", status, text, resp.Status, body)
		}
		if status != 200 && !strings.Contains(body, `href="https://pinion.example/resetpassword"`) {
			t.Fatalf("no way to ask for a new link:\n%s", body)
		}
	}

	_, first, err := s.newPasswordRequest(ctx, "u1", "reset", "")
	if err != nil {
		t.Fatal(err)
	}
	expectPage(page(first), 200, `type="password"`)
	expectPage(page(first[:len(first)-4]+"0000"), 400, "Link not valid")

	// A newer link spends the older one (not an invitation's: reset_test.go).
	_, second, err := s.newPasswordRequest(ctx, "u1", "reset", "")
	if err != nil {
		t.Fatal(err)
	}
	expectPage(page(first), 400, "Link already used")

	// An expired link.
	id := strings.Split(strings.TrimPrefix(second, s.cfg.BaseURL+"setpassword/"), "/")[0]
	var pr passwordRequest
	if _, _, err := s.secrets.Load(ctx, "pwreq:"+id, &pr); err != nil {
		t.Fatal(err)
	}
	pr.Expires = time.Now().Add(-time.Minute)
	if err := s.secrets.Save(ctx, "pwreq:"+id, pr); err != nil {
		t.Fatal(err)
	}
	expectPage(page(second), 400, "Link expired")

	// A link to no request at all.
	expectPage(page(s.cfg.BaseURL+"setpassword/00000000-0000-4000-8000-000000000000/"+strings.Repeat("0", 64)), 404, "Link not valid")
}

// The reset page shows a refused address beside the field (it panicked on
// a nil *fhir.Error).
func TestResetPasswordPageRefusesAddress(t *testing.T) {
	s := live.svc
	b := web.Browser{ID: strings.Repeat("b", 43)}
	token, err := s.pages.CSRFToken(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.resetPasswordPage(context.Background(), &bus.Request{
		Method: "POST", Header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Cookie": web.Cookie + "=" + b.ID},
		Body: []byte("csrf=" + token + "&email=nobody"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if body := string(resp.Body); resp.Status != 400 || !strings.Contains(body, "Valid email address is required") || !strings.Contains(body, `value="nobody"`) {
		t.Fatalf("%d:\n%s", resp.Status, body)
	}
}

// linkProblem names what is wrong with a set-password link, from the
// domain's texts; what is not about the link stays an error.
func TestLinkProblem(t *testing.T) {
	s := unwired(t)
	b := web.Browser{ID: strings.Repeat("a", 43)}
	for _, tc := range []struct {
		name   string
		err    error
		status int
		title  string
	}{
		{"used", fhir.BadRequest("Already used"), 400, "Link already used"},
		{"expired", fhir.BadRequest("Request expired"), 400, "Link expired"},
		{"wrong secret", fhir.BadRequest("Incorrect secret"), 400, "Link not valid"},
		{"no such request", fhir.NotFound(), 404, "Link not valid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := s.linkProblem(b, tc.err)
			if err != nil {
				t.Fatal(err)
			}
			body := string(resp.Body)
			if resp.Status != tc.status || !strings.Contains(body, tc.title) || !strings.Contains(body, `href="https://pinion.example/resetpassword"`) {
				t.Fatalf("%d:\n%s", resp.Status, body)
			}
		})
	}
	for name, err := range map[string]error{"not an outcome": errors.New("store down"), "a server error": fhir.Internal()} {
		if resp, got := s.linkProblem(b, err); resp != nil || got != err {
			t.Errorf("%s: %v %v", name, resp, got)
		}
	}
	// A link whose id is no request id is not looked up.
	resp, err := s.setPasswordPage(context.Background(), &bus.Request{Method: "GET", Params: map[string]string{"id": "../x", "secret": "s"}, Header: map[string]string{}})
	if err != nil || resp.Status != 404 || !strings.Contains(string(resp.Body), "Link not valid") {
		t.Fatalf("%v %v", resp, err)
	}
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
		resp, err := s.authorize(context.Background(), &bus.Request{Method: "GET", Query: q, Header: map[string]string{}})
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

// The set-password page checks the form, sets the password and spends the
// link; the form is posted from the browser's own page.
func TestSetPasswordPagePosted(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "page")
	_, link, err := live.svc.newPasswordRequest(ctx, p.userID, "reset", "")
	if err != nil {
		t.Fatal(err)
	}
	id, secret := linkIn(t, link)
	_, csrf, header := aBrowser(t)
	post := func(form url.Values, header map[string]string) *bus.Response {
		t.Helper()
		r := formRequest(form, header)
		r.Params = map[string]string{"id": id, "secret": secret}
		resp, err := live.svc.setPasswordPage(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, tc := range []struct {
		name   string
		form   url.Values
		header map[string]string
		status int
		text   string
	}{
		{"short", url.Values{"csrf": {csrf}, "password": {"short"}, "confirm": {"short"}}, header, 400, shortPassword},
		{"not confirmed", url.Values{"csrf": {csrf}, "password": {"page password"}, "confirm": {"page passwork"}}, header, 400, "The passwords do not match"},
		{"another browser", url.Values{"csrf": {csrf}, "password": {"page password"}, "confirm": {"page password"}}, nil, 403, "Form expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(tc.form, tc.header)
			if resp.Status != tc.status || !strings.Contains(string(resp.Body), tc.text) {
				t.Fatalf("%d:\n%s", resp.Status, resp.Body)
			}
			if got, _ := live.svc.checkPassword(ctx, p.email, p.password, ""); got != p.userID {
				t.Fatal("the password changed")
			}
		})
	}
	resp := post(url.Values{"csrf": {csrf}, "password": {"page password"}, "confirm": {"page password"}}, header)
	if resp.Status != 200 || !strings.Contains(string(resp.Body), "Your password is set.") {
		t.Fatalf("%d:\n%s", resp.Status, resp.Body)
	}
	if got, _ := live.svc.checkPassword(ctx, p.email, "page password", ""); got != p.userID {
		t.Fatal("the password is not set")
	}
	resp = post(url.Values{"csrf": {csrf}, "password": {"again password"}, "confirm": {"again password"}}, header)
	if resp.Status != 400 || !strings.Contains(string(resp.Body), "Link already used") {
		t.Fatalf("a spent link: %d:\n%s", resp.Status, resp.Body)
	}
}

// The reset page: a form, then the same answer for any address, and a
// mail for the one with an account.
func TestResetPasswordPage(t *testing.T) {
	ctx := context.Background()
	_, csrf, header := aBrowser(t)
	resp, err := live.svc.resetPasswordPage(ctx, &bus.Request{Method: "GET", Header: header, Query: url.Values{"project": {"p1"}}})
	if err != nil || resp.Status != 200 || !strings.Contains(string(resp.Body), `value="`+csrf+`"`) || !strings.Contains(string(resp.Body), `value="p1"`) {
		t.Fatalf("%v %v", resp, err)
	}
	p := newPerson(t, "resetpage")
	for _, email := range []string{newEmail("nobody"), p.email} {
		resp, err := live.svc.resetPasswordPage(ctx, formRequest(url.Values{"csrf": {csrf}, "email": {" " + email + " "}}, header))
		if err != nil || resp.Status != 200 || !strings.Contains(string(resp.Body), "If an account uses "+email+",") {
			t.Fatalf("%s: %v %v", email, resp, err)
		}
	}
	mailTo(t, p.email)
	resp, err = live.svc.resetPasswordPage(ctx, formRequest(url.Values{"email": {p.email}}, header))
	if err != nil || resp.Status != 403 {
		t.Fatalf("without the token: %v %v", resp, err)
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
