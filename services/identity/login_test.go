package identity

import (
	"context"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/clients"
	"github.com/pinion-health/pinion/services/identity/internal/testkit"
	"github.com/pinion-health/pinion/services/identity/limits"
	"github.com/pinion-health/pinion/services/identity/signin"
	"github.com/pinion-health/pinion/services/identity/web"
)

// The handlers refuse a bad body before any lookup or count.
func TestLoginHandlersRefuseBadInput(t *testing.T) {
	s := unwired(t)
	ctx := context.Background()
	req := func(ct, body string) *bus.Request {
		return &bus.Request{Method: "POST", Header: map[string]string{"Content-Type": ct}, Body: []byte(body), Remote: "10.0.0.1"}
	}
	cases := []struct {
		name    string
		handler bus.Handler
		r       *bus.Request
		status  int
		text    string
		expr    string
	}{
		{"login, a form", s.signins.Login, req("application/x-www-form-urlencoded", "email=a@example.com"), 415, "Unsupported media type", ""},
		{"login, bad JSON", s.signins.Login, req("application/json", "{"), 400, "Content could not be parsed", ""},
		{"login, bad e-mail", s.signins.Login, req("application/json", `{"email":"x","password":"12345678"}`), 400, "Valid email address is required", "email"},
		{"profile, no login", s.signins.ChooseProfile, req("application/json", `{"profile":"m1"}`), 400, "Missing login", "login"},
		{"profile, no profile", s.signins.ChooseProfile, req("application/json", `{"login":"l1"}`), 400, "Missing profile", "profile"},
		{"set password, short", s.accounts.SetPassword, req("application/json",
			`{"id":"6f1c2a0e-7a44-4d8e-9a55-3c1f0b2d9e11","secret":"s","password":"short"}`), 400, account.ShortPasswordText, "password"},
		{"reset, bad e-mail", s.accounts.ResetPassword, req("application/json", `{"email":"nobody"}`), 400, "Valid email address is required", "email"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.handler(ctx, tc.r)
			expectOutcome(t, err, tc.status, tc.text, tc.expr)
		})
	}
	if n := s.limiter.Keys(); n != 0 {
		t.Fatalf("%d failures counted for refused input", n)
	}
}

func TestProfileOpen(t *testing.T) {
	cases := []struct {
		name string
		l    session.Login
		text string
	}{
		{"open", session.Login{User: "User/u1"}, ""},
		{"revoked", session.Login{Revoked: true, Granted: true, Membership: "m1"}, "Login revoked"},
		{"granted", session.Login{Granted: true, Membership: "m1"}, "Login granted"},
		{"chosen", session.Login{Membership: "m1"}, "Login profile already set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := signin.ProfileOpen(&tc.l)
			if tc.text == "" {
				expectOutcome(t, err, 0, "", "")
				return
			}
			expectOutcome(t, err, 400, tc.text, "")
		})
	}
}

