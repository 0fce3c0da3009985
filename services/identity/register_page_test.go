package identity

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/registration"
)

// The registration page's refusals: a form from elsewhere (CSRF), an
// oversized one, each field's issue beside it with Medplum's text, and
// every page when registration is off.
func TestRegisterPageRefusals(t *testing.T) {
	ctx := context.Background()
	_, csrf, header := aBrowser(t)
	post := func(s *Service, path string, form url.Values, h map[string]string) *bus.Response {
		t.Helper()
		r := formRequest(form, h)
		r.Path, r.Remote = path, "10.12.0.1"
		var resp *bus.Response
		var err error
		switch path {
		case "/register/project":
			resp, err = s.registration.ProjectPage(ctx, r)
		default:
			resp, err = s.registration.AccountPage(ctx, r)
		}
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	expectPage := func(resp *bus.Response, status int, text string) {
		t.Helper()
		if resp.Status != status || !strings.Contains(string(resp.Body), text) {
			t.Fatalf("%d %s, want %d with %q", resp.Status, resp.Body, status, text)
		}
		if !strings.Contains(resp.Header["Content-Security-Policy"], "default-src 'none'") {
			t.Fatalf("no page CSP: %v", resp.Header)
		}
	}
	good := url.Values{"csrf": {csrf}, "firstName": {"Page"}, "lastName": {"Refused"}, "email": {newEmail("pagerefused")}, "password": {"a long password"}}
	with := func(k, v string) url.Values {
		f := url.Values{}
		for key, vs := range good {
			f[key] = vs
		}
		f.Set(k, v)
		return f
	}

	expectPage(post(live.svc, "/register", with("csrf", "forged"), header), 403, "Form expired")
	big := with("firstName", strings.Repeat("x", 32<<10))
	expectPage(post(live.svc, "/register", big, header), 413, "Form too large")
	expectPage(post(live.svc, "/register", with("password", "short"), header), 400, account.PasswordLengthText)
	expectPage(post(live.svc, "/register", with("email", "not an address"), header), 400, "Valid email address between 3 and 72 characters is required")
	expectPage(post(live.svc, "/register", with("password", "password"), header), 400, "Password found in breach database")
	// Not signed in, the project page sends the person to sign in first.
	expectPage(post(live.svc, "/register/project", url.Values{"csrf": {csrf}, "projectName": {"A Clinic"}}, header), 401, "Sign in first")

	off := another(t, Config{BaseURL: testBase, RegisterDisabled: true})
	expectPage(post(off, "/register", good, header), 403, registration.OffText)
	expectPage(post(off, "/register/project", good, header), 403, registration.OffText)
	resp, err := off.registration.PatientPage(ctx, &bus.Request{Method: "GET", Params: map[string]string{"projectId": newProject(t, "Closed")}})
	if err != nil {
		t.Fatal(err)
	}
	expectPage(resp, 403, registration.OffText)
	// On, a project without a patient policy has no sign-up page.
	resp, err = live.svc.registration.PatientPage(ctx, &bus.Request{Method: "GET", Params: map[string]string{"projectId": newProject(t, "No sign-up")}})
	if err != nil {
		t.Fatal(err)
	}
	expectPage(resp, 404, "Project does not allow open registration")
}
