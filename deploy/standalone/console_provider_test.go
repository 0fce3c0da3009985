package standalone

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The console, in Chromium, for an organisation's sign-in: the members
// list shows a provisioned member's external id; an admin sets a client's
// identity provider, whose client secret is written but never shown back,
// kept when the form is saved again without it, and removed with it.
func TestConsoleIdentityProviderInBrowser(t *testing.T) {
	pid, su := adminProject(t, "Console SSO clinic")
	admin := "console-sso-" + pid + "@example.com"
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Ida", "lastName", "Admin",
		"email", admin, "password", "ida's password", "admin", true)
	pm := member(t, su, pid, "resourceType", "Practitioner", "firstName", "Pro", "lastName", "Visioned",
		"email", "provisioned-"+pid+"@example.com")
	pm["externalId"] = "okta|00u-provisioned"
	expect(t, do(t, "PUT", "fhir/R4/ProjectMembership/"+pm["id"].(string), su, "application/fhir+json", mustJSON(pm)), 200)
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "SSO app"}))
	expect(t, r, 201)
	clientID := r.json(t)["id"].(string)
	readProvider := func() map[string]any {
		r := do(t, "GET", "fhir/R4/ClientApplication/"+clientID, su, "", nil)
		expect(t, r, 200)
		idp, _ := r.json(t)["identityProvider"].(map[string]any)
		return idp
	}

	ctx, consoleURL := consoleSignIn(t, admin, "ida's password")
	run(t, ctx, chromedp.Navigate(consoleURL+"/members"))
	if text := waitText(t, ctx, "External id"); !strings.Contains(text, "okta|00u-provisioned") {
		t.Fatalf("members list: %s", text)
	}

	const secret = "provider-secret-never-shown"
	run(t, ctx, chromedp.Navigate(consoleURL+"/clients/"+clientID), chromedp.WaitVisible(chromedp.ID("idp-issuer")),
		chromedp.SendKeys(chromedp.ID("idp-issuer"), "https://login.example.org"),
		chromedp.SendKeys(chromedp.ID("idp-authorizeUrl"), "https://login.example.org/authorize"),
		chromedp.SendKeys(chromedp.ID("idp-tokenUrl"), "https://login.example.org/token"),
		chromedp.SendKeys(chromedp.ID("idp-clientId"), "pinion-at-okta"),
		chromedp.SendKeys(chromedp.ID("idp-clientSecret"), secret),
		chromedp.Click(chromedp.ID("idp-useSubject")),
		chromedp.Click(chromedp.Search(`//button[contains(., "Save identity provider")]`)))
	waitText(t, ctx, "sent to https://login.example.org")
	shot(t, ctx, "console-identity-provider")
	html := get(t, ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if strings.Contains(html, secret) {
		t.Fatal("the page shows the provider's client secret")
	}
	idp := readProvider()
	if idp["issuer"] != "https://login.example.org" || idp["clientSecret"] != secret || idp["useSubject"] != true || idp["clientId"] != "pinion-at-okta" {
		t.Fatalf("stored provider: %v", idp)
	}

	// Saved again without a secret: the secret stays.
	run(t, ctx, chromedp.Clear(chromedp.ID("idp-clientId")), chromedp.SendKeys(chromedp.ID("idp-clientId"), "pinion-v2"),
		chromedp.Click(chromedp.Search(`//button[contains(., "Save identity provider")]`)))
	// The form's answer is a new page: wait for the stored provider.
	waitUntil(10*time.Second, func() bool { return readProvider()["clientId"] == "pinion-v2" })
	if idp = readProvider(); idp["clientId"] != "pinion-v2" || idp["clientSecret"] != secret {
		t.Fatalf("saved again: %v", idp)
	}
	waitText(t, ctx, "sent to https://login.example.org")

	// A required field left empty is refused beside it.
	run(t, ctx, chromedp.Clear(chromedp.ID("idp-tokenUrl")),
		chromedp.Click(chromedp.Search(`//button[contains(., "Save identity provider")]`)),
		chromedp.WaitVisible(chromedp.ID("idp-tokenUrl-error")))

	run(t, ctx, chromedp.Navigate(consoleURL+"/clients/"+clientID), chromedp.WaitVisible(chromedp.ID("idp-issuer")),
		chromedp.Click(chromedp.Search(`//button[contains(., "Remove the identity provider")]`)))
	waitText(t, ctx, "None: people sign in here with a password")
	if idp := readProvider(); idp != nil {
		t.Fatalf("removed provider: %v", idp)
	}
}