// Signing in with one active membership answers a code at once, and keeps
// what the sign-in asked for in its login; a wrong password and an unknown
// e-mail get the same answer, and count as failures.
func TestLogin(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "login")
	app := newPublicClient(t, p.project)

	t.Run("one membership", func(t *testing.T) {
		resp, err := p.login(t, "10.1.1.1", map[string]any{"email": strings.ToUpper(p.email), "clientId": app, "nonce": "n1",
			"codeChallenge": rfcChallenge, "codeChallengeMethod": "S256"})
		body := decoded(t, resp, err, 200)
		loginID, _ := body["login"].(string)
		code, _ := body["code"].(string)
		if len(body) != 2 || !strings.HasPrefix(code, loginID+".") {
			t.Fatalf("answer %v", body)
		}
		l, err := live.conns.Sessions.GetLogin(ctx, loginID)
		if err != nil {
			t.Fatal(err)
		}
		if l.User != p.user || l.Membership != p.membership || l.Client != app || l.Scope != "openid" || l.Nonce != "n1" ||
			l.Challenge != rfcChallenge || l.ChallengeMethod != "S256" || l.Granted || l.Start == 0 || l.AuthTime == 0 ||
			!auth.SecretMatches(l.CodeDigest, strings.TrimPrefix(code, loginID+".")) {
			t.Fatalf("login %+v", l)
		}
	})

	for _, tc := range []struct {
		name, email, password string
	}{
		{"wrong password", p.email, "not the password"},
		{"unknown e-mail", newEmail("nobody"), p.password},
	} {
		t.Run(tc.name, func(t *testing.T) {
			remote := "10.1.1.2"
			_, err := live.svc.signins.Login(ctx, jsonRequest(remote, map[string]any{"email": tc.email, "password": tc.password}))
			expectOutcome(t, err, 400, "Email or password is invalid", "")
			if n := live.svc.limiter.Failures(remote, tc.email); n != 1 {
				t.Fatalf("%d failures counted, want 1", n)
			}
		})
	}

	t.Run("a success clears the failures", func(t *testing.T) {
		remote := "10.1.1.3"
		for range 3 {
			_, err := p.login(t, remote, map[string]any{"password": "not the password"})
			expectOutcome(t, err, 400, "Email or password is invalid", "")
		}
		resp, err := p.login(t, remote, nil)
		decoded(t, resp, err, 200)
		if n := live.svc.limiter.Failures(remote, p.email); n != 0 {
			t.Fatalf("%d failures left after a success", n)
		}
	})

	t.Run("too many failures", func(t *testing.T) {
		remote := "10.1.1.4"
		for range limits.MaxFailures {
			_, err := p.login(t, remote, map[string]any{"password": "not the password"})
			expectOutcome(t, err, 400, "Email or password is invalid", "")
		}
		// The right password no longer helps from there.
		_, err := p.login(t, remote, nil)
		if fe := fhir.AsError(err); err == nil || fe.Status != 429 {
			t.Fatalf("%v, want 429", err)
		}
	})
}

// Who may not sign in, though the password is right.
func TestLoginRefusedPeople(t *testing.T) {
	ctx := context.Background()

	t.Run("no password set", func(t *testing.T) {
		email := newEmail("invited")
		newUser(t, email, "", "")
		_, err := live.svc.signins.Login(ctx, jsonRequest("10.1.2.1", map[string]any{"email": email, "password": "any password at all"}))
		expectOutcome(t, err, 400, "Email or password is invalid", "")
	})

	t.Run("an inactive membership only", func(t *testing.T) {
		p := newPerson(t, "inactive")
		setMembership(t, p.membership, func(m map[string]any) { m["active"] = false })
		_, err := p.login(t, "10.1.2.2", nil)
		expectOutcome(t, err, 400, "User not found", "")
	})

	t.Run("a blocked address", func(t *testing.T) {
		p := newPerson(t, "blocked")
		policy := blockingPolicy(t, p.project, "10.66.0.0/16")
		setMembership(t, p.membership, func(m map[string]any) { m["accessPolicy"] = map[string]any{"reference": policy} })
		_, err := p.login(t, "10.66.1.1", nil)
		expectOutcome(t, err, 400, "IP address not allowed", "")
		resp, err := p.login(t, "10.67.1.1", nil)
		decoded(t, resp, err, 200)
	})

	t.Run("a project's own user, without its project", func(t *testing.T) {
		project := newProject(t, "Scoped")
		email := newEmail("scoped")
		user := newUser(t, email, "scoped password", project)
		newMembership(t, project, "User/"+user, newPractitioner(t, project, "Sco", "Ped"), nil)
		in := map[string]any{"email": email, "password": "scoped password"}
		_, err := live.svc.signins.Login(ctx, jsonRequest("10.1.2.3", in))
		expectOutcome(t, err, 400, "Email or password is invalid", "")
		in["projectId"] = project
		resp, err := live.svc.signins.Login(ctx, jsonRequest("10.1.2.3", in))
		if body := decoded(t, resp, err, 200); body["code"] == nil {
			t.Fatalf("answer %v", body)
		}
	})
}

