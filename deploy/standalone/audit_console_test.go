package standalone

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pinion-health/pinion/pkg/audit"
)

// The console's audit pages (issue 54), in a browser: an admin sees a
// member's refused and accepted password sign-ins on the audit trail, and
// only the refusal once filtered by kind and outcome; the member's
// "Sign-ins" link shows theirs, the refusal typed with their address
// included; a patient's page lists an access to their record. An admin
// whose access policy does not name AuditEvent gets the API's refusal.
func TestAuditConsole(t *testing.T) {
	parallelIn(t, browsers)
	pid, su := adminProject(t, "Audit console clinic")
	admin := "audit-console-admin-" + pid + "@example.com"
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Al", "lastName", "Auditor",
		"email", admin, "password", "al's password", "admin", true)
	ivy := "audit-console-ivy-" + pid + "@example.com"
	m := member(t, su, pid, "resourceType", "Practitioner", "firstName", "Ivy", "lastName", "Watched",
		"email", ivy, "password", "ivy's password")
	user := refOf(m, "user")

	// Ivy's sign-ins: refused, then let in.
	expect(t, do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{
		"email": ivy, "password": "not ivy's password", "projectId": pid})), 400)
	signIn(t, ivy, "ivy's password", pid, "openid")

	// A patient, and Ivy's access to their record as pkg/audit shapes it
	// (the API's own patient-read events are another change's), created
	// through the API as the super admin.
	r := do(t, "POST", "fhir/R4/Patient", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "Patient", "meta": map[string]any{"project": pid},
		"name": []any{map[string]any{"given": []any{"Paula"}, "family": "Record"}}}))
	expect(t, r, 201)
	patient := r.json(t)["id"].(string)
	read := audit.Event{Kind: audit.PatientRead.Name, Time: time.Now(), Outcome: audit.Success, Who: user,
		Address: "10.9.8.7", Patients: []string{"Patient/" + patient}}
	ev := read.Resource()
	ev["meta"] = map[string]any{"project": pid}
	expect(t, do(t, "POST", "fhir/R4/AuditEvent", su, "application/fhir+json", mustJSON(ev)), 201)

	// The writers store sign-ins after the answer: wait until the API
	// returns them before a page is loaded.
	adminToken := signIn(t, admin, "al's password", pid, "openid")["access_token"].(string)
	eventually(t, 15*time.Second, "Ivy's sign-ins in the trail", func() bool {
		return len(auditEvents(t, adminToken, "sign-in", "agent-name", ivy)) == 1 &&
			len(auditEvents(t, adminToken, "sign-in", "agent", idOf(user))) == 1
	})

	ctx, consoleURL := consoleSignIn(t, admin, "al's password")
	run(t, ctx, chromedp.Click(chromedp.Search(`//nav/a[.="Audit"]`)), chromedp.WaitVisible(chromedp.ID("events")))
	shot(t, ctx, "console-audit")
	rows := get(t, ctx, chromedp.Text(chromedp.CSS("#events tbody")))
	for _, want := range []string{"Sign-in", ivy, "refused: Email or password is invalid", "Ivy Watched", "succeeded",
		"Patient record read", "Patient/" + patient, "10.9.8.7"} {
		if !strings.Contains(rows, want) {
			t.Fatalf("the audit trail lacks %q: %s", want, rows)
		}
	}

	// Refused sign-ins only: Ivy's refusal, nothing else.
	run(t, ctx,
		chromedp.SetValue(chromedp.ID("kind"), audit.SignIn.Name),
		chromedp.SetValue(chromedp.ID("outcome"), "refused"),
		chromedp.Click(chromedp.Search(`//button[.="Filter"]`)))
	waitLocation(t, ctx, "outcome=refused")
	run(t, ctx, chromedp.WaitVisible(chromedp.ID("events")))
	shot(t, ctx, "console-audit-refused")
	rows = get(t, ctx, chromedp.Text(chromedp.CSS("#events tbody")))
	if n := get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#events tbody tr").length`)); n != 1 ||
		!strings.Contains(rows, ivy) || !strings.Contains(rows, "refused") || strings.Contains(rows, "succeeded") {
		t.Fatalf("refused sign-ins (%d rows): %s", n, rows)
	}

	// Ivy's page links to her sign-ins: the one let in, and the refusal
	// typed with her address; nobody else's.
	run(t, ctx, chromedp.Navigate(consoleURL+"/members/"+m["id"].(string)), chromedp.WaitVisible(chromedp.Search(`//a[.="Sign-ins"]`)))
	run(t, ctx, chromedp.Click(chromedp.Search(`//a[.="Sign-ins"]`)))
	waitLocation(t, ctx, "kind=sign-in")
	run(t, ctx, chromedp.WaitVisible(chromedp.ID("events")))
	shot(t, ctx, "console-audit-member")
	rows = get(t, ctx, chromedp.Text(chromedp.CSS("#events tbody")))
	if n := get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#events tbody tr").length`)); n != 2 ||
		!strings.Contains(rows, "Ivy Watched") || !strings.Contains(rows, "refused: Email or password is invalid") ||
		strings.Contains(rows, "Al Auditor") || strings.Contains(rows, "Patient record read") {
		t.Fatalf("Ivy's sign-ins (%d rows): %s", n, rows)
	}
	if v := get(t, ctx, chromedp.Value(chromedp.ID("who"))); v != user {
		t.Fatalf("the filter's who: %q, want %s", v, user)
	}

	// Who looked at Paula's record, from the trail's link to her.
	run(t, ctx, chromedp.Navigate(consoleURL+"/audit?kind="+audit.PatientRead.Name), chromedp.WaitVisible(chromedp.ID("events")))
	run(t, ctx, chromedp.Click(chromedp.Search(`//a[.="Patient/`+patient+`"]`)))
	waitLocation(t, ctx, "/audit/patient/"+patient)
	run(t, ctx, chromedp.WaitVisible(chromedp.ID("events")))
	shot(t, ctx, "console-audit-patient")
	if h1 := get(t, ctx, chromedp.Text(chromedp.CSS("h1"))); h1 != "Who looked at Paula Record" {
		t.Fatalf("the patient page's heading: %q", h1)
	}
	rows = get(t, ctx, chromedp.Text(chromedp.CSS("#events tbody")))
	if !strings.Contains(rows, "Ivy Watched") || !strings.Contains(rows, "Patient record read") || !strings.Contains(rows, "10.9.8.7") {
		t.Fatalf("who looked at Paula's record: %s", rows)
	}

	// A patient that cannot be read (here: none such): the page says so,
	// and still lists what the trail holds.
	status, body := consolePage(t, adminToken, "console/audit/patient/no-such-patient")
	if status != 200 || !strings.Contains(body, "Who looked at Patient/no-such-patient") ||
		!strings.Contains(body, "could not be read") || !strings.Contains(body, "Nobody's access to this record is recorded.") {
		t.Fatalf("an unreadable patient's page: %d %s", status, body)
	}

	// An admin under a policy that names only Patient: the API refuses
	// them AuditEvents, and the page says what the API says.
	r = do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "Front desk", "meta": map[string]any{"project": pid},
		"resource": []any{map[string]any{"resourceType": "Patient"}}}))
	expect(t, r, 201)
	desk := "audit-console-desk-" + pid + "@example.com"
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Desk", "lastName", "Admin", "email", desk,
		"password", "desk's password", "admin", true,
		"membership", map[string]any{"access": []any{map[string]any{"policy": map[string]any{"reference": "AccessPolicy/" + r.json(t)["id"].(string)}}}})
	deskToken := signIn(t, desk, "desk's password", pid, "openid")["access_token"].(string)
	refused := do(t, "GET", "fhir/R4/AuditEvent?_count=1", deskToken, "", nil)
	expect(t, refused, 403)
	status, body = consolePage(t, deskToken, "console/audit")
	if status != 403 || !strings.Contains(body, refused.outcomeText(t)) || strings.Contains(body, ivy) {
		t.Fatalf("the audit trail under the desk's policy: %d %s", status, body)
	}
}

// waitLocation waits until the browser's address holds want: after a
// click, the page being left may still answer.
func waitLocation(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	loc := ""
	if !waitUntil(10*time.Second, func() bool { loc, _ = tryGet(ctx, chromedp.Location()); return strings.Contains(loc, want) }) {
		t.Fatalf("the browser is at %s, want %s", loc, want)
	}
}

// consolePage loads a console page with token as the console's cookie.
func consolePage(t *testing.T, token, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(&http.Cookie{Name: "pinion_console", Value: token})
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
