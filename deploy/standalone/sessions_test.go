package standalone

import (
	"crypto/sha256"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
)

// signInWith runs the PKCE sign-in from a browser with this User-Agent and
// returns the tokens.
func signInWith(t *testing.T, email, password, projectID, userAgent string) map[string]any {
	t.Helper()
	verifier := "verifier-" + strings.Repeat("y", 40)
	sum := sha256.Sum256([]byte(verifier))
	r := do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{"email": email, "password": password,
		"projectId": projectID, "scope": "openid offline_access", "codeChallenge": base64.RawURLEncoding.EncodeToString(sum[:]),
		"codeChallengeMethod": "S256"}), "User-Agent", userAgent)
	expect(t, r, 200)
	form := url.Values{"grant_type": {"authorization_code"}, "code": {r.json(t)["code"].(string)}, "code_verifier": {verifier}}
	r = do(t, "POST", "oauth2/token", "", formType, []byte(form.Encode()), "User-Agent", userAgent)
	expect(t, r, 200)
	return r.json(t)
}

// The app's Security page: /auth/me lists the person's sessions, with the
// browser and system of each, and revoking one ends its access and refresh
// tokens on the next request while the other goes on; someone else's
// session is 404 and stays alive.
func TestSecurityPageSessions(t *testing.T) {
	pid, su := adminProject(t, "security page")
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Sec", "lastName", "Urity",
		"email", "security-page@example.com", "password", "security page password")
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Some", "lastName", "One",
		"email", "security-page-other@example.com", "password", "security page other")
	const (
		chrome  = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"
		firefox = "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0"
	)
	a := signInWith(t, "security-page@example.com", "security page password", pid, chrome)
	b := signInWith(t, "security-page@example.com", "security page password", pid, firefox)
	other := signInWith(t, "security-page-other@example.com", "security page other", pid, chrome)
	aTok, bTok, otherTok := a["access_token"].(string), b["access_token"].(string), other["access_token"].(string)

	r := do(t, "GET", "auth/me", bTok, "", nil)
	expect(t, r, 200)
	me := r.json(t)
	if u := me["user"].(map[string]any); u["email"] != "security-page@example.com" || len(u) != 3 {
		t.Fatalf("user %v", u)
	}
	sessions := me["security"].(map[string]any)["sessions"].([]any)
	found := map[string]map[string]any{}
	for _, s := range sessions {
		s := s.(map[string]any)
		found[s["id"].(string)] = s
	}
	for _, c := range []struct {
		tok, browser, os string
	}{{aTok, "Chrome", "Windows"}, {bTok, "Firefox", "Linux"}} {
		s := found[loginOf(t, c.tok)]
		if s == nil || s["browser"] != c.browser || s["os"] != c.os || s["authMethod"] != "password" || s["remoteAddress"] != "127.0.0.1" {
			t.Fatalf("session of %s: %v (all: %v)", c.browser, s, sessions)
		}
	}
	if len(sessions) != 2 {
		t.Fatalf("sessions %v", sessions)
	}

	// Someone else's session: 404, and it stays alive.
	r = do(t, "POST", "auth/revoke", bTok, "application/json", mustJSON(map[string]any{"loginId": loginOf(t, otherTok)}))
	expectOutcome(t, r, 404, "Not found")
	expect(t, do(t, "GET", "auth/me", otherTok, "", nil), 200)

	// Revoke the Chrome session from the Firefox one: its token stops on
	// the next request, its refresh token too; the Firefox one goes on.
	expect(t, do(t, "POST", "auth/revoke", bTok, "application/json", mustJSON(map[string]any{"loginId": loginOf(t, aTok)})), 200)
	expect(t, do(t, "GET", "fhir/R4/Patient", aTok, "", nil), 401)
	r = do(t, "POST", "oauth2/token", "", formType, []byte(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {a["refresh_token"].(string)}}.Encode()))
	if r.status != 400 || r.json(t)["error"] != "invalid_grant" {
		t.Fatalf("refresh of a revoked session: %d %s", r.status, r.body)
	}
	r = do(t, "GET", "auth/me", bTok, "", nil)
	expect(t, r, 200)
	if sessions := r.json(t)["security"].(map[string]any)["sessions"].([]any); len(sessions) != 1 ||
		sessions[0].(map[string]any)["id"] != loginOf(t, bTok) {
		t.Fatalf("sessions after the revoke: %v", sessions)
	}
}
