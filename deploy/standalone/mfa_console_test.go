package standalone

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The console shows each member's second factors and resets them: a
// member enrols an authenticator through the API, the admin's members
// list says so, and the member's page resets it (the form carries the
// console's CSRF token); the member is then not enrolled.
func TestMFAResetInConsole(t *testing.T) {
	pid, su := adminProject(t, "MFA console clinic")
	admin := "mfa-admin-" + pid + "@example.com"
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Ada", "lastName", "Min",
		"email", admin, "password", "ada's password", "admin", true)
	mo := "mfa-member-" + pid + "@example.com"
	m := member(t, su, pid, "resourceType", "Practitioner", "firstName", "Mo", "lastName", "Factor",
		"email", mo, "password", "mo's password")
	membership := m["id"].(string)
	tok := signIn(t, mo, "mo's password", pid, "openid")["access_token"].(string)
	r := do(t, "GET", "auth/mfa/status", tok, "", nil)
	expect(t, r, 200)
	uri := r.json(t)["enrollUri"].(string)
	expect(t, do(t, "POST", "auth/mfa/enroll", tok, "application/json", mustJSON(map[string]any{"token": totpCode(t, uri, time.Now())})), 200)

	ctx, consoleURL := consoleSignIn(t, admin, "ada's password")
	run(t, ctx, chromedp.Navigate(consoleURL+"/members"), chromedp.WaitVisible(chromedp.CSS("table")))
	row := get(t, ctx, chromedp.Text(chromedp.Search(`//tr[contains(., "Mo Factor")]`)))
	if !strings.Contains(row, "enrolled") || strings.Contains(row, "not enrolled") {
		t.Fatalf("members list row: %q", row)
	}
	if row := get(t, ctx, chromedp.Text(chromedp.Search(`//tr[contains(., "Ada Min")]`))); !strings.Contains(row, "not enrolled") {
		t.Fatalf("the admin's row: %q", row)
	}
	run(t, ctx, chromedp.Navigate(consoleURL+"/members/"+membership), chromedp.WaitVisible(chromedp.ID("mfa-state")))
	if state := get(t, ctx, chromedp.Text(chromedp.ID("mfa-state"))); state != "enrolled" {
		t.Fatalf("member page MFA: %q", state)
	}
	shot(t, ctx, "console-member-mfa")
	run(t, ctx, chromedp.Click(chromedp.Search(`//button[.="Reset MFA"]`)))
	waitText(t, ctx, "were removed")
	if state := get(t, ctx, chromedp.Text(chromedp.ID("mfa-state"))); state != "not enrolled" {
		t.Fatalf("after the reset: %q", state)
	}
	r = do(t, "GET", "auth/mfa/status", tok, "", nil)
	expect(t, r, 200)
	if r.json(t)["enrolled"] != false {
		t.Fatalf("the API says: %s", r.body)
	}
}
