package signin

import (
	"context"
	"net/url"
	"strings"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/authserver"
	"github.com/pinion-health/pinion/services/identity/web"
)

// askConsent is nil when the person consented to the client for the
// request's scopes before, or does now (the consent page posted "allow");
// otherwise it is the answer: the consent page, or the client told no.
// prompt=none never shows the page (OIDC Core §3.1.2.6: consent_required).
func (s *Service) askConsent(ctx context.Context, r *bus.Request, b web.Browser, a AuthRequest, bs *BrowserSession, membership string, choices []account.Choice, form url.Values) (*bus.Response, error) {
	switch form.Get("consent") {
	case "allow":
		if err := s.consents.Give(ctx, bs.User, a.ClientID, a.Scope); err != nil {
			return nil, err
		}
		return nil, s.record(ctx, audit.Event{Kind: audit.ConsentGiven.Name, Project: a.project, Who: bs.User,
			Client: audit.ClientRef(a.ClientID), Address: r.Remote,
			Entities: []audit.Entity{{What: audit.ClientRef(a.ClientID), Detail: "scope=" + a.Scope}}})
	case "deny":
		return a.fail("access_denied", "The person did not allow the application"), nil
	}
	if a.Prompt != "consent" {
		ok, err := s.consents.Given(ctx, bs.User, a.ClientID, a.Scope)
		if err != nil || ok {
			return nil, err
		}
	}
	if a.Prompt == "none" {
		return a.fail("consent_required", "The person has not allowed this application"), nil
	}
	csrf, err := s.pages.CSRFToken(ctx, b)
	if err != nil {
		return nil, err
	}
	d := web.Data{Title: "Allow " + clientName(a.client) + "?", CSRF: csrf, App: clientName(a.client),
		Hidden: a.Values(), Membership: membership, Scopes: describeScopes(shownScope(a.Scope)), Registrar: a.projectName}
	for _, c := range choices {
		if c.ID == membership {
			d.Project, d.Profile = display(c.Project), display(c.Profile)
		}
	}
	resp, err := s.pages.Render(200, "consent", b, d)
	if resp != nil {
		resp.Header["Content-Security-Policy"] = AuthorizeCSP(a.target)
		resp.Header["Set-Cookie"] = s.pages.SetCookie(b)
	}
	return resp, err
}

// shownScope is what the consent page describes: the scopes honoured, and
// the launch scopes asked for (they give the application a patient).
func shownScope(scope string) string {
	shown := access.GrantedScope(scope)
	for _, w := range []string{scopeLaunch, scopeLaunchPatient} {
		if authserver.HasScope(scope, w) {
			shown += " " + w
		}
	}
	return shown
}

// describeScopes says in words what each scope lets the client do.
func describeScopes(scope string) []string {
	var out []string
	for _, w := range strings.Fields(scope) {
		switch w {
		case "openid":
			out = append(out, "know who you are")
		case "fhirUser":
			out = append(out, "know your profile in the project")
		case "profile":
			out = append(out, "see your name")
		case "email":
			out = append(out, "see your e-mail address")
		case "offline_access", "offline":
			out = append(out, "keep access while you are away, until you withdraw it")
		case scopeLaunch:
			out = append(out, "open the patient or encounter your record system has open")
		case scopeLaunchPatient:
			out = append(out, "ask you which patient to open")
		default:
			out = append(out, "use the permission "+w)
		}
	}
	return out
}