// With several memberships the sign-in lists them, and the choice of one
// gives the code; a login's profile is chosen once.
func TestLoginChooseProfile(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "several")
	other := newProject(t, "Second")
	second := newMembership(t, other, p.user, newPractitioner(t, other, "Ada", "Second"), nil)
	inactive := newMembership(t, newProject(t, "Third"), p.user, p.profile, map[string]any{"active": false})
	blocked := newProject(t, "Fourth")
	policy := blockingPolicy(t, blocked, "10.77.0.0/16")
	fourth := newMembership(t, blocked, p.user, p.profile, map[string]any{"accessPolicy": map[string]any{"reference": policy}})

	start := func(fields map[string]any) string {
		t.Helper()
		resp, err := p.login(t, "10.77.1.1", fields)
		body := decoded(t, resp, err, 200)
		if _, ok := body["code"]; ok {
			t.Fatalf("a code before a profile was chosen: %v", body)
		}
		var ids []string
		for _, m := range body["memberships"].([]any) {
			ids = append(ids, m.(map[string]any)["id"].(string))
		}
		slices.Sort(ids)
		want := []string{p.membership, second, fourth}
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Fatalf("memberships %v, want %v (not %s, inactive)", ids, want, inactive)
		}
		return body["login"].(string)
	}
	choose := func(login, profile, remote string) (*bus.Response, error) {
		return live.svc.signins.ChooseProfile(ctx, jsonRequest(remote, map[string]any{"login": login, "profile": profile}))
	}

	login := start(map[string]any{"scope": "openid profile"})
	_, err := choose(login, inactive, "10.77.1.1")
	expectOutcome(t, err, 400, "Profile not found", "profile")
	_, err = choose(login, fourth, "10.77.1.1")
	expectOutcome(t, err, 400, "IP address not allowed", "")
	resp, err := choose(login, second, "10.77.1.1")
	body := decoded(t, resp, err, 200)
	if body["login"] != login || !strings.HasPrefix(body["code"].(string), login+".") {
		t.Fatalf("answer %v", body)
	}
	if l, err := live.conns.Sessions.GetLogin(ctx, login); err != nil || l.Membership != second || l.Scope != "openid profile" {
		t.Fatalf("login %+v %v", l, err)
	}
	_, err = choose(login, p.membership, "10.77.1.1")
	expectOutcome(t, err, 400, "Login profile already set", "")
	_, err = choose(uuid.NewString(), second, "10.77.1.1")
	expectOutcome(t, err, 404, "Not found", "")

	// Asking for one project narrows the choice to it.
	resp, err = p.login(t, "10.77.1.1", map[string]any{"projectId": other})
	if body := decoded(t, resp, err, 200); body["code"] == nil {
		t.Fatalf("one project asked for: %v", body)
	}
}

// Setting a password with a link: the new password works, the old one
// does not, the link works once, and every earlier sign-in ends.
func TestSetPassword(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "setpass")
	earlier := p.code(t, nil)
	id, link, err := live.svc.accounts.NewPasswordRequest(ctx, p.userID, "reset", "")
	if err != nil {
		t.Fatal(err)
	}
	_, secret, _ := strings.Cut(strings.TrimPrefix(link, testBase+"setpassword/"), "/")
	set := func(secret, password string) (*bus.Response, error) {
		return live.svc.accounts.SetPassword(ctx, jsonRequest("10.1.3.1", map[string]any{"id": id, "secret": secret, "password": password}))
	}
	_, err = set("not the secret", "a new password")
	expectOutcome(t, err, 400, "Incorrect secret", "")
	resp, err := set(secret, "a new password")
	if err != nil || resp.Status != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	if bucket, rev, ok := resp.Session(); !ok || bucket != session.EndedBucket || rev == 0 {
		t.Fatalf("the answer waits for %q %d %v", bucket, rev, ok)
	}
	_, err = set(secret, "another new password")
	expectOutcome(t, err, 400, "Already used", "")

	_, err = p.login(t, "10.1.3.1", nil)
	expectOutcome(t, err, 400, "Email or password is invalid", "")
	p.password = "a new password"
	p.code(t, nil)
	testkit.TokenError(t, redeem(t, earlier), 400, "invalid_grant", "Token revoked")
}

