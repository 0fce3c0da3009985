package standalone

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
)

// virtualAuthenticator gives the browser's tab a platform authenticator
// (Chromium's DevTools WebAuthn domain): it holds passkeys, verifies its
// user and answers at once, as a laptop's fingerprint reader would.
func virtualAuthenticator(t *testing.T, ctx context.Context) webauthn.AuthenticatorID {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := chromedp.Call(ctx, webauthn.Enable, webauthn.EnableParams{}); err != nil {
		t.Fatalf("WebAuthn.enable: %v", err)
	}
	got, err := chromedp.Call(ctx, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{Options: &webauthn.VirtualAuthenticatorOptions{
		Protocol: webauthn.AuthenticatorProtocolCtap2, Ctap2version: webauthn.Ctap2versionCtap21, Transport: webauthn.AuthenticatorTransportInternal,
		HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true,
	}})
	if err != nil {
		t.Fatalf("WebAuthn.addVirtualAuthenticator: %v", err)
	}
	return got.AuthenticatorID
}

// Passkeys in Chromium: a person signed in to the console adds a passkey
// on /passkeys (the page's script and Chromium's virtual authenticator),
// signs out, and signs in to the console again with the passkey alone,
// through /oauth2/authorize, typing no password.
func TestPasskeyInBrowser(t *testing.T) {
	pid, su := adminProject(t, "Passkey clinic")
	email := "passkey-" + pid + "@example.com"
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Kay", "lastName", "Passe",
		"email", email, "password", "kay's password", "admin", true)
	ctx, consoleURL := consoleSignIn(t, email, "kay's password")
	authenticator := virtualAuthenticator(t, ctx)
	passkeysURL := strings.TrimSuffix(consoleURL, "console") + "passkeys"

	// Add a passkey: its name, then the browser's ceremony.
	run(t, ctx, chromedp.Click(chromedp.Search(`//a[.="Your passkeys"]`)), chromedp.WaitVisible(chromedp.ID("passkey-name")))
	if loc := get(t, ctx, chromedp.Location()); loc != passkeysURL {
		t.Fatalf("the console's link led to %s", loc)
	}
	if text := pageText(t, ctx); !strings.Contains(text, email) || !strings.Contains(text, "No passkeys yet") {
		t.Fatalf("passkeys page: %s", text)
	}
	run(t, ctx, chromedp.SendKeys(chromedp.ID("passkey-name"), "Kay's laptop"),
		chromedp.Click(chromedp.Search(`//button[.="Add a passkey"]`)),
		chromedp.WaitVisible(chromedp.Search(`//button[.="Create the passkey"]`)))
	run(t, ctx, chromedp.Click(chromedp.Search(`//button[.="Create the passkey"]`)))
	text := waitText(t, ctx, "added")
	shot(t, ctx, "passkeys")
	if !strings.Contains(text, "Passkey “Kay's laptop” added.") {
		t.Fatalf("after adding: %s", text)
	}
	creds, err := chromedp.Call(ctx, webauthn.GetCredentials, webauthn.GetCredentialsParams{AuthenticatorID: authenticator})
	if err != nil || len(creds.Credentials) != 1 || !creds.Credentials[0].IsResidentCredential {
		t.Fatalf("the authenticator holds %+v (%v)", creds, err)
	}

	// Sign out of the console, which ends the browser's sign-in too.
	run(t, ctx, chromedp.Navigate(consoleURL), chromedp.WaitVisible(chromedp.Search(`//button[.="Sign out"]`)),
		chromedp.Click(chromedp.Search(`//button[.="Sign out"]`)))
	waitText(t, ctx, "Signed out")

	// The console again: the sign-in page, a passkey, no password.
	run(t, ctx, chromedp.Navigate(consoleURL), chromedp.WaitVisible(chromedp.ID("passkey-signin")),
		chromedp.Click(chromedp.ID("passkey-signin")),
		chromedp.WaitVisible(chromedp.Search(`//button[.="Use your passkey"]`)))
	shot(t, ctx, "passkey-signin")
	run(t, ctx, chromedp.Click(chromedp.Search(`//button[.="Use your passkey"]`)))
	loc := ""
	if !waitUntil(10*time.Second, func() bool { loc, _ = tryGet(ctx, chromedp.Location()); return loc == consoleURL }) {
		t.Fatalf("after the passkey, the browser is at %s: %s", loc, pageText(t, ctx))
	}
	if h1 := get(t, ctx, chromedp.Text(chromedp.CSS("h1"))); h1 != "Passkey clinic" {
		t.Fatalf("signed in with a passkey, the console shows %q", h1)
	}
	// The passkey sign-in is in the audit trail, with the person, as is
	// the sign-out before it.
	// Kay's own events (the agent by bare id), not the whole server's.
	r := do(t, "GET", "fhir/R4/User?email="+url.QueryEscape(email), su, "", nil)
	_, users := bundleOf(t, r)
	if len(users) != 1 {
		t.Fatalf("%d users for %s", len(users), email)
	}
	kay := users[0]["id"].(string)
	eventually(t, 15*time.Second, "the passkey sign-in recorded", func() bool {
		for _, ev := range auditEvents(t, su, "sign-in", "outcome", "0", "agent", kay) {
			ents, _ := ev["entity"].([]any)
			if len(ents) > 0 && ents[0].(map[string]any)["description"] == "method=passkey" {
				return len(auditEvents(t, su, "sign-out", "agent", kay)) > 0
			}
		}
		return false
	})
}
