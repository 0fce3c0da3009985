package authserver

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/internal/testkit"
)

func TestVerifierMatches(t *testing.T) {
	cases := []struct {
		name                        string
		challenge, method, verifier string
		want                        bool
	}{
		{"S256", testkit.RFCChallenge, "S256", testkit.RFCVerifier, true},
		{"S256 wrong verifier", testkit.RFCChallenge, "S256", testkit.RFCVerifier + "x", false},
		{"S256 sent the challenge itself", testkit.RFCChallenge, "S256", testkit.RFCChallenge, false},
		{"S256 padded challenge", testkit.RFCChallenge + "=", "S256", testkit.RFCVerifier, false},
		{"S256 standard base64 is not base64url", strings.ReplaceAll(testkit.RFCChallenge, "-", "+"), "S256", testkit.RFCVerifier, false},
		{"S256 empty verifier", testkit.RFCChallenge, "S256", "", false},
		{"plain", "verifier-" + strings.Repeat("y", 40), "plain", "verifier-" + strings.Repeat("y", 40), true},
		{"plain wrong verifier", "abc", "plain", "abd", false},
		{"plain is case-sensitive", "abc", "plain", "ABC", false},
		{"plain sent the S256 verifier", testkit.RFCChallenge, "plain", testkit.RFCVerifier, false},
		{"plain prefix", "abcdef", "plain", "abc", false},
		// Methods are exact: only "S256" hashes. Sign-in refuses any other
		// method than S256 and plain before a login holds one.
		{"lower-case s256 compares plainly", testkit.RFCChallenge, "s256", testkit.RFCVerifier, false},
		{"no method compares plainly", "abc", "", "abc", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := verifierMatches(tc.challenge, tc.method, tc.verifier); got != tc.want {
				t.Fatalf("verifierMatches(%q, %q, %q) = %v, want %v", tc.challenge, tc.method, tc.verifier, got, tc.want)
			}
		})
	}
}

func TestReadCodeGrant(t *testing.T) {
	cases := []struct {
		name       string
		form       url.Values
		want       codeGrant
		code, text string
	}{
		{"missing code", url.Values{}, codeGrant{}, "invalid_request", "Missing code"},
		{"empty code", url.Values{"code": {""}}, codeGrant{}, "invalid_request", "Missing code"},
		{"no separator", url.Values{"code": {"abc"}}, codeGrant{}, "invalid_grant", "Invalid code"},
		// The client comes from its authentication (presentedClient), not from here.
		{"code", url.Values{"code": {"login.secret"}, "client_id": {"app"}, "code_verifier": {"v"}, "redirect_uri": {"https://app/cb"}},
			codeGrant{loginID: "login", secret: "secret", redirectURI: "https://app/cb", verifier: "v"}, "", ""},
		{"the secret keeps later dots", url.Values{"code": {"login.se.cret"}}, codeGrant{loginID: "login", secret: "se.cret"}, "", ""},
		{"empty halves are read as they are", url.Values{"code": {"."}}, codeGrant{}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, no := readCodeGrant(tc.form)
			expectRefusal(t, no, tc.code, tc.text)
			if g != tc.want {
				t.Fatalf("grant %+v, want %+v", g, tc.want)
			}
		})
	}
}

// expectRefusal checks a refusal's code and text; an empty code expects none.
func expectRefusal(t *testing.T, no *Refusal, code, text string) {
	t.Helper()
	switch {
	case code == "" && no != nil:
		t.Fatalf("refused %s %q, want no refusal", no.code, no.text)
	case code != "" && no == nil:
		t.Fatalf("not refused, want %s %q", code, text)
	case no != nil && (no.code != code || no.text != text):
		t.Fatalf("refused %s %q, want %s %q", no.code, no.text, code, text)
	}
}

