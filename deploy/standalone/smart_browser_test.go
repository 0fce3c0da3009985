package standalone

import (
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// SMART's standalone launch in Chromium: a practitioner whose policy reads
// only some patients opens an app that asks for launch/patient; after
// sign-in and consent the picker lists only the patients the policy lets
// them read, a search narrows it, and the patient clicked comes back in
// the token answer, the token's patient/ scope reaching that patient
// alone. Then the person withdraws their consent on their consents page,
// and the app's token stops at once.
func TestSmartPatientPickerInBrowser(t *testing.T) {
	parallelIn(t, browsers)
	pid, su := adminProject(t, "Picker clinic")
	admin := projectAdmin(t, su, pid, "picker-admin-"+pid+"@example.com")
	app := newTestApp(t)
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "Chart app", "redirectUri": app.callback()}))
	expect(t, r, 201)
	clientID, secret := r.json(t)["id"].(string), r.json(t)["secret"].(string)

	patient := func(given, gender string) string {
		r := do(t, "POST", "fhir/R4/Patient", admin, "application/fhir+json", mustJSON(map[string]any{"resourceType": "Patient",
			"name": []any{map[string]any{"given": []any{given}, "family": "Pickwell"}}, "gender": gender, "birthDate": "1970-01-01"}))
		expect(t, r, 201)
		return r.json(t)["id"].(string)
	}
	ada, bea, cal := patient("Ada", "female"), patient("Bea", "female"), patient("Cal", "male")
	r = do(t, "POST", "fhir/R4/AccessPolicy", admin, "application/fhir+json", mustJSON(map[string]any{"resourceType": "AccessPolicy",
		"name": "women's ward", "resource": []any{map[string]any{"resourceType": "Patient", "criteria": "Patient?gender=female"}}}))
	expect(t, r, 201)
	email := "picker-" + pid + "@example.com"
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Dee", "lastName", "Ward", "email", email,
		"password", "dee's password", "accessPolicy", map[string]any{"reference": "AccessPolicy/" + r.json(t)["id"].(string)})

	verifier, challenge := pkce("picker")
	q := url.Values{"response_type": {"code"}, "client_id": {clientID}, "redirect_uri": {app.callback()},
		"scope": {"openid launch/patient patient/*.rs"}, "state": {"pick"}, "code_challenge": {challenge}, "code_challenge_method": {"S256"}}
	ctx := newBrowser(t)
	run(t, ctx, chromedp.Navigate(base+"oauth2/authorize?"+q.Encode()), chromedp.WaitVisible(chromedp.ID("email")),
		chromedp.SendKeys(chromedp.ID("email"), email),
		chromedp.SendKeys(chromedp.ID("password"), "dee's password"),
		chromedp.Click(chromedp.CSS("button")),
		chromedp.WaitVisible(chromedp.CSS(`button[value="allow"]`)))
	if text := pageText(t, ctx); !strings.Contains(text, "ask you which patient to open") {
		t.Fatalf("the consent page does not say the app will ask for a patient:\n%s", text)
	}
	run(t, ctx, chromedp.Click(chromedp.CSS(`button[value="allow"]`)),
		chromedp.WaitVisible(chromedp.ID("patient_name")))
	shot(t, ctx, "smart-picker")
	text := pageText(t, ctx)
	if !strings.Contains(text, "Ada Pickwell") || !strings.Contains(text, "Bea Pickwell") || strings.Contains(text, "Cal Pickwell") {
		t.Fatalf("the picker lists what the policy hides, or not what it shows:\n%s", text)
	}
	run(t, ctx, chromedp.SendKeys(chromedp.ID("patient_name"), "Bea"), chromedp.Click(chromedp.ID("patient_search")),
		chromedp.WaitNotPresent(chromedp.Search(`//button[contains(., "Ada Pickwell")]`)))
	shot(t, ctx, "smart-picker-search")
	if text := pageText(t, ctx); !strings.Contains(text, "Bea Pickwell") {
		t.Fatalf("the search for Bea:\n%s", text)
	}
	run(t, ctx, chromedp.Click(chromedp.Search(`//button[contains(., "Bea Pickwell")]`)))
	got := app.wait(t, ctx, "pick")
	tok := exchangeAs(t, got.Get("code"), verifier, clientID, secret, app.callback())
	if tok["patient"] != bea || tok["need_patient_banner"] != true || !strings.Contains(tok["scope"].(string), "launch/patient") {
		t.Fatalf("token answer: patient %v (want Bea, %s), banner %v, scope %v", tok["patient"], bea, tok["need_patient_banner"], tok["scope"])
	}
	access := tok["access_token"].(string)
	expect(t, do(t, "GET", "fhir/R4/Patient/"+bea, access, "", nil), 200)
	for _, other := range []string{ada, cal} {
		expect(t, do(t, "GET", "fhir/R4/Patient/"+other, access, "", nil), 404)
	}

	// The person's consents page: the app is listed; withdrawn, its token stops.
	run(t, ctx, chromedp.Navigate(base+"consents"), chromedp.WaitVisible(chromedp.Search(`//h2[.="Chart app"]`)))
	shot(t, ctx, "consents")
	run(t, ctx, chromedp.Click(chromedp.Search(`//form[input[@value="`+clientID+`"]]/button`)),
		chromedp.WaitVisible(chromedp.ID("no-consents")))
	if text := pageText(t, ctx); !strings.Contains(text, "Consent withdrawn: Chart app") {
		t.Fatalf("after the withdrawal:\n%s", text)
	}
	expect(t, do(t, "GET", "fhir/R4/Patient/"+bea, access, "", nil), 401)
}
