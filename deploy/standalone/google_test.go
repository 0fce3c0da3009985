package standalone

import (
	"strings"
	"testing"
)

// POST /auth/google is routed to the identity service through the
// gateway, public and counted as a sign-in: its refusals arrive as
// Medplum's OperationOutcomes. (Credentials are verified against a local
// key set in services/identity's TestGoogleSignIn.)
func TestGoogleRouteOverHTTP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		body map[string]any
		text string
	}{
		{"no client id", map[string]any{"googleCredential": "x"}, "Missing googleClientId"},
		{"no credential", map[string]any{"googleClientId": "x.apps.googleusercontent.com"}, "Missing googleCredential"},
		{"a client id nobody configured", map[string]any{"googleClientId": "nobody.apps.googleusercontent.com", "googleCredential": "x.y.z"}, "Invalid googleClientId"},
	} {
		r := do(t, "POST", "auth/google", "", "application/json", mustJSON(tc.body))
		expect(t, r, 400)
		if !strings.Contains(string(r.body), tc.text) || !strings.Contains(string(r.body), "OperationOutcome") {
			t.Fatalf("%s: %s", tc.name, r.body)
		}
	}
}
