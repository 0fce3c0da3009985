package standalone

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// totpCode is RFC 6238's code (SHA-1, 30 s, 6 digits) for the secret of an
// otpauth URI at t, computed here independently of the server's library.
func totpCode(t *testing.T, uri string, at time.Time) string {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "otpauth" || u.Host != "totp" {
		t.Fatalf("enrollUri %q", uri)
	}
	key, err := base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(strings.ToUpper(u.Query().Get("secret")))
	if err != nil {
		t.Fatalf("secret of %q: %v", uri, err)
	}
	var msg [8]byte
	binary.BigEndian.PutUint64(msg[:], uint64(at.Unix()/30))
	h := hmac.New(sha1.New, key)
	h.Write(msg[:])
	sum := h.Sum(nil)
	off := sum[len(sum)-1] & 0x0f
	n := binary.BigEndian.Uint32(sum[off:off+4]) & 0x7fffffff
	return fmt.Sprintf("%06d", n%1_000_000)
}

// pkce is a verifier and its S256 challenge.
func mfaPKCE() (verifier, challenge string) {
	verifier = "mfa-verifier-" + strings.Repeat("v", 40)
	sum := sha256.Sum256([]byte(verifier))
	return verifier, base64.RawURLEncoding.EncodeToString(sum[:])
}

// expectText checks a 400 OperationOutcome's text.
func expectText(t *testing.T, r *response, status int, text string) {
	t.Helper()
	expect(t, r, status)
	if got := r.outcomeText(t); got != text {
		t.Fatalf("%q, want %q: %s", got, text, r.body)
	}
}

// TestMFAOverHTTP: Medplum's MFA flow through the gateway, with each
// refusal's status and text: an invite that requires MFA, enrolment at
// sign-in, a sign-in with a code, a reused, an expired and a wrong code, a
// factor that cannot be disabled while required, and an admin's reset
// recorded in an AuditEvent.
func TestMFAOverHTTP(t *testing.T) {
	pid, su := adminProject(t, "MFA clinic")
	email := fmt.Sprintf("mfa-%d@example.com", time.Now().UnixNano())
	r := do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Mo", "lastName", "Factor", "email", email,
			"password", "correct horse battery", "sendEmail", false, "mfaRequired", true))
	expect(t, r, 200)
	membership := r.json(t)["id"].(string)
	verifier, challenge := mfaPKCE()
	login := func() map[string]any {
		t.Helper()
		r := do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{
			"email": email, "password": "correct horse battery", "codeChallenge": challenge, "codeChallengeMethod": "S256"}))
		expect(t, r, 200)
		return r.json(t)
	}
	redeem := func(code string) string {
		t.Helper()
		form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {verifier}}
		r := do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
		expect(t, r, 200)
		return r.json(t)["access_token"].(string)
	}
	post := func(path string, body map[string]any) *response {
		return do(t, "POST", path, "", "application/json", mustJSON(body))
	}

	// Required by the invite: enrolment at sign-in, no code before it.
	first := login()
	uri, _ := first["enrollUri"].(string)
	if first["mfaEnrollRequired"] != true || first["code"] != nil || !strings.HasPrefix(uri, "otpauth://totp/") ||
		!strings.HasPrefix(fmt.Sprint(first["enrollQrCode"]), "data:image/png;base64,") {
		t.Fatalf("login answered %v", first)
	}
	expectText(t, post("auth/mfa/verify", map[string]any{"login": first["login"], "token": totpCode(t, uri, time.Now())}), 400, "User not enrolled in MFA")
	// Medplum's text at login-enroll (enrol and disable say "Invalid token").
	expectText(t, post("auth/mfa/login-enroll", map[string]any{"login": first["login"], "token": "000000"}), 400, "Invalid MFA token")
	enrolled := time.Now()
	r = post("auth/mfa/login-enroll", map[string]any{"login": first["login"], "token": totpCode(t, uri, enrolled)})
	expect(t, r, 200)
	out := r.json(t)
	if len(out["recoveryCodes"].([]any)) != 10 {
		t.Fatalf("login-enroll answered %s", r.body)
	}
	tok := redeem(out["code"].(string))
	r = do(t, "GET", "auth/mfa/status", tok, "", nil)
	expect(t, r, 200)
	if st := r.json(t); len(st) != 1 || st["enrolled"] != true {
		t.Fatalf("status %s", r.body)
	}

	// Signed in again: the enrolment's code is spent, an old one expired,
	// a wrong one wrong; the next step's code signs in.
	second := login()
	if second["mfaRequired"] != true || second["code"] != nil {
		t.Fatalf("login answered %v", second)
	}
	for _, code := range []string{totpCode(t, uri, enrolled), totpCode(t, uri, time.Now().Add(-2*time.Minute)), "123456"} {
		expectText(t, post("auth/mfa/verify", map[string]any{"login": second["login"], "token": code}), 400, "Invalid MFA token")
	}
	expectText(t, post("auth/mfa/verify", map[string]any{"login": second["login"]}), 400, "Missing token")
	r = post("auth/mfa/verify", map[string]any{"login": second["login"], "token": totpCode(t, uri, enrolled.Add(30*time.Second))})
	expect(t, r, 200)
	tok = redeem(r.json(t)["code"].(string))
	expectText(t, post("auth/mfa/verify", map[string]any{"login": second["login"], "token": "123456"}), 400, "Login granted")

	// Required: the owner cannot remove it.
	expectText(t, do(t, "POST", "auth/mfa/disable", tok, "application/json", mustJSON(map[string]any{"token": "123456"})), 400,
		"MFA is required for this user and cannot be disabled")

	// The admin's reset: the member enrols again; an AuditEvent says who did it.
	expect(t, do(t, "POST", "admin/projects/"+pid+"/members/"+membership+"/$reset-mfa", tok, "", nil), 403)
	expect(t, do(t, "POST", "admin/projects/"+pid+"/members/"+membership+"/$reset-mfa", su, "", nil), 200)
	if again := login(); again["mfaEnrollRequired"] != true || again["enrollUri"] == uri {
		t.Fatalf("after the reset, login answered %v", again)
	}
	eventually(t, 15*time.Second, "the reset in the audit trail", func() bool {
		r = do(t, "GET", "fhir/R4/AuditEvent?entity=ProjectMembership/"+membership, su, "", nil)
		expect(t, r, 200)
		return strings.Contains(string(r.body), `"mfa-reset"`)
	})
}