func TestRedeemCode(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	const secret = "code-secret"
	signedIn := now.Add(-time.Hour).UnixMilli()
	// pending is a login whose code was just issued, with an S256 challenge.
	pending := func() *session.Login {
		return &session.Login{
			User: "User/u1", Membership: "m1", Client: "app", Scope: "openid",
			CodeDigest: auth.SecretDigest(secret), CodeAt: now.Add(-10 * time.Second).UnixMilli(),
			Challenge: testkit.RFCChallenge, ChallengeMethod: "S256", Start: signedIn,
		}
	}
	grant := codeGrant{loginID: "l1", secret: secret, clientID: "app", verifier: testkit.RFCVerifier}
	cases := []struct {
		name       string
		edit       func(*session.Login)
		grant      func(*codeGrant)
		ended      int64
		code, text string
		revoke     bool
	}{
		{name: "S256"},
		{name: "plain", edit: func(l *session.Login) { l.Challenge, l.ChallengeMethod = "plain-verifier", "plain" },
			grant: func(g *codeGrant) { g.verifier = "plain-verifier" }},
		{name: "no client_id in the form", grant: func(g *codeGrant) { g.clientID = "" }},
		{name: "a login without a client refuses a client", edit: func(l *session.Login) { l.Client = "" },
			grant: func(g *codeGrant) { g.clientID = "other" }, code: "invalid_grant", text: "Invalid client"},
		{name: "the redirect_uri sent at authorize", edit: func(l *session.Login) { l.RedirectURI = "https://app/cb" },
			grant: func(g *codeGrant) { g.redirectURI = "https://app/cb" }},
		{name: "another redirect_uri", edit: func(l *session.Login) { l.RedirectURI = "https://app/cb" },
			grant: func(g *codeGrant) { g.redirectURI = "https://app/cb2" }, code: "invalid_grant", text: "Invalid redirect_uri"},
		{name: "the redirect_uri left out", edit: func(l *session.Login) { l.RedirectURI = "https://app/cb" },
			code: "invalid_grant", text: "Invalid redirect_uri"},
		{name: "no redirect_uri at authorize: any is ignored", grant: func(g *codeGrant) { g.redirectURI = "https://elsewhere/" }},
		{name: "wrong secret", grant: func(g *codeGrant) { g.secret = "guess" }, code: "invalid_grant", text: "Invalid code"},
		{name: "empty secret", grant: func(g *codeGrant) { g.secret = "" }, code: "invalid_grant", text: "Invalid code"},
		{name: "a login without a code (profile not yet chosen)", edit: func(l *session.Login) { l.CodeDigest = "" },
			code: "invalid_grant", text: "Invalid code"},
		{name: "the secret is checked before anything else", edit: func(l *session.Login) { l.Revoked, l.Granted = true, true },
			grant: func(g *codeGrant) { g.secret = "guess" }, code: "invalid_grant", text: "Invalid code"},
		{name: "revoked", edit: func(l *session.Login) { l.Revoked = true }, code: "invalid_grant", text: "Token revoked"},
		{name: "revoked before granted", edit: func(l *session.Login) { l.Revoked, l.Granted = true, true },
			code: "invalid_grant", text: "Token revoked"},
		{name: "replayed code ends the login", edit: func(l *session.Login) { l.Granted = true },
			code: "invalid_grant", text: "Token already granted", revoke: true},
		{name: "replayed expired code ends the login too",
			edit: func(l *session.Login) { l.Granted, l.CodeAt = true, now.Add(-time.Hour).UnixMilli() },
			code: "invalid_grant", text: "Token already granted", revoke: true},
		{name: "expired", edit: func(l *session.Login) { l.CodeAt = now.Add(-codeLifetime - time.Millisecond).UnixMilli() },
			code: "invalid_grant", text: "Code expired"},
		{name: "at its lifetime still good", edit: func(l *session.Login) { l.CodeAt = now.Add(-codeLifetime).UnixMilli() }},
		{name: "sessions ended after the sign-in", ended: signedIn + 1, code: "invalid_grant", text: "Token revoked", revoke: true},
		{name: "sessions ended at the sign-in's start", ended: signedIn},
		{name: "sessions ended before the sign-in", ended: signedIn - 1},
		{name: "an expired code of an ended sign-in only expires",
			edit:  func(l *session.Login) { l.CodeAt = now.Add(-time.Hour).UnixMilli() },
			ended: signedIn + 1, code: "invalid_grant", text: "Code expired"},
		{name: "no membership", edit: func(l *session.Login) { l.Membership = "" }, code: "invalid_grant", text: "Invalid profile"},
		{name: "another client", grant: func(g *codeGrant) { g.clientID = "other" }, code: "invalid_grant", text: "Invalid client"},
		{name: "pkce skipped where allowed", edit: func(l *session.Login) { l.NoPKCE, l.Challenge, l.ChallengeMethod = true, "", "plain" },
			grant: func(g *codeGrant) { g.verifier = "" }},
		{name: "pkce skipped: a verifier is not checked", edit: func(l *session.Login) { l.NoPKCE, l.Challenge = true, "" },
			grant: func(g *codeGrant) { g.verifier = "anything" }},
		{name: "pkce skipped: the client still counts", edit: func(l *session.Login) { l.NoPKCE, l.Challenge = true, "" },
			grant: func(g *codeGrant) { g.clientID = "other" }, code: "invalid_grant", text: "Invalid client"},
		{name: "no challenge", edit: func(l *session.Login) { l.Challenge = "" },
			code: "invalid_grant", text: "Missing verification context"},
		{name: "no challenge and no verifier", edit: func(l *session.Login) { l.Challenge, l.ChallengeMethod = "", "plain" },
			grant: func(g *codeGrant) { g.verifier = "" }, code: "invalid_grant", text: "Missing verification context"},
		{name: "no verifier", grant: func(g *codeGrant) { g.verifier = "" }, code: "invalid_request", text: "Missing code verifier"},
		{name: "wrong verifier", grant: func(g *codeGrant) { g.verifier = "wrong" }, code: "invalid_grant", text: "Invalid code verifier"},
		{name: "the challenge as verifier", grant: func(g *codeGrant) { g.verifier = testkit.RFCChallenge },
			code: "invalid_grant", text: "Invalid code verifier"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, g := pending(), grant
			if tc.edit != nil {
				tc.edit(l)
			}
			if tc.grant != nil {
				tc.grant(&g)
			}
			before := *l
			v := redeemCode(l, g, now, tc.ended)
			expectRefusal(t, v.refused, tc.code, tc.text)
			if v.revoke != tc.revoke {
				t.Fatalf("revoke %v, want %v", v.revoke, tc.revoke)
			}
			if *l != before {
				t.Fatalf("the decision changed the login: %+v, was %+v", *l, before)
			}
		})
	}
}

