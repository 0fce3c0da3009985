package federation

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/kvcas"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/signin"
	"github.com/pinion-health/pinion/services/identity/web"
)

// The sign-in page (/oauth2/authorize) routes an address whose domain has
// an identity provider to that provider, server-side: the person types
// the e-mail and submits; instead of checking a password, the page links
// to the provider (a link, since the page's form-action policy would stop
// a redirect to the provider's origin after a post).
//
// Everything the sign-in continues with is the server's: the state sent
// to the provider is a random value, and what it stands for — the domain,
// the nonce, the PKCE verifier, the authorization request to return to
// and the browser that started it — is kept here under its digest
// (externalStart), for ten minutes, and spent once. The provider returns
// to /auth/external, which signs that browser in (a new cookie) only, and
// sends it back to /oauth2/authorize, where the request finishes as after
// a password. Only a domain's provider (a DomainConfiguration, written by
// super admins) is offered here, and only it opens a server-wide session.

// externalStart is a sign-in the page sent to a provider.
type externalStart struct {
	Domain    string `json:"domain"`
	Nonce     string `json:"nonce"`
	Verifier  string `json:"verifier,omitempty"` // PKCE, when the provider uses it
	Authorize string `json:"authorize"`          // the authorization request, encoded
	Browser   string `json:"browser"`            // sessionKey of the browser that started it
	Expires   int64  `json:"expires"`            // Unix seconds
}

// externalStartLifetime is how long the person may take at the provider.
const externalStartLifetime = 10 * time.Minute

func externalStartKey(state string) string {
	d := sha256.Sum256([]byte("external-start:" + state))
	return "ext-" + hex.EncodeToString(d[:])
}

// Page answers a posted sign-in form whose address's domain has a
// provider: a page linking there. nil when the domain has none.
func (s *Service) Page(ctx context.Context, b web.Browser, a signin.AuthRequest, email string) (*bus.Response, error) {
	domain := email[strings.LastIndex(email, "@")+1:]
	ext, err := s.externalAuth(ctx, domain)
	if err != nil || ext == nil {
		return nil, err
	}
	idp, err := s.domainProvider(ctx, domain)
	if err != nil || idp == nil {
		return nil, err
	}
	start := externalStart{Domain: domain, Nonce: auth.NewSecret(), Authorize: a.Values().Encode(),
		Browser: b.Key(), Expires: time.Now().Add(externalStartLifetime).Unix()}
	state := auth.NewSecret()
	u, err := url.Parse(ext.AuthorizeURL)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("state", state)
	q.Set("nonce", start.Nonce)
	if idp.UsePkce {
		start.Verifier = auth.NewSecret()
		d := sha256.Sum256([]byte(start.Verifier))
		q.Set("code_challenge", base64.RawURLEncoding.EncodeToString(d[:]))
		q.Set("code_challenge_method", "S256")
	}
	u.RawQuery = q.Encode()
	v, err := json.Marshal(start)
	if err != nil {
		return nil, err
	}
	if _, err := s.signins.Browsers().Put(ctx, externalStartKey(state), v); err != nil {
		return nil, err
	}
	return s.pages.Message(200, b, "Sign in with your organisation", u.String(), "Continue to your organisation's sign-in",
		"Addresses at "+domain+" sign in with their organisation's account, not a password here.")
}

// takeExternalStart spends the sign-in a state stands for, started by
// browser b: nil when there is none, it is another browser's (whose
// sign-in is left to it), it expired, or another request spent it first.
func (s *Service) takeExternalStart(ctx context.Context, state string, b web.Browser) (*externalStart, error) {
	key := externalStartKey(state)
	st, rev, err := kvcas.Entry[externalStart](ctx, s.signins.Browsers(), key)
	if err != nil || st == nil || b.IsNew || st.Browser != b.Key() {
		return nil, err
	}
	if ok, err := kvcas.Spend(ctx, s.signins.Browsers(), key, rev); err != nil || !ok {
		return nil, err
	}
	if time.Now().Unix() > st.Expires {
		return nil, nil
	}
	return st, nil
}

// externalPageCallback finishes a sign-in the page sent to a provider:
// the browser that started it, and only it, is signed in as the person
// (noted as an external sign-in, after the second factor a password
// sign-in would ask) and returns to the authorization request it came
// from.
func (s *Service) externalPageCallback(ctx context.Context, r *bus.Request, code, state string) (*bus.Response, error) {
	b := web.BrowserOf(r)
	start, err := s.takeExternalStart(ctx, state, b)
	if err != nil {
		return nil, err
	}
	if start == nil {
		s.log.Warn("external sign-in: the state is unknown, spent, expired or another browser's", "remote", r.Remote)
		return s.pages.Message(400, b, "Sign-in expired", "", "",
			"This sign-in was started in another browser, or its page is too old. Go back to the application and sign in again.")
	}
	params, err := url.ParseQuery(start.Authorize)
	if err != nil {
		return s.pages.Message(400, b, "Sign-in cannot continue", "", "", "The application's sign-in request could not be read.")
	}
	idp, err := s.domainProvider(ctx, start.Domain)
	if err != nil {
		return nil, err
	}
	if idp == nil {
		return nil, badExternal
	}
	claims, err := s.verifyExternalCode(ctx, idp, code, start.Verifier, start.Nonce, true)
	if err != nil {
		return nil, err
	}
	email, externalID, err := claims.identity(idp)
	if err != nil {
		return nil, err
	}
	if email != "" && !strings.HasSuffix(email, "@"+strings.ToLower(start.Domain)) {
		return nil, fhir.BadRequest("Email address does not match domain")
	}
	userRef, _, err := s.externalMember(ctx, email, externalID, "")
	if err != nil {
		return nil, err
	}
	a := signin.ReadAuthRequest(params)
	if problem, err := s.signins.CheckClient(ctx, &a); err != nil || problem != "" {
		if err != nil {
			return nil, err
		}
		return s.pages.Message(400, b, "Sign-in cannot continue", "", "", problem)
	}
	// A new browser id at sign-in, as after a password (session fixation).
	nb := web.NewBrowser()
	now := time.Now()
	audit.Note(ctx, userRef, "") // the trail's sign-in event names the person
	bs := &signin.BrowserSession{User: userRef, AuthTime: now.Unix(), Start: now.UnixMilli(), Method: signin.AuthExternal, ProviderMFA: claims.assertsFactor()}
	// The session reaches every project of the person, so no project's
	// trust in the provider's factor stands in for the person's own.
	if step, _, err := s.factors.Step(ctx, account.UserIDOf(userRef), "", bs.Proof()); err != nil || step != "" {
		if err != nil {
			return nil, err
		}
		return s.signins.AskFactor(ctx, nb, a, bs, step)
	}
	if err := s.signins.SignInBrowser(ctx, nb, bs); err != nil {
		return nil, err
	}
	return &bus.Response{Status: 302, Header: map[string]string{
		"Location": s.cfg.BaseURL + "oauth2/authorize?" + params.Encode(), "Set-Cookie": s.pages.SetCookie(nb),
		"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
	}}, nil
}