// A project reaches no further into a person than its own memberships
// (issue 52): another project's admin who invites the person with
// mfaRequired changes nothing of their own project's sign-in, even when
// the invite ends 409, and cannot reset the person's factors.
func TestAnotherProjectCannotReachTheAccount(t *testing.T) {
	home, su := adminProject(t, "The person's clinic")
	email := fmt.Sprintf("owned-%d@example.com", time.Now().UnixNano())
	const password = "the person's own password"
	expect(t, do(t, "POST", "admin/projects/"+home+"/invite", su, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Own", "lastName", "Er", "email", email, "password", password, "sendEmail", false)), 200)
	// A stranger's project, and its admin.
	strange, _ := adminProject(t, "A stranger's project")
	eveEmail := fmt.Sprintf("eve-%d@example.com", time.Now().UnixNano())
	expect(t, do(t, "POST", "admin/projects/"+strange+"/invite", su, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Eve", "lastName", "Admin", "email", eveEmail, "password", "eve's long password", "admin", true, "sendEmail", false)), 200)
	eve := signIn(t, eveEmail, "eve's long password", strange, "openid")["access_token"].(string)

	// Eve invites the person with mfaRequired; an invite into the
	// person's own project with it ends 409 (already a member).
	r := do(t, "POST", "admin/projects/"+strange+"/invite", eve, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Own", "lastName", "Er", "email", email, "mfaRequired", true, "sendEmail", false))
	expect(t, r, 200)
	inStrange := r.json(t)["id"].(string)
	expect(t, do(t, "POST", "admin/projects/"+home+"/invite", su, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Own", "lastName", "Er", "email", email, "mfaRequired", true, "sendEmail", false)), 409)

	// The person's own project still takes the password alone; the
	// stranger's asks for enrolment when chosen.
	tok := signIn(t, email, password, home, "openid")["access_token"].(string)
	_, challenge := mfaPKCE()
	r = do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{
		"email": email, "password": password, "codeChallenge": challenge, "codeChallengeMethod": "S256"}))
	expect(t, r, 200)
	login := r.json(t)["login"].(string)
	r = do(t, "POST", "auth/profile", "", "application/json", mustJSON(map[string]any{"login": login, "profile": inStrange}))
	expect(t, r, 200)
	if out := r.json(t); out["mfaEnrollRequired"] != true || out["code"] != nil {
		t.Fatalf("choosing the stranger's project: %s", r.body)
	}

	// The person enrols from their own project; the stranger's admin
	// cannot wipe the factor through the stranger's membership.
	r = do(t, "GET", "auth/mfa/status", tok, "", nil)
	expect(t, r, 200)
	uri := r.json(t)["enrollUri"].(string)
	expect(t, do(t, "POST", "auth/mfa/enroll", tok, "application/json", mustJSON(map[string]any{"token": totpCode(t, uri, time.Now())})), 200)
	r = do(t, "POST", "admin/projects/"+strange+"/members/"+inStrange+"/$reset-mfa", eve, "", nil)
	expect(t, r, 403)
	r = do(t, "GET", "auth/mfa/status", tok, "", nil)
	expect(t, r, 200)
	if r.json(t)["enrolled"] != true {
		t.Fatalf("the factor is gone: %s", r.body)
	}
	// A super admin may.
	expect(t, do(t, "POST", "admin/projects/"+strange+"/members/"+inStrange+"/$reset-mfa", su, "", nil), 200)
}