// A code redeemed with its verifier gives access, id and refresh tokens
// for the login's membership; a second redemption ends the login.
func TestAuthorizationCode(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "code")
	app1, app2 := newPublicClient(t, p.project), newPublicClient(t, p.project)
	code := p.code(t, map[string]any{"clientId": app1, "nonce": "n-1", "scope": "openid offline_access"})
	loginID, _, _ := strings.Cut(code, ".")

	for _, tc := range []struct {
		name, verifier, client string
		code, text             string
	}{
		{"no verifier", "", "", "invalid_request", "Missing code verifier"},
		{"a wrong verifier", rfcVerifier + "x", "", "invalid_grant", "Invalid code verifier"},
		{"another client", rfcVerifier, app2, "invalid_grant", "Invalid client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {tc.verifier}, "client_id": {tc.client}}
			testkit.TokenError(t, token(t, form, nil), 400, tc.code, tc.text)
		})
	}
	// A client that does not exist has not authenticated.
	unknown := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {rfcVerifier}, "client_id": {"no-such-client"}}
	testkit.TokenError(t, token(t, unknown, nil), 401, "invalid_client", "Invalid client")
	testkit.TokenError(t, redeem(t, loginID+".not-the-secret"), 400, "invalid_grant", "Invalid code")
	testkit.TokenError(t, redeem(t, uuid.NewString()+".secret"), 400, "invalid_grant", "Invalid code")

	resp := redeem(t, code)
	body := decoded(t, resp, nil, 200)
	if body["token_type"] != "Bearer" || body["expires_in"] != 600.0 || body["scope"] != "openid offline_access" || resp.Header["Cache-Control"] != "no-store" {
		t.Fatalf("answer %v %v", body, resp.Header)
	}
	if got, want := body["project"], map[string]any{"reference": "Project/" + p.project, "display": "Project " + p.project[:4]}; !reflect.DeepEqual(got, want) {
		t.Fatalf("project %v, want %v", got, want)
	}
	if got, want := body["profile"], map[string]any{"reference": p.profile, "display": "Profile of " + p.user}; !reflect.DeepEqual(got, want) {
		t.Fatalf("profile %v, want %v", got, want)
	}
	if _, ok := body["patient"]; ok {
		t.Fatal("a practitioner's answer names a patient")
	}
	access := verify(t, body["access_token"].(string), testBase)
	if !access.IsAccessToken() || access.LoginID != loginID || access.Subject != p.userID || access.Username != p.userID ||
		access.Profile != p.profile || access.ClientID != app1 || access.Scope != "openid offline_access" {
		t.Fatalf("access token %+v", access)
	}
	id := verify(t, body["id_token"].(string), app1)
	if id.FHIRUser != p.profile || id.Nonce != "n-1" || id.Subject != p.userID || id.IsAccessToken() {
		t.Fatalf("id token %+v", id)
	}
	refresh := verify(t, body["refresh_token"].(string), testBase)
	if refresh.RefreshSecret == "" || refresh.LoginID != loginID || refresh.IsAccessToken() {
		t.Fatalf("refresh token %+v", refresh)
	}

	again := redeem(t, code)
	testkit.TokenError(t, again, 400, "invalid_grant", "Token already granted")
	if bucket, rev, ok := again.Session(); !ok || bucket != session.LoginsBucket || rev == 0 {
		t.Fatalf("the refusal waits for %q %d %v", bucket, rev, ok)
	}
	if l, err := live.conns.Sessions.GetLogin(ctx, loginID); err != nil || !l.Revoked {
		t.Fatalf("a replayed code left its login %+v %v", l, err)
	}
}