func TestRenewRefresh(t *testing.T) {
	const secret = "refresh-secret"
	signedIn := int64(1_700_000_000_000)
	cases := []struct {
		name       string
		edit       func(*session.Login)
		secret     string
		client     string // the client presenting it
		ended      int64
		code, text string
		revoke     bool
	}{
		{name: "current secret", secret: secret},
		{name: "sessions ended before the sign-in", secret: secret, ended: signedIn - 1},
		{name: "sessions ended at the sign-in's start", secret: secret, ended: signedIn},
		{name: "revoked", edit: func(l *session.Login) { l.Revoked = true }, secret: secret,
			code: "invalid_grant", text: "Token revoked"},
		{name: "revoked, with an old secret: nothing more to end", edit: func(l *session.Login) { l.Revoked = true }, secret: "old",
			code: "invalid_grant", text: "Token revoked"},
		{name: "sessions ended since", secret: secret, ended: signedIn + 1,
			code: "invalid_grant", text: "Token revoked", revoke: true},
		{name: "an old secret ends the chain", secret: "old", code: "invalid_grant", text: "Invalid token", revoke: true},
		{name: "a login that never asked for refresh", edit: func(l *session.Login) { l.RefreshDigest = "" }, secret: secret,
			code: "invalid_grant", text: "Invalid token", revoke: true},
		{name: "ended and old: ended first", secret: "old", ended: signedIn + 1,
			code: "invalid_grant", text: "Token revoked", revoke: true},
		{name: "its own client", secret: secret, client: "app"},
		{name: "another client, refused and not spent", secret: secret, client: "other", code: "invalid_grant", text: "Invalid client"},
		{name: "another client with an old secret: nothing ended", secret: "old", client: "other", code: "invalid_grant", text: "Invalid client"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := &session.Login{User: "User/u1", Membership: "m1", Client: "app", Start: signedIn, Granted: true, RefreshDigest: auth.SecretDigest(secret)}
			if tc.edit != nil {
				tc.edit(l)
			}
			before := *l
			v := renewRefresh(l, tc.secret, tc.client, tc.ended)
			expectRefusal(t, v.refused, tc.code, tc.text)
			if v.revoke != tc.revoke {
				t.Fatalf("revoke %v, want %v", v.revoke, tc.revoke)
			}
			if *l != before {
				t.Fatalf("the decision changed the login: %+v, was %+v", *l, before)
			}
		})
	}
}

