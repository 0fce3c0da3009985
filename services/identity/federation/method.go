package federation

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/services/identity/account"
)

// methodBodyLimit bounds POST /auth/method's body: an e-mail address
// (at most 320 bytes) in a small JSON object.
const methodBodyLimit = 1024

// methodRequest is POST /auth/method's body.
type methodRequest struct {
	Email string `json:"email"`
}

// check finds what is wrong with the body, with Medplum's text.
func (in methodRequest) check() error {
	if len(in.Email) > 320 || !account.ValidEmail(in.Email) {
		return fhir.Invalid(fhir.FieldIssue("email", "Valid email address is required"))
	}
	return nil
}

// externalAuth is the answer for a domain that signs in elsewhere.
type externalAuth struct {
	Domain       string `json:"domain"`
	AuthorizeURL string `json:"authorizeUrl"`
}

// Method is POST /auth/method {email}: how the app should sign this
// address in, as Medplum answers it. {} means the password form; a
// domain whose DomainConfiguration names an identity provider gets
// {domain, authorizeUrl}, where the app sends the browser. Users are
// never looked up, so the answer tells nobody whether an account exists
// (only, as in Medplum, whether a domain is configured).
func (s *Service) Method(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if len(r.Body) > methodBodyLimit {
		return nil, fhir.TooLarge("The body of /auth/method is at most 1024 bytes")
	}
	var in methodRequest
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	if err := in.check(); err != nil {
		return nil, err
	}
	// As in Medplum: the domain as typed in the answer, lower case in the search.
	domain := in.Email[strings.LastIndex(in.Email, "@")+1:]
	ext, err := s.externalAuth(ctx, domain)
	if err != nil {
		return nil, err
	}
	body := []byte("{}")
	if ext != nil {
		if body, err = json.Marshal(ext); err != nil {
			return nil, err
		}
	}
	return &bus.Response{Status: 200, Header: map[string]string{"Content-Type": bus.JSONContentType}, Body: body}, nil
}

// externalAuth is where a domain's people sign in, or nil when they use
// a password here: the identity provider of the domain's
// DomainConfiguration, its authorize URL with the parameters of an
// OpenID Connect code flow back to <base>auth/external.
func (s *Service) externalAuth(ctx context.Context, domain string) (*externalAuth, error) {
	q, err := search.Parse("DomainConfiguration", url.Values{"domain": {strings.ToLower(domain)}, "_count": {"1"}})
	if err != nil {
		return nil, err
	}
	page, err := s.repo.Search(ctx, repo.AllProjects, "DomainConfiguration", q)
	if err != nil {
		return nil, err
	}
	if len(page.Resources) == 0 {
		return nil, nil
	}
	var dc struct {
		IdentityProvider *struct {
			AuthorizeURL string `json:"authorizeUrl"`
			ClientID     string `json:"clientId"`
		} `json:"identityProvider"`
	}
	if err := json.Unmarshal(page.Resources[0].JSON, &dc); err != nil {
		return nil, err
	}
	if dc.IdentityProvider == nil {
		return nil, nil
	}
	u, err := url.Parse(dc.IdentityProvider.AuthorizeURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		s.log.Error("domain configuration has no usable authorize URL", "domain", domain)
		return nil, fhir.BadRequest("Failed to construct URL for the domain")
	}
	v := u.Query()
	v.Set("client_id", dc.IdentityProvider.ClientID)
	v.Set("redirect_uri", s.cfg.BaseURL+"auth/external")
	v.Set("response_type", "code")
	v.Set("scope", "openid profile email")
	u.RawQuery = v.Encode()
	return &externalAuth{Domain: domain, AuthorizeURL: u.String()}, nil
}