// A refresh token works once: each use gives the next, and an old one
// coming back ends the chain.
func TestRefreshToken(t *testing.T) {
	p := newPerson(t, "refresh")
	refresh := func(tok string) *bus.Response {
		t.Helper()
		return token(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok}}, nil)
	}
	first := decoded(t, redeem(t, p.code(t, map[string]any{"scope": "openid offline"})), nil, 200)["refresh_token"].(string)
	resp := refresh(first)
	body := decoded(t, resp, nil, 200)
	second, _ := body["refresh_token"].(string)
	if second == "" || second == first || body["access_token"] == nil || body["scope"] != "openid offline" {
		t.Fatalf("answer %v", body)
	}
	testkit.TokenError(t, refresh(first), 400, "invalid_grant", "Invalid token")
	// The stolen copy's return ended the login: the good one is spent too.
	testkit.TokenError(t, refresh(second), 400, "invalid_grant", "Token revoked")

	// A login gone from the bucket.
	c := verify(t, second, testBase)
	c.LoginID = uuid.NewString()
	gone, err := live.svc.oauth.Signer().Sign(c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	testkit.TokenError(t, refresh(gone), 400, "invalid_grant", "Invalid refresh token")
}

// What the tokens say depends on the membership the login acts as.
func TestUserTokens(t *testing.T) {
	t.Run("without offline access, no refresh token", func(t *testing.T) {
		p := newPerson(t, "online")
		if body := decoded(t, redeem(t, p.code(t, nil)), nil, 200); body["refresh_token"] != nil || body["id_token"] == nil {
			t.Fatalf("answer %v", body)
		}
	})
	t.Run("a patient is named", func(t *testing.T) {
		p := newPerson(t, "patient")
		patient := newResource(t, p.project, map[string]any{"resourceType": "Patient"})
		setMembership(t, p.membership, func(m map[string]any) { m["profile"] = map[string]any{"reference": patient} })
		body := decoded(t, redeem(t, p.code(t, nil)), nil, 200)
		if body["patient"] != strings.TrimPrefix(patient, "Patient/") {
			t.Fatalf("patient %v, want %s", body["patient"], patient)
		}
		if got := body["profile"]; !reflect.DeepEqual(got, map[string]any{"reference": patient}) {
			t.Fatalf("profile %v: a display of another profile", got)
		}
	})
	t.Run("a super admin gets no refresh token", func(t *testing.T) {
		p := newPerson(t, "super")
		p.membership = newMembership(t, clients.SuperAdminProjectID, p.user, p.profile, nil)
		body := decoded(t, redeem(t, p.code(t, map[string]any{"scope": "openid offline_access", "projectId": clients.SuperAdminProjectID})), nil, 200)
		if body["refresh_token"] != nil || body["access_token"] == nil {
			t.Fatalf("answer %v", body)
		}
	})
	t.Run("a membership made inactive after the code", func(t *testing.T) {
		p := newPerson(t, "deactivated")
		code := p.code(t, nil)
		setMembership(t, p.membership, func(m map[string]any) { m["active"] = false })
		testkit.TokenError(t, redeem(t, code), 400, "invalid_grant", "Profile not active")
	})
	t.Run("a membership removed after the code", func(t *testing.T) {
		p := newPerson(t, "removed")
		code := p.code(t, nil)
		if err := live.conns.Repo.Delete(context.Background(), repo.AllProjects, "ProjectMembership", p.membership); err != nil {
			t.Fatal(err)
		}
		project1(t, "ProjectMembership", p.membership, p.project)
		testkit.TokenError(t, redeem(t, code), 400, "invalid_grant", "Profile not active")
	})
}

