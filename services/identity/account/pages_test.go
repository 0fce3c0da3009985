package account

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store/sqlstore"
	"github.com/pinion-health/pinion/services/identity/internal/testkit"
	"github.com/pinion-health/pinion/services/identity/secrets"
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
	sec := secrets.New(r)
	return New(Config{BaseURL: "https://pinion.example/"}, nil, nil, r, sec, nil, web.New("https://pinion.example/", sec), testkit.Quiet)
}

// Each way a set-password link can be unusable gets its own page, with a
// way to ask for a new link, and the form is never shown.
func TestSetPasswordLinkPages(t *testing.T) {
	s := storeOnly(t)
	ctx := context.Background()
	page := func(link string) *bus.Response {
		t.Helper()
		parts := strings.Split(strings.TrimPrefix(link, s.cfg.BaseURL+"setpassword/"), "/")
		resp, err := s.SetPasswordPage(ctx, &bus.Request{Method: "GET", Params: map[string]string{"id": parts[0], "secret": parts[1]}, Header: map[string]string{}})
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

	_, first, err := s.NewPasswordRequest(ctx, "u1", "reset", "")
	if err != nil {
		t.Fatal(err)
	}
	expectPage(page(first), 200, `type="password"`)
	expectPage(page(first[:len(first)-4]+"0000"), 400, "Link not valid")

	// A newer link spends the older one (not an invitation's: reset_test.go).
	_, second, err := s.NewPasswordRequest(ctx, "u1", "reset", "")
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
	resp, err := s.ResetPasswordPage(context.Background(), &bus.Request{
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
	s := storeOnly(t)
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
	resp, err := s.SetPasswordPage(context.Background(), &bus.Request{Method: "GET", Params: map[string]string{"id": "../x", "secret": "s"}, Header: map[string]string{}})
	if err != nil || resp.Status != 404 || !strings.Contains(string(resp.Body), "Link not valid") {
		t.Fatalf("%v %v", resp, err)
	}
}

// The set-password page checks the form, sets the password and spends the
// link; the form is posted from the browser's own page.
func TestSetPasswordPagePosted(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "page")
	_, link, err := live.svc.NewPasswordRequest(ctx, p.userID, "reset", "")
	if err != nil {
		t.Fatal(err)
	}
	id, secret := linkIn(t, link)
	_, csrf, header := aBrowser(t)
	post := func(form url.Values, header map[string]string) *bus.Response {
		t.Helper()
		r := formRequest(form, header)
		r.Params = map[string]string{"id": id, "secret": secret}
		resp, err := live.svc.SetPasswordPage(ctx, r)
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
		{"short", url.Values{"csrf": {csrf}, "password": {"short"}, "confirm": {"short"}}, header, 400, ShortPasswordText},
		{"not confirmed", url.Values{"csrf": {csrf}, "password": {"page password"}, "confirm": {"page passwork"}}, header, 400, "The passwords do not match"},
		{"another browser", url.Values{"csrf": {csrf}, "password": {"page password"}, "confirm": {"page password"}}, nil, 403, "Form expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(tc.form, tc.header)
			if resp.Status != tc.status || !strings.Contains(string(resp.Body), tc.text) {
				t.Fatalf("%d:\n%s", resp.Status, resp.Body)
			}
			if got, _ := live.svc.CheckPassword(ctx, p.email, p.password, ""); got != p.userID {
				t.Fatal("the password changed")
			}
		})
	}
	resp := post(url.Values{"csrf": {csrf}, "password": {"page password"}, "confirm": {"page password"}}, header)
	if resp.Status != 200 || !strings.Contains(string(resp.Body), "Your password is set.") {
		t.Fatalf("%d:\n%s", resp.Status, resp.Body)
	}
	if got, _ := live.svc.CheckPassword(ctx, p.email, "page password", ""); got != p.userID {
		t.Fatal("the password is not set")
	}
	resp = post(url.Values{"csrf": {csrf}, "password": {"again password"}, "confirm": {"again password"}}, header)
	if resp.Status != 400 || !strings.Contains(string(resp.Body), "Link already used") {
		t.Fatalf("a spent link: %d:\n%s", resp.Status, resp.Body)
	}
}

// The reset page: a form, then the same answer for any address, and a
// mail for the one with an
func TestResetPasswordPage(t *testing.T) {
	ctx := context.Background()
	_, csrf, header := aBrowser(t)
	resp, err := live.svc.ResetPasswordPage(ctx, &bus.Request{Method: "GET", Header: header, Query: url.Values{"project": {"p1"}}})
	if err != nil || resp.Status != 200 || !strings.Contains(string(resp.Body), `value="`+csrf+`"`) || !strings.Contains(string(resp.Body), `value="p1"`) {
		t.Fatalf("%v %v", resp, err)
	}
	p := newPerson(t, "resetpage")
	for _, email := range []string{newEmail("nobody"), p.email} {
		resp, err := live.svc.ResetPasswordPage(ctx, formRequest(url.Values{"csrf": {csrf}, "email": {" " + email + " "}}, header))
		if err != nil || resp.Status != 200 || !strings.Contains(string(resp.Body), "If an account uses "+email+",") {
			t.Fatalf("%s: %v %v", email, resp, err)
		}
	}
	mailTo(t, p.email)
	resp, err = live.svc.ResetPasswordPage(ctx, formRequest(url.Values{"email": {p.email}}, header))
	if err != nil || resp.Status != 403 {
		t.Fatalf("without the token: %v %v", resp, err)
	}
}
