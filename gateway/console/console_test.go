package console_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/micro"

	"github.com/pinion-health/pinion/gateway"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/mail"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/pkg/testenv"
	"github.com/pinion-health/pinion/services/membership"
)

// consoleStack is the console as the gateway serves it, on a real socket,
// in front of the real membership service, on testenv's NATS, session
// buckets and SQLite repository. Tokens are signed with a key the stack
// publishes as identity does; sign-in itself (identity's pages) is not
// part of it: a test holds a token as the console's callback would have
// stored it in the cookie.
type consoleStack struct {
	base    string // the gateway's address and the console's BaseURL
	env     *testenv.Env
	signer  *auth.Signer
	project string
	http    *http.Client
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startConsole(t *testing.T) *consoleStack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	env := testenv.New(t)
	log := quiet()

	p, err := projects.StartProjector(ctx, env.NC, env.JS, testenv.ResourceStream, env.Repo, env.Sessions, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	svc := membership.New(membership.Config{BaseURL: "http://pinion.test/", Mailer: mail.Files{Dir: filepath.Join(t.TempDir(), "mail")}},
		env.NC, env.JS, env.Repo, env.Sessions, log)
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = svc.Stop(sctx)
	})

	// The access-token key, published as identity publishes it.
	key, err := auth.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := micro.AddService(env.NC, micro.Config{Name: "jwks", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = jwks.Stop() })
	if err := jwks.AddEndpoint("jwks", micro.HandlerFunc(func(r micro.Request) {
		b, _ := json.Marshal(map[string]any{"keys": []auth.JWK{key.PublicJWK()}})
		_ = r.Respond(b, micro.WithHeaders(micro.Headers(bus.EncodeResponse(&bus.Response{Status: 200}))))
	}), micro.WithEndpointSubject(bus.SubjectOf("GET", "/.well-known/jwks.json"))); err != nil {
		t.Fatal(err)
	}

	view, err := env.Sessions.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String() + "/"
	g := gateway.New(gateway.Config{BaseURL: base, MaxBodyBytes: 64 << 10, RequestTimeout: 5 * time.Second}, env.NC, view, log)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Listen(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })

	s := &consoleStack{
		base: base, env: env, signer: &auth.Signer{Key: key, Issuer: base},
		// Redirects are what is tested: never followed.
		http: &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}
	testenv.Eventually(t, "the gateway is ready", func() bool {
		resp, err := s.http.Get(base + "readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	s.project = s.create(t, "", map[string]any{"resourceType": "Project", "name": "Console clinic"})
	return s
}

// create stores a resource in the project (the project itself with
// project ""), and returns its id.
func (s *consoleStack) create(t *testing.T, project string, res map[string]any) string {
	t.Helper()
	id := uuid.NewString()
	if project == "" {
		project = id
	}
	if _, err := s.env.Repo.Create(context.Background(), repo.AllProjects, res, repo.WriteOptions{ID: id, Project: project}); err != nil {
		t.Fatal(err)
	}
	return id
}

// person is a member of the project, signed in to the console.
type person struct {
	membership, profile, token string
}

// member stores a Practitioner's membership (admin or not), projects it
// into the session buckets as the projector does after an invite, and
// signs its person in: a live login and an access token for it.
func (s *consoleStack) member(t *testing.T, family string, admin bool) person {
	t.Helper()
	ctx := context.Background()
	profile := "Practitioner/" + s.create(t, s.project, map[string]any{"resourceType": "Practitioner",
		"name": []any{map[string]any{"given": []any{"Pat"}, "family": family}}})
	user := "User/" + uuid.NewString()
	mid := s.create(t, s.project, map[string]any{
		"resourceType": "ProjectMembership",
		"project":      map[string]any{"reference": "Project/" + s.project},
		"user":         map[string]any{"reference": user},
		"profile":      map[string]any{"reference": profile, "display": "Pat " + family},
		"admin":        admin,
	})
	if _, err := s.env.Repo.Claim(ctx, repo.MembershipKey(s.project, user), mid); err != nil {
		t.Fatal(err)
	}
	if _, err := projects.Project(ctx, s.env.NC, "ProjectMembership", mid, s.project); err != nil {
		t.Fatal(err)
	}
	login := uuid.NewString()
	if _, err := s.env.Sessions.PutLogin(ctx, login, session.Login{Membership: mid, User: user, Granted: true,
		Client: auth.ConsoleClientID, Start: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	c := &auth.Claims{LoginID: login, Username: login, Profile: profile}
	c.Subject = login
	c.Audience = jwt.ClaimStrings{s.base}
	tok, err := s.signer.Sign(c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return person{membership: mid, profile: profile, token: tok}
}

// page is one answer of the console.
type page struct {
	status int
	header http.Header
	body   string
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the form token a page carries.
func (p page) csrf(t *testing.T) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no CSRF token on the page (%d): %s", p.status, p.body)
	}
	return m[1]
}

// do sends one request to the console, with the sign-in cookie when token
// is set and form as its urlencoded body when not nil.
func (s *consoleStack) do(t *testing.T, method, path, token string, form url.Values) page {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, s.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if token != "" {
		req.AddCookie(&http.Cookie{Name: "pinion_console", Value: token})
	}
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	return page{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// stored reads a resource as it is now in the repository.
func (s *consoleStack) stored(t *testing.T, typ, id string) map[string]any {
	t.Helper()
	res, err := s.env.Repo.Read(context.Background(), repo.AllProjects, typ, id)
	if err != nil {
		t.Fatal(err)
	}
	m, err := res.Decode()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func wantPage(t *testing.T, p page, status int, texts ...string) {
	t.Helper()
	if p.status != status {
		t.Fatalf("status %d, want %d: %s", p.status, status, p.body)
	}
	for _, text := range texts {
		if !strings.Contains(p.body, text) {
			t.Errorf("the page lacks %q: %s", text, p.body)
		}
	}
}

func wantRedirect(t *testing.T, p page, to string) {
	t.Helper()
	if p.status != http.StatusSeeOther && p.status != http.StatusFound {
		t.Fatalf("status %d, want a redirect to %s: %s", p.status, to, p.body)
	}
	if got := p.header.Get("Location"); got != to {
		t.Fatalf("redirect to %q, want %q", got, to)
	}
}

// Without a sign-in, a page starts one (the authorization code flow with
// PKCE, as the console's client) and a form is refused without acting; a
// sign-in that returns with another state is refused.
func TestConsoleSignInRequired(t *testing.T) {
	s := startConsole(t)

	for _, path := range []string{"console", "console/members/" + uuid.NewString()} {
		t.Run("GET "+path, func(t *testing.T) {
			p := s.do(t, "GET", path, "", nil)
			if p.status != http.StatusFound {
				t.Fatalf("status %d, want 302: %s", p.status, p.body)
			}
			loc, err := url.Parse(p.header.Get("Location"))
			if err != nil || !strings.HasPrefix(loc.String(), s.base+"oauth2/authorize?") {
				t.Fatalf("redirect to %q, want the authorization page", p.header.Get("Location"))
			}
			q := loc.Query()
			if q.Get("client_id") != auth.ConsoleClientID || q.Get("redirect_uri") != s.base+"console/callback" ||
				q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("state") == "" {
				t.Errorf("authorization request %v", q)
			}
			// The state comes back in the callback, checked against the cookie.
			var cookie string
			for _, c := range p.header.Values("Set-Cookie") {
				if strings.HasPrefix(c, "pinion_console_auth="+q.Get("state")+".") {
					cookie = c
				}
			}
			if !strings.Contains(cookie, "HttpOnly") {
				t.Errorf("sign-in cookie %q, want the state, HttpOnly", p.header.Values("Set-Cookie"))
			}
		})
	}

	t.Run("a form without a sign-in", func(t *testing.T) {
		p := s.do(t, "POST", "console/secrets", "", url.Values{"name": {"KEY"}, "value": {"v"}, "csrf": {"x"}})
		wantPage(t, p, 401, "Signed out")
		if sec := s.stored(t, "Project", s.project)["secret"]; sec != nil {
			t.Errorf("the project's secrets changed: %v", sec)
		}
	})

	t.Run("a token that does not verify", func(t *testing.T) {
		p := s.do(t, "GET", "console", "not-a-token", nil)
		if p.status != http.StatusFound || !strings.HasPrefix(p.header.Get("Location"), s.base+"oauth2/authorize?") {
			t.Fatalf("status %d to %q, want a new sign-in", p.status, p.header.Get("Location"))
		}
	})

	t.Run("a callback with another state", func(t *testing.T) {
		req, _ := http.NewRequest("GET", s.base+"console/callback?code=c&state=other", nil)
		req.AddCookie(&http.Cookie{Name: "pinion_console_auth", Value: "mine.verifier"})
		resp, err := s.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantPage(t, page{status: resp.StatusCode, body: string(b)}, 400, "Sign-in expired")
	})
}

// An administrator's secret form saves the secret in the project, shows
// it masked, and removes it again.
func TestConsoleSecretForm(t *testing.T) {
	s := startConsole(t)
	admin := s.member(t, "Admin", true)

	home := s.do(t, "GET", "console", admin.token, nil)
	wantPage(t, home, 200, "Console clinic")
	if home.header.Get("Content-Security-Policy") == "" || home.header.Get("Cache-Control") != "no-store" {
		t.Errorf("page headers %v", home.header)
	}
	csrf := home.csrf(t)

	p := s.do(t, "POST", "console/secrets", admin.token, url.Values{"csrf": {csrf}, "name": {" LAB_KEY "}, "value": {"s3cret-value-42"}})
	wantRedirect(t, p, s.base+"console?done=secret")
	sec, _ := s.stored(t, "Project", s.project)["secret"].([]any)
	if len(sec) != 1 || sec[0].(map[string]any)["name"] != "LAB_KEY" || sec[0].(map[string]any)["valueString"] != "s3cret-value-42" {
		t.Fatalf("stored secrets %v", sec)
	}
	// The page names it, masked: the value is never shown whole.
	home = s.do(t, "GET", "console?done=secret", admin.token, nil)
	wantPage(t, home, 200, "The secret was saved.", "LAB_KEY", "••••••42")
	if strings.Contains(home.body, "s3cret-value-42") {
		t.Errorf("the page shows the secret: %s", home.body)
	}

	p = s.do(t, "POST", "console/secrets", admin.token, url.Values{"csrf": {csrf}, "remove": {"LAB_KEY"}})
	wantRedirect(t, p, s.base+"console?done=removed")
	if sec := s.stored(t, "Project", s.project)["secret"]; sec != nil {
		t.Fatalf("after removal the secrets are %v", sec)
	}
}

// A form is refused, and changes nothing, when it lacks the session's CSRF
// token, carries another session's, or asks for something the service
// refuses; the refusal says why.
func TestConsoleFormRefusals(t *testing.T) {
	s := startConsole(t)
	admin := s.member(t, "Admin", true)
	other := s.member(t, "Other", true)
	csrf := s.do(t, "GET", "console", admin.token, nil).csrf(t)
	otherCSRF := s.do(t, "GET", "console", other.token, nil).csrf(t)
	if csrf == otherCSRF {
		t.Fatal("two sessions share a CSRF token")
	}
	target := s.member(t, "Target", false)
	before := s.stored(t, "ProjectMembership", target.membership)

	cases := []struct {
		name, path string
		form       url.Values
		status     int
		text       string
	}{
		{"a secret without a CSRF token", "console/secrets", url.Values{"name": {"K"}, "value": {"v"}}, 403, "Form expired"},
		{"a secret with another session's token", "console/secrets", url.Values{"csrf": {otherCSRF}, "name": {"K"}, "value": {"v"}}, 403, "Form expired"},
		{"a secret without a name", "console/secrets", url.Values{"csrf": {csrf}, "name": {"  "}, "value": {"v"}}, 400, "Secret name is required"},
		{"a promotion without a CSRF token", "console/members/" + target.membership, url.Values{"admin": {"true"}}, 403, "Form expired"},
		{"a removal without a CSRF token", "console/members/" + target.membership + "/remove", url.Values{}, 403, "Form expired"},
		{"removing oneself", "console/members/" + admin.membership + "/remove", url.Values{"csrf": {csrf}}, 400, "You cannot remove your own membership here."},
		{"an unknown access policy", "console/members/" + target.membership, url.Values{"csrf": {csrf}, "policy": {"AccessPolicy/" + uuid.NewString()}}, 400, "does not exist"},
		{"no such membership", "console/members/" + uuid.NewString(), url.Values{"csrf": {csrf}, "admin": {"true"}}, 404, "Not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantPage(t, s.do(t, "POST", tc.path, admin.token, tc.form), tc.status, tc.text)
		})
	}
	if sec := s.stored(t, "Project", s.project)["secret"]; sec != nil {
		t.Errorf("a refused form changed the secrets: %v", sec)
	}
	after := s.stored(t, "ProjectMembership", target.membership)
	if after["meta"].(map[string]any)["versionId"] != before["meta"].(map[string]any)["versionId"] {
		t.Errorf("a refused form changed the membership:\n%v\n%v", before, after)
	}
	for _, id := range []string{admin.membership, target.membership} {
		if m, err := s.env.Sessions.GetMembership(context.Background(), id); err != nil || !m.Active {
			t.Errorf("membership %s in the session bucket: %+v %v", id, m, err)
		}
	}
}

// An administrator promotes a member, gives them an access policy, and
// removes them: each form's change is stored, and the removed member's
// session entry is gone.
func TestConsoleMemberForms(t *testing.T) {
	s := startConsole(t)
	admin := s.member(t, "Admin", true)
	target := s.member(t, "Target", false)
	policy := "AccessPolicy/" + s.create(t, s.project, map[string]any{"resourceType": "AccessPolicy", "name": "Front desk",
		"resource": []any{map[string]any{"resourceType": "Patient"}}})
	csrf := s.do(t, "GET", "console", admin.token, nil).csrf(t)

	p := s.do(t, "POST", "console/members/"+target.membership, admin.token, url.Values{"csrf": {csrf}, "admin": {"true"}, "policy": {policy}})
	wantRedirect(t, p, s.base+"console/members?done=saved")
	m := s.stored(t, "ProjectMembership", target.membership)
	if m["admin"] != true || m["accessPolicy"].(map[string]any)["reference"] != policy {
		t.Fatalf("after saving: %v", m)
	}
	// The promoted member is an administrator at once.
	wantPage(t, s.do(t, "GET", "console", target.token, nil), 200, "Console clinic")

	// The removal's confirmation names who goes.
	wantPage(t, s.do(t, "GET", "console/members/"+target.membership+"/remove", admin.token, nil), 200, "Pat Target")
	p = s.do(t, "POST", "console/members/"+target.membership+"/remove", admin.token, url.Values{"csrf": {csrf}})
	wantRedirect(t, p, s.base+"console/members?done=member")
	if _, err := s.env.Repo.Read(context.Background(), repo.AllProjects, "ProjectMembership", target.membership); err == nil {
		t.Fatal("the removed membership can still be read")
	}
	// The removed member's token no longer signs them in.
	if p := s.do(t, "GET", "console", target.token, nil); p.status != http.StatusFound {
		t.Fatalf("the removed member's console: %d %s", p.status, p.body)
	}
}

// A member who is not an administrator sees a page saying so, and their
// forms, CSRF token and all, change nothing.
func TestConsoleNonAdminRefused(t *testing.T) {
	s := startConsole(t)
	admin := s.member(t, "Admin", true)
	plain := s.member(t, "Plain", false)

	home := s.do(t, "GET", "console", plain.token, nil)
	wantPage(t, home, 403, "Not an administrator")
	if strings.Contains(home.body, "Console clinic") {
		t.Errorf("the refusal shows the project: %s", home.body)
	}
	csrf := home.csrf(t) // the page still offers to sign out
	for _, tc := range []struct {
		name, path string
		form       url.Values
	}{
		{"a secret", "console/secrets", url.Values{"csrf": {csrf}, "name": {"K"}, "value": {"v"}}},
		{"promoting oneself", "console/members/" + plain.membership, url.Values{"csrf": {csrf}, "admin": {"true"}}},
		{"removing the admin", "console/members/" + admin.membership + "/remove", url.Values{"csrf": {csrf}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantPage(t, s.do(t, "POST", tc.path, plain.token, tc.form), 403, "Not an administrator")
		})
	}
	if sec := s.stored(t, "Project", s.project)["secret"]; sec != nil {
		t.Errorf("secrets %v", sec)
	}
	if m := s.stored(t, "ProjectMembership", plain.membership); m["admin"] != false {
		t.Errorf("the member promoted themself: %v", m)
	}
	s.stored(t, "ProjectMembership", admin.membership)
}