// Signing out ends what the caller signed in with: a user's login, a
// client's one token, a browser's sign-in.
func TestLogout(t *testing.T) {
	ctx := context.Background()
	t.Run("a user", func(t *testing.T) {
		p := newPerson(t, "logout")
		code := p.code(t, nil)
		loginID, _, _ := strings.Cut(code, ".")
		resp, err := live.svc.signins.Logout(ctx, &bus.Request{Method: "POST", Header: map[string]string{},
			Principal: &bus.Principal{User: p.user, LoginID: loginID}})
		if err != nil || resp.Status != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		if bucket, rev, ok := resp.Session(); !ok || bucket != session.LoginsBucket || rev == 0 {
			t.Fatalf("the answer waits for %q %d %v", bucket, rev, ok)
		}
		if l, err := live.conns.Sessions.GetLogin(ctx, loginID); err != nil || !l.Revoked {
			t.Fatalf("login %+v %v", l, err)
		}
		testkit.TokenError(t, redeem(t, code), 400, "invalid_grant", "Token revoked")
	})
	t.Run("a client's token", func(t *testing.T) {
		jti := uuid.NewString()
		resp, err := live.svc.signins.Logout(ctx, &bus.Request{Method: "POST", Header: map[string]string{},
			Principal: &bus.Principal{User: "ClientApplication/c1", LoginID: "l1", TokenID: jti}})
		if err != nil || resp.Status != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		if bucket, _, ok := resp.Session(); !ok || bucket != session.RevokedBucket {
			t.Fatalf("the answer waits for %q %v", bucket, ok)
		}
		if v := keyValue(t, session.RevokedBucket, jti); v == nil {
			t.Fatal("the token is not revoked")
		}
	})
	t.Run("a browser", func(t *testing.T) {
		b := web.Browser{ID: strings.Repeat("L", 43)}
		if _, err := live.svc.browsers.Put(ctx, b.Key(), []byte(`{"user":"User/u1"}`)); err != nil {
			t.Fatal(err)
		}
		// Its own sign-out page's button (a GET alone asks first: logout_test.go).
		csrf, err := live.svc.pages.CSRFToken(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := live.svc.signins.Logout(ctx, formRequest(url.Values{"csrf": {csrf}}, map[string]string{"Cookie": web.Cookie + "=" + b.ID}))
		if err != nil || resp.Status != 200 || !strings.Contains(string(resp.Body), "You are signed out in this browser.") {
			t.Fatalf("%v %v", resp, err)
		}
		if v := keyValue(t, signin.BrowserBucket, b.Key()); v != nil {
			t.Fatalf("the browser is still signed in: %s", v)
		}
	})
}

// newPublicClient stores a ClientApplication without a secret or a key set
// (a public client: PKCE alone, as single-page apps sign in) and returns
// its id.
func newPublicClient(t *testing.T, project string) string {
	t.Helper()
	ref := newResource(t, project, map[string]any{"resourceType": "ClientApplication", "name": "Public app"})
	return strings.TrimPrefix(ref, "ClientApplication/")
}

// Signing in for a client confines the sign-in to the client's project,
// as Medplum does: an unknown client is 404, another project's id is
// refused, and a person of another project only is not found there.
func TestLoginForAClient(t *testing.T) {
	p := newPerson(t, "forclient")
	elsewhere := newProject(t, "Elsewhere")
	theirs := newPublicClient(t, elsewhere)
	_, err := p.login(t, "10.1.9.1", map[string]any{"clientId": uuid.NewString()})
	expectOutcome(t, err, 404, "Not found", "")
	_, err = p.login(t, "10.1.9.1", map[string]any{"clientId": theirs, "projectId": p.project})
	expectOutcome(t, err, 400, "Invalid projectId", "projectId")
	_, err = p.login(t, "10.1.9.1", map[string]any{"clientId": theirs})
	expectOutcome(t, err, 400, "User not found", "")
	// Once a member there too, the code is for that membership only.
	there := newMembership(t, elsewhere, p.user, p.profile, nil)
	resp, err := p.login(t, "10.1.9.1", map[string]any{"clientId": theirs})
	body := decoded(t, resp, err, 200)
	loginID, _ := body["login"].(string)
	if l, err := live.conns.Sessions.GetLogin(context.Background(), loginID); err != nil || l.Membership != there {
		t.Fatalf("login %+v %v", l, err)
	}
}
