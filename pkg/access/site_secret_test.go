package access

import (
	"strings"
	"testing"
)

// A project site's reCAPTCHA secret key is hidden from the project's
// admins like the project's other secrets, and an admin's update that
// cannot see it keeps it as stored.
func TestAdminProjectSiteSecretHidden(t *testing.T) {
	admin := member("Practitioner/doc")
	admin.Admin = true
	adm := compile(t, admin, nil, nil)
	proj := stored("Project", project, `{"resourceType":"Project","id":"p1","name":"P","site":[`+
		`{"name":"portal","domain":["portal.example"],"recaptchaSiteKey":"site-key","recaptchaSecretKey":"the-secret"}]}`)
	red, err := adm.Redact(proj)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(red.JSON), "the-secret") || strings.Contains(string(red.JSON), "recaptchaSecretKey") ||
		!strings.Contains(string(red.JSON), `"recaptchaSiteKey":"site-key"`) {
		t.Errorf("an admin reads %s", red.JSON)
	}
	// The project as the admin read it, written back with a new name.
	after := map[string]any{"resourceType": "Project", "id": "p1", "name": "Q", "site": []any{
		map[string]any{"name": "portal", "domain": []any{"portal.example"}, "recaptchaSiteKey": "site-key"}}}
	if err := adm.Write(Update, "Project", proj, after, project); err != nil {
		t.Fatal(err)
	}
	if got := after["site"].([]any)[0].(map[string]any)["recaptchaSecretKey"]; got != "the-secret" {
		t.Errorf("the update left the secret key %v", got)
	}
}
