package authserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/clients"
)

// clientCredentials is the client_credentials grant (RFC 6749 §4.4): a
// client's own token, for its own membership, after it proved who it is
// with its secret or a signed assertion (private_key_jwt).
type clientCredentials struct{ s *Service }

func (clientCredentials) Type() string { return "client_credentials" }

func (g clientCredentials) Issue(ctx context.Context, r *bus.Request, form url.Values) (*bus.Response, error) {
	s := g.s
	var (
		c      *clients.Client
		member *session.Membership
		no     *Refusal
		err    error
		id     string
	)
	if form.Has("client_assertion_type") || form.Has("client_assertion") {
		// private_key_jwt: the assertion stands in for the secret.
		if id, no, err = s.clientAssertion(ctx, form.Get("client_assertion_type"), form.Get("client_assertion")); err == nil && no == nil {
			c, member, no, err = s.authenticateClient(ctx, r, id, func(*clients.Client) bool { return true })
		}
	} else {
		var secret string
		if id, secret, no = credentials(r.Get("Authorization"), form); no != nil {
			return nil, no
		}
		switch {
		case id == "":
			return nil, InvalidRequest("Missing client_id")
		case secret == "":
			return nil, InvalidRequest("Missing client_secret")
		}
		c, member, no, err = s.authenticateClient(ctx, r, id, s.clients.SecretProof(ctx, id, secret))
	}
	if err != nil {
		return nil, err
	}
	if no != nil {
		return nil, no
	}
	scope := form.Get("scope")
	if scope == "" {
		scope = "openid"
	}
	ref := "ClientApplication/" + id
	claims := &auth.Claims{LoginID: c.LoginID, Username: id, Profile: ref, Scope: scope, ClientID: id}
	claims.Subject = id
	claims.Audience = jwt.ClaimStrings{s.cfg.BaseURL}
	accessToken, err := s.signer.Sign(claims, s.cfg.TokenLifetime)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	project, profile := c.Displays.Refs(member.Project, ref)
	body := clientTokenAnswer{
		TokenType:   "Bearer",
		ExpiresIn:   int(s.cfg.TokenLifetime.Seconds()),
		Scope:       access.GrantedScope(scope),
		AccessToken: accessToken,
		Project:     project,
		Profile:     profile,
	}
	// An ID token only when the client asked for openid itself: OpenID
	// Connect defines none for client_credentials (no person signs in),
	// and the default scope "openid" is Medplum's label for the login, not
	// a request for one. The second signature was a third of the CPU of
	// every client token (issue 39).
	if HasScope(form.Get("scope"), "openid") {
		idc := &auth.Claims{LoginID: c.LoginID, FHIRUser: ref, ClientID: id}
		idc.Subject = id
		idc.Audience = jwt.ClaimStrings{id}
		// ES256, as the access token: no person signed in, so no relying
		// party verifies it as OpenID sign-in, and an RS256 signature
		// (1.5 ms, 30 times ES256's) would set the pace of client
		// tokens. Discovery lists both algorithms.
		if body.IDToken, err = s.signer.Sign(idc, s.cfg.TokenLifetime); err != nil {
			return nil, fmt.Errorf("sign: %w", err)
		}
	}
	if err := s.recordIssued(ctx, r, g.Type(), ref, id, member.Project, body.Scope); err != nil {
		return nil, err
	}
	resp := bus.JSON(200, body)
	resp.Header["Cache-Control"] = "no-store"
	resp.Header["Pragma"] = "no-cache"
	return resp, nil
}

// clientTokenAnswer is the token endpoint's answer to a client's own
// client_credentials grant (Medplum's fields).
type clientTokenAnswer struct {
	TokenType   string         `json:"token_type"`
	ExpiresIn   int            `json:"expires_in"`
	Scope       string         `json:"scope"`
	AccessToken string         `json:"access_token"`
	IDToken     string         `json:"id_token,omitempty"`
	Project     fhir.Reference `json:"project"`
	Profile     fhir.Reference `json:"profile"`
}

// authenticateClient is clients.Authenticate for the token endpoint: its
// refusals as OAuth errors (RFC 6749 §5.2).
func (s *Service) authenticateClient(ctx context.Context, r *bus.Request, id string, proof func(*clients.Client) bool) (*clients.Client, *session.Membership, *Refusal, error) {
	c, member, err := s.clients.Authenticate(ctx, id, r.Remote, session.AppliedRevision(r.Get(session.AppliedHeader)), proof)
	switch {
	case errors.Is(err, clients.ErrUnknown), errors.Is(err, clients.ErrSecret):
		return nil, nil, InvalidClient(err.Error()), nil
	case errors.Is(err, clients.ErrInactive), errors.Is(err, clients.ErrAddress):
		return nil, nil, UnauthorizedClient(err.Error()), nil
	case err != nil:
		return nil, nil, nil, err
	}
	return c, member, nil, nil
}
