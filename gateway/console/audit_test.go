package console_test

import (
	"net/url"
	"strings"
	"testing"
)

// The audit page refuses a filter it cannot search (a malformed date, a
// "who" that is not a reference) with a 400 that says why beside the
// field and shows what was typed, escaped; nothing is searched. (The
// searches themselves need the fhir service, which this package's stack
// does not run: deploy/standalone's TestAuditConsole has them.)
func TestConsoleAuditFilterRefused(t *testing.T) {
	s := startConsole(t)
	admin := s.member(t, "Admin", true)

	q := url.Values{"from": {"1 December"}, "who": {`<script>alert(1)</script>`}, "kind": {"sign-in"}}
	p := s.do(t, "GET", "console/audit?"+q.Encode(), admin.token, nil)
	wantPage(t, p, 400, "Audit trail", "nothing was searched", `id="from-error"`, "Not a date", `id="who-error"`,
		"Not a reference", "&lt;script&gt;alert(1)&lt;/script&gt;", "Nothing was searched.")
	if strings.Contains(p.body, "<script>alert") {
		t.Errorf("the page shows the filter unescaped: %s", p.body)
	}
	// The kind typed stays chosen; the navigation has the page.
	wantPage(t, p, 400, `<option value="sign-in" selected>Sign-in</option>`, `href="`+s.base+`console/audit">Audit</a>`)

	wantPage(t, s.do(t, "GET", "console/audit?offset=-3", admin.token, nil), 400, "Not a page of this list")
	wantPage(t, s.do(t, "GET", "console/audit/patient/not%20an%20id", admin.token, nil), 400, "Not a patient id.")
	wantPage(t, s.do(t, "GET", "console/audit/patient/p1?offset=x", admin.token, nil), 400, "Not a page of this list")
}
