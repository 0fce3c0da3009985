package identity

import (
	"context"
	"encoding/json"
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/services/identity/web"
)

// providerLink is the provider's authorize URL a sign-in page links to.
var providerLink = regexp.MustCompile(`href="([^"]*state=[^"]*)"`)

// startAtProvider posts an address of the provider's domain to the sign-in
// page from a browser, and returns the link's state and nonce.
func startAtProvider(t *testing.T, app webApp, email string) (b web.Browser, state, nonce string) {
	t.Helper()
	b, csrf, header := aBrowser(t)
	page := app.post(t, header, "10.9.1.1", "csrf", csrf, "email", email, "password", "")
	expectPage(t, page, 200, "Continue to your organisation")
	m := providerLink.FindSubmatch(page.Body)
	if m == nil {
		t.Fatalf("no link to the provider:\n%s", page.Body)
	}
	u, err := url.Parse(html.UnescapeString(string(m[1])))
	if err != nil {
		t.Fatal(err)
	}
	state, nonce = u.Query().Get("state"), u.Query().Get("nonce")
	if state == "" || nonce == "" || strings.Contains(state, "{") {
		t.Fatalf("the link's state %q and nonce %q", state, nonce)
	}
	return b, state, nonce
}

// fromProvider is the browser's return to /auth/external.
func fromProvider(b web.Browser, code, state string) (*bus.Response, error) {
	return live.svc.federation.ExternalCallback(context.Background(), &bus.Request{Method: "GET", Remote: "10.9.1.1",
		Header: map[string]string{"Cookie": web.Cookie + "=" + b.ID},
		Query:  url.Values{"code": {code}, "state": {state}}})
}

// A sign-in the page sent to a provider is the server's: the state the
// provider carries is a value the server keeps, bound to the browser that
// started it and to its authorization request, spent once. That browser
// is signed in and sent back to its request; another browser, a state
// spent or made up, and a state from the browser naming a request of its
// own, are refused.
func TestExternalPageSignInIsTheServers(t *testing.T) {
	p := newOIDCProvider(t)
	domain := newDomain(t, p.idp(map[string]any{"usePkce": true}))
	email := "gus@" + domain
	project := newProject(t, "Page SSO")
	newMembership(t, project, "User/"+newUser(t, email, "", ""), newPractitioner(t, project, "Gus", "Page"), nil)
	app := newWebApp(t, project)
	starter, state, nonce := startAtProvider(t, app, email)
	code := func(n string) string {
		return p.code(func(c jwt.MapClaims) { c["email"] = email; c["nonce"] = n }, nil)
	}

	// Another browser: a page, and the starter's sign-in is left to it.
	other, _, _ := aBrowser(t)
	resp, err := fromProvider(other, code(nonce), state)
	if err != nil || resp.Status != 400 || !strings.Contains(string(resp.Body), "another browser") {
		t.Fatalf("another browser: %v %v", resp, err)
	}
	// A state nobody issued.
	resp, err = fromProvider(starter, code(nonce), "made-up")
	if err != nil || resp.Status != 400 || !strings.Contains(string(resp.Body), "Sign-in expired") {
		t.Fatalf("a made-up state: %v %v", resp, err)
	}
	// A token for another sign-in (its nonce) does not verify.
	resp, err = fromProvider(starter, code("another"), state)
	extRefused(t, resp, err, "Failed to verify code")

	// The starter, with the nonce sent: signed in under a new id, back to
	// the request it came from; the provider got the PKCE verifier whose
	// challenge the link carried.
	starter2, state2, nonce2 := startAtProvider(t, app, email)
	resp, err = fromProvider(starter2, code(nonce2), state2)
	if err != nil || resp.Status != 302 || !strings.HasPrefix(resp.Header["Location"], testBase+"oauth2/authorize?") ||
		!strings.HasPrefix(resp.Header["Set-Cookie"], web.Cookie+"=") || strings.Contains(resp.Header["Set-Cookie"], starter2.ID) {
		t.Fatalf("the starting browser: %+v %v", resp, err)
	}
	back, _ := url.Parse(resp.Header["Location"])
	if back.Query().Get("client_id") != app.id || back.Query().Get("redirect_uri") != webCallback {
		t.Fatalf("back to %s", back)
	}
	p.mu.Lock()
	form := p.seen[len(p.seen)-1]
	p.mu.Unlock()
	if form.Get("code_verifier") == "" {
		t.Fatalf("no PKCE verifier at the provider: %v", form)
	}
	// Spent: the same state again is refused.
	resp, err = fromProvider(starter2, code(nonce2), state2)
	if err != nil || resp.Status != 400 || !strings.Contains(string(resp.Body), "Sign-in expired") {
		t.Fatalf("a spent state: %v %v", resp, err)
	}

	// Earlier versions kept the request and browser in the state itself:
	// a state from the browser naming them is refused outright.
	forged, _ := json.Marshal(map[string]any{"domain": domain, "authorize": app.params.Encode(), "browser": "anything"})
	resp, err = fromProvider(starter, code(""), string(forged))
	extRefused(t, resp, err, "Invalid state")
}
