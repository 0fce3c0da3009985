package identity

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pinion-health/pinion/pkg/bus"
)

// A sign-in the page sent to a provider comes back only to the browser
// that started it (login CSRF): that browser is signed in and sent back
// to its authorization request; another browser gets a page, not a
// sign-in.
func TestExternalPageSignInIsBoundToItsBrowser(t *testing.T) {
	ctx := context.Background()
	p := newOIDCProvider(t)
	domain := newDomain(t, p.idp(nil))
	email := "gus@" + domain
	project := newProject(t, "Page SSO")
	newMembership(t, project, "User/"+newUser(t, email, "", ""), newPractitioner(t, project, "Gus", "Page"), nil)
	starter, other := browserOf(&bus.Request{}), browserOf(&bus.Request{})
	binding, err := live.svc.externalBinding(ctx, starter)
	if err != nil {
		t.Fatal(err)
	}
	authorize := url.Values{"client_id": {"some-app"}, "state": {"s1"}}.Encode()
	back := func(b browser) (*bus.Response, error) {
		st, _ := json.Marshal(externalState{Domain: domain, Nonce: "n-page", Authorize: authorize, Browser: binding})
		code := p.code(func(c jwt.MapClaims) { c["email"] = email; c["nonce"] = "n-page" }, nil)
		return live.svc.externalCallback(ctx, &bus.Request{Method: "GET", Remote: "10.9.1.1",
			Header: map[string]string{"Cookie": browserCookie + "=" + b.id},
			Query:  url.Values{"code": {code}, "state": {string(st)}}})
	}
	resp, err := back(other)
	if err != nil || resp.Status != 400 || !strings.Contains(string(resp.Body), "another browser") {
		t.Fatalf("another browser: %v %v", resp, err)
	}
	resp, err = back(starter)
	if err != nil || resp.Status != 302 || resp.Header["Location"] != testBase+"oauth2/authorize?"+authorize ||
		!strings.HasPrefix(resp.Header["Set-Cookie"], browserCookie+"=") || strings.Contains(resp.Header["Set-Cookie"], starter.id) {
		t.Fatalf("the starting browser: %+v %v", resp, err)
	}
}
