package standalone

import (
	"strings"
	"testing"
)

// POST /oauth2/logout takes a browser's form without a token now (OpenID
// Connect RP-initiated logout); an API call without one is still refused
// as every API call without credentials is.
func TestLogoutWithoutTokenOverHTTP(t *testing.T) {
	r := do(t, "POST", "oauth2/logout", "", "application/json", []byte("{}"))
	expect(t, r, 401)
	if got := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, `Bearer realm="`) {
		t.Fatalf("WWW-Authenticate %q", got)
	}
	// A form from another site, for a browser signed in nowhere: nothing
	// to end, and nowhere to go.
	r = do(t, "POST", "oauth2/logout", "", formType, []byte("post_logout_redirect_uri=https%3A%2F%2Fevil.example%2F"))
	expect(t, r, 200)
	if !strings.Contains(string(r.body), "<h1>Signed out</h1>") || r.header.Get("Location") != "" {
		t.Fatalf("%s", r.body)
	}
}