// A refusal that revokes is written; any other stops the update unwritten.
func TestVerdictSettle(t *testing.T) {
	l := &session.Login{User: "User/u1"}
	if err := refused(InvalidGrant("Code expired")).settle(l); !errors.Is(err, errStop) || l.Revoked {
		t.Fatalf("plain refusal: %v, revoked %v", err, l.Revoked)
	}
	if err := refusedRevoking(InvalidGrant("Token already granted")).settle(l); err != nil || !l.Revoked {
		t.Fatalf("revoking refusal: %v, revoked %v", err, l.Revoked)
	}
}

func TestHasScope(t *testing.T) {
	cases := []struct {
		scope, want string
		has         bool
	}{
		{"openid", "openid", true},
		{"openid profile email", "profile", true},
		{"openid profile email", "email", true},
		{"profile openid", "openid", true},
		{"", "openid", false},
		{"openidx", "openid", false},
		{"xopenid", "openid", false},
		{"patient/*.read", "patient", false},
		{"OPENID", "openid", false},
		// Scopes are separated by single spaces (RFC 6749 §3.3).
		{"profile\topenid", "openid", false},
		{"profile  openid", "openid", true},
	}
	for _, tc := range cases {
		if got := HasScope(tc.scope, tc.want); got != tc.has {
			t.Errorf("HasScope(%q, %q) = %v, want %v", tc.scope, tc.want, got, tc.has)
		}
	}
}

func TestWantsRefresh(t *testing.T) {
	cases := []struct {
		scope string
		want  bool
	}{
		{"openid offline_access", true},
		{"offline_access", true},
		{"openid offline", true},
		{"offline openid", true},
		{"openid", false},
		{"", false},
		{"offline_accessx", false},
		{"offline-access", false},
		{"online_access", false},
		{"user/*.read offline_access patient/*.read", true},
	}
	for _, tc := range cases {
		if got := wantsRefresh(tc.scope); got != tc.want {
			t.Errorf("wantsRefresh(%q) = %v, want %v", tc.scope, got, tc.want)
		}
	}
}

func TestRotateRefresh(t *testing.T) {
	l := &session.Login{Scope: "openid", RefreshDigest: "kept"}
	if got := RotateRefresh(l); got != "" || l.RefreshDigest != "kept" {
		t.Fatalf("without offline access: %q, digest %q", got, l.RefreshDigest)
	}
	l.Scope = "openid offline_access"
	first := RotateRefresh(l)
	if first == "" || !auth.SecretMatches(l.RefreshDigest, first) {
		t.Fatalf("the login does not keep the new secret's digest: %q %q", first, l.RefreshDigest)
	}
	second := RotateRefresh(l)
	if second == first || !auth.SecretMatches(l.RefreshDigest, second) || auth.SecretMatches(l.RefreshDigest, first) {
		t.Fatal("the old refresh secret still works after a rotation")
	}
	// What the rotation hands out is what the next refresh presents.
	if v := renewRefresh(l, second, "", 0); v.refused != nil {
		t.Fatalf("the rotated secret is refused: %+v", v.refused)
	}
	if v := renewRefresh(l, first, "", 0); v.refused == nil || !v.revoke {
		t.Fatal("the spent secret is not refused with the chain's end")
	}
}

// A code finds its login by its first half and is redeemed by its second.
func TestNewCode(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	l := &session.Login{Membership: "m1", Challenge: "v", ChallengeMethod: "plain"}
	code := NewCode("login-1", l, now)
	g, no := readCodeGrant(url.Values{"code": {code}, "code_verifier": {"v"}})
	if no != nil || g.loginID != "login-1" {
		t.Fatalf("code %q reads as %+v %v", code, g, no)
	}
	if l.CodeAt != now.UnixMilli() {
		t.Fatalf("issued at %d, want %d", l.CodeAt, now.UnixMilli())
	}
	if v := redeemCode(l, g, now.Add(codeLifetime), 0); v.refused != nil {
		t.Fatalf("a fresh code is refused: %+v", v.refused)
	}
	if v := redeemCode(l, g, now.Add(codeLifetime+time.Millisecond), 0); v.refused == nil || v.refused.text != "Code expired" {
		t.Fatalf("a code past its lifetime: %+v", v.refused)
	}
	if again := NewCode("login-1", l, now); again == code || auth.SecretMatches(l.CodeDigest, g.secret) {
		t.Fatal("a new code leaves the old one working")
	}
}
