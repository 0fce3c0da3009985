package identity

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/services/identity/web"
)

// signedInBrowser is a browser signed in as user, and its Cookie header.
func signedInBrowser(t *testing.T, user string) (web.Browser, map[string]string) {
	t.Helper()
	b := web.BrowserOf(&bus.Request{Header: map[string]string{}})
	b.IsNew = false
	if _, err := live.svc.browsers.Put(context.Background(), b.Key(), []byte(`{"user":"`+user+`"}`)); err != nil {
		t.Fatal(err)
	}
	return b, map[string]string{"Cookie": web.Cookie + "=" + b.ID}
}

func stillSignedIn(t *testing.T, b web.Browser) bool {
	t.Helper()
	bs, err := live.svc.signins.SignedIn(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return bs != nil
}

// idTokenHint is an ID token for a person (User/<sub>) and a client, signed
// by signer with this lifetime.
func idTokenHint(t *testing.T, signer *auth.Signer, sub, client string, lifetime time.Duration) string {
	t.Helper()
	c := &auth.Claims{LoginID: "l1", FHIRUser: "Practitioner/p1", ClientID: client}
	c.Subject = sub
	c.Audience = jwt.ClaimStrings{client}
	tok, err := signer.Sign(c, lifetime)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// RP-initiated logout: only an application that proves it asked signs a
// browser out without a question, and only it is returned to.
func TestRPInitiatedLogout(t *testing.T) {
	ctx := context.Background()
	project := newProject(t, "rp logout")
	app, _ := newClient(t, project, map[string]any{"name": "Web app", "redirectUris": []any{webCallback}})
	other, _ := newClient(t, project, map[string]any{"name": "Other app", "redirectUris": []any{"https://other.example/cb"}})
	const user = "u-rp-logout"
	otherKey, err := auth.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	otherKey.ID = live.svc.oauth.Signer().Key.ID
	valid := idTokenHint(t, live.svc.oauth.Signer(), user, app, time.Hour)
	cases := []struct {
		name   string
		query  url.Values
		status int
		// location is where the browser is sent; "" for none.
		location string
		// page is a text the page shows.
		page      string
		signedOut bool
	}{
		{"a valid hint, a registered address", url.Values{"id_token_hint": {valid}, "post_logout_redirect_uri": {webCallback}, "state": {"bye"}},
			302, webCallback + "?state=bye", "", true},
		{"a valid hint with its client_id", url.Values{"id_token_hint": {valid}, "client_id": {app}, "post_logout_redirect_uri": {webCallback}},
			302, webCallback + "?", "", true},
		{"an expired hint", url.Values{"id_token_hint": {idTokenHint(t, live.svc.oauth.Signer(), user, app, -time.Hour)}, "post_logout_redirect_uri": {webCallback}, "state": {"s"}},
			302, webCallback + "?state=s", "", true},
		{"a valid hint, an address its client did not register", url.Values{"id_token_hint": {valid}, "post_logout_redirect_uri": {"https://other.example/cb"}},
			200, "", "You are signed out in this browser.", true},
		{"a valid hint, no address", url.Values{"id_token_hint": {valid}},
			200, "", "You are signed out in this browser.", true},
		{"a hint for another client than client_id", url.Values{"id_token_hint": {valid}, "client_id": {other}, "post_logout_redirect_uri": {"https://other.example/cb"}},
			400, "", "is not the one the sign-in was for", false},
		{"no hint, a registered address", url.Values{"client_id": {app}, "post_logout_redirect_uri": {webCallback}, "state": {"bye"}},
			200, "", "Sign out of Pinion?", false},
		{"a hint of another issuer", url.Values{"id_token_hint": {idTokenHint(t, &auth.Signer{Key: live.svc.oauth.Signer().Key, Issuer: "https://evil.example/"}, user, app, time.Hour)},
			"post_logout_redirect_uri": {webCallback}}, 200, "", "Sign out of Pinion?", false},
		{"a hint with a bad signature", url.Values{"id_token_hint": {idTokenHint(t, &auth.Signer{Key: otherKey, Issuer: testBase}, user, app, time.Hour)},
			"post_logout_redirect_uri": {webCallback}}, 200, "", "Sign out of Pinion?", false},
		{"a hint for someone else", url.Values{"id_token_hint": {idTokenHint(t, live.svc.oauth.Signer(), "someone-else", app, time.Hour)},
			"post_logout_redirect_uri": {webCallback}}, 200, "", "Sign out of Pinion?", false},
		{"an access token as the hint", url.Values{"id_token_hint": {decoded(t, redeem(t, newPerson(t, "rp-hint").code(t, nil)), nil, 200)["access_token"].(string)},
			"post_logout_redirect_uri": {webCallback}}, 200, "", "Sign out of Pinion?", false},
	}
	for _, c := range cases {
		for _, method := range []string{"GET", "POST"} {
			t.Run(c.name+" by "+method, func(t *testing.T) {
				b, cookie := signedInBrowser(t, "User/"+user)
				r := &bus.Request{Method: "GET", Query: c.query, Header: cookie}
				if method == "POST" {
					r = formRequest(c.query, cookie)
				}
				resp, err := live.svc.signins.Logout(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				if resp.Status != c.status || resp.Header["Location"] != c.location || !strings.Contains(string(resp.Body), c.page) {
					t.Fatalf("%d to %q, want %d to %q:\n%s", resp.Status, resp.Header["Location"], c.status, c.location, resp.Body)
				}
				if signedIn := stillSignedIn(t, b); signedIn == c.signedOut {
					t.Fatalf("still signed in: %v", signedIn)
				}
			})
		}
	}
}

// The page's button signs out, with this browser's CSRF token only; an
// API call without a token is refused as before.
func TestSignOutPage(t *testing.T) {
	ctx := context.Background()
	b, cookie := signedInBrowser(t, "User/u-sign-out-page")
	resp, err := live.svc.signins.Logout(ctx, &bus.Request{Method: "GET", Header: cookie})
	if err != nil || resp.Status != 200 || !strings.Contains(string(resp.Body), `<form method="post">`) {
		t.Fatalf("%v %v", resp, err)
	}
	csrf, err := live.svc.pages.CSRFToken(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := signedInBrowser(t, "User/u-other")
	otherCSRF, err := live.svc.pages.CSRFToken(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = live.svc.signins.Logout(ctx, formRequest(url.Values{"csrf": {otherCSRF}}, cookie))
	if err != nil || resp.Status != 403 || !stillSignedIn(t, b) {
		t.Fatalf("another browser's form: %v %v", resp, err)
	}
	_, err = live.svc.signins.Logout(ctx, jsonRequest("", map[string]any{}))
	expectOutcome(t, err, 401, "Unauthorized", "")
	resp, err = live.svc.signins.Logout(ctx, formRequest(url.Values{"csrf": {csrf}}, cookie))
	if err != nil || resp.Status != 200 || !strings.Contains(string(resp.Body), "You are signed out in this browser.") || resp.Header["Location"] != "" {
		t.Fatalf("%v %v", resp, err)
	}
	if stillSignedIn(t, b) {
		t.Fatal("the button did not sign out")
	}
}
