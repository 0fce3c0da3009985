package authserver

import (
	"context"
	"net/url"
	"strings"

	"github.com/pinion-health/pinion/pkg/bus"
)

// Token is POST /oauth2/token: the form's grant_type picks the Grant that
// answers. A grant's refusal becomes its OAuth error answer here, in one
// place; any other error is the service failing (a 5xx).
func (s *Service) Token(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	resp, err := s.grant(ctx, r)
	// Recorded before the answer; what a grant issues, it records itself.
	if aerr := s.recordRefusal(ctx, r, err); aerr != nil {
		return nil, aerr
	}
	return Answer(resp, err)
}

func (s *Service) grant(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if !strings.HasPrefix(strings.ToLower(r.Get("Content-Type")), "application/x-www-form-urlencoded") {
		return nil, InvalidRequest("Unsupported content type")
	}
	form, err := url.ParseQuery(string(r.Body))
	if err != nil {
		return nil, InvalidRequest("Could not parse form")
	}
	gt := form.Get("grant_type")
	if gt == "" {
		return nil, InvalidRequest("Missing grant_type")
	}
	for _, g := range s.grants {
		if g.Type() == gt {
			return g.Issue(ctx, r, form)
		}
	}
	// RFC 6749 §5.2's code (jwt-bearer, password, ...), with Medplum's text.
	return nil, UnsupportedGrantType("Unsupported grant_type")
}

// AddGrant serves one more grant type at the token endpoint (and names it
// in discovery): the token exchange, which package federation keeps.
func (s *Service) AddGrant(g Grant) { s.grants = append(s.grants, g) }
