package identity

import (
	"context"
	"html"
	"regexp"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/services/identity/factors"
	"github.com/pinion-health/pinion/services/identity/web"
)

// pagePost posts a page's hidden fields and these from the browser the
// page was shown to.
func pagePost(t *testing.T, page *bus.Response, remote string, kv ...string) *bus.Response {
	t.Helper()
	form := map[string][]string{}
	for _, m := range hiddenField.FindAllSubmatch(page.Body, -1) {
		form[string(m[1])] = []string{html.UnescapeString(string(m[2]))}
	}
	for i := 0; i < len(kv); i += 2 {
		form[kv[i]] = []string{kv[i+1]}
	}
	r := formRequest(form, map[string]string{"Cookie": strings.Split(page.Header["Set-Cookie"], ";")[0]})
	r.Remote = remote
	resp, err := live.svc.signins.Authorize(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

var qrImage = regexp.MustCompile(`<img src="data:image/png;base64,[^"]+"`)

// The sign-in page asks an enrolled person for a code after the password,
// and signs the browser in only once it is right; a project that requires
// MFA has a person without a factor enrol there, shown their recovery
// codes once.
func TestBrowserSignInAsksForTheCode(t *testing.T) {
	now := pinClock(t)
	p := newPerson(t, "browsermfa")
	uri, recovery := p.enroll(t, now)
	app := newWebApp(t, p.project)
	_, csrf, header := aBrowser(t)

	page := app.post(t, header, "10.33.0.1", "csrf", csrf, "email", p.email, "password", p.password)
	expectPage(t, page, 200, `name="mfa_code"`)
	nb := web.BrowserOf(&bus.Request{Header: map[string]string{"Cookie": strings.Split(page.Header["Set-Cookie"], ";")[0]}})
	if bs, err := live.svc.signins.SignedIn(context.Background(), nb); err != nil || bs != nil {
		t.Fatalf("signed in on the password alone: %+v %v", bs, err)
	}
	expectPage(t, pagePost(t, page, "10.33.0.1", "mfa_code", codeAt(t, uri, now, -1)), 400, "Invalid MFA token") // the enrolment's
	expectPage(t, pagePost(t, page, "10.33.0.1", "mfa_code", "000000"), 400, "Invalid MFA token")
	if q := returned(t, app.allow(t, pagePost(t, page, "10.33.0.1", "mfa_code", codeAt(t, uri, now, 0)), "10.33.0.1")); q.Get("code") == "" {
		t.Fatalf("no code: %v", q)
	}
	// A recovery code does for a lost device.
	page = app.post(t, header, "10.33.0.1", "csrf", csrf, "email", p.email, "password", p.password)
	if q := returned(t, pagePost(t, page, "10.33.0.1", "mfa_code", recovery[0])); q.Get("code") == "" {
		t.Fatalf("no code: %v", q)
	}

	// Required by the project: enrolment on the page.
	r := newPerson(t, "browserenrol")
	requireMFA(t, r.project)
	app = newWebApp(t, r.project)
	page = app.post(t, header, "10.33.0.2", "csrf", csrf, "email", r.email, "password", r.password)
	expectPage(t, page, 200, "Set up your authenticator")
	if !qrImage.Match(page.Body) || !strings.Contains(page.Header["Content-Security-Policy"], "img-src 'self' data:;") {
		t.Fatalf("no QR code, or not allowed:\n%v\n%s", page.Header, page.Body)
	}
	key := regexp.MustCompile(`<code id="mfa-key">([A-Z2-7]+)</code>`).FindSubmatch(page.Body)
	if key == nil {
		t.Fatalf("no key:\n%s", page.Body)
	}
	enrolURI := "otpauth://totp/x?secret=" + string(key[1])
	expectPage(t, pagePost(t, page, "10.33.0.2", "mfa_code", "000000"), 400, "Invalid MFA token")
	codes := pagePost(t, page, "10.33.0.2", "mfa_code", codeAt(t, enrolURI, now, 0))
	expectPage(t, codes, 200, `id="recovery-codes"`)
	if n := strings.Count(string(codes.Body), "<li><code>"); n != factors.RecoveryCount {
		t.Fatalf("%d recovery codes:\n%s", n, codes.Body)
	}
	if q := returned(t, app.allow(t, pagePost(t, codes, "10.33.0.2"), "10.33.0.2")); q.Get("code") == "" {
		t.Fatalf("no code: %v", q)
	}
}
