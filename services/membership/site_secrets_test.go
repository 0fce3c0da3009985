package membership

import (
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
)

// A site's reCAPTCHA secret key is write-only for the project's admins:
// neither the sites route nor GET /admin/projects/:projectId answers it to
// them, a site sent again without it keeps it, and a super admin reads it.
func TestSiteSecretKeyWriteOnly(t *testing.T) {
	project := fixtureProject(t, nil)
	params := map[string]string{"projectId": project}
	const site = `{"name":"portal","domain":["portal.example"],"recaptchaSiteKey":"portal-key"`
	storedSecret := func(t *testing.T) any {
		t.Helper()
		sites, _ := readDoc(t, "Project", project)["site"].([]any)
		if len(sites) != 1 {
			t.Fatalf("sites %v", sites)
		}
		return sites[0].(map[string]any)["recaptchaSecretKey"]
	}
	hidden := func(t *testing.T, what string, resp *bus.Response, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != 200 || strings.Contains(string(resp.Body), "recaptchaSecretKey") || strings.Contains(string(resp.Body), "portal-secret") ||
			!strings.Contains(string(resp.Body), "portal-key") {
			t.Errorf("%s answers an admin %d %s", what, resp.Status, resp.Body)
		}
	}

	resp, err := call(t, stack.svc.setSites, request(adminOf(project), params, "application/json", `[`+site+`,"recaptchaSecretKey":"portal-secret"}]`))
	hidden(t, "setting the sites", resp, err)
	if got := storedSecret(t); got != "portal-secret" {
		t.Fatalf("stored secret %v", got)
	}
	resp, err = call(t, stack.svc.getProject, request(adminOf(project), params, "", ""))
	hidden(t, "GET /admin/projects/:projectId", resp, err)

	// Sent again as the admin read it, with another domain: the secret stays.
	resp, err = call(t, stack.svc.setSites, request(adminOf(project), params, "application/json",
		`[{"name":"portal","domain":["new.example"],"recaptchaSiteKey":"portal-key"}]`))
	hidden(t, "changing the sites", resp, err)
	if got := storedSecret(t); got != "portal-secret" {
		t.Fatalf("a site sent without its secret key lost it: %v", got)
	}

	resp, err = call(t, stack.svc.getProject, request(superAdmin(), params, "", ""))
	if err != nil || !strings.Contains(string(resp.Body), `"recaptchaSecretKey":"portal-secret"`) {
		t.Errorf("a super admin reads %s %v", resp.Body, err)
	}
}
