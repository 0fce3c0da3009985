package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/clients"
)

// tokenError is an OAuth2 error answer: RFC 6749 §5.2's code, with
// Medplum's text as its description. A client that failed to authenticate
// gets 401 and a Basic challenge, as §5.2 asks; everything else is 400.
func tokenError(code, desc string) *bus.Response {
	status := 400
	if code == "invalid_client" {
		status = 401
	}
	resp := bus.JSON(status, map[string]string{"error": code, "error_description": desc})
	if status == 401 {
		resp.Header["WWW-Authenticate"] = `Basic realm="token"`
	}
	resp.Header["Cache-Control"] = "no-store"
	resp.Header["Pragma"] = "no-cache"
	return resp
}

// token is POST /oauth2/token. Its grants refuse with a *refusal error,
// which becomes an OAuth error answer here, in one place; any other error
// is the service failing (a 5xx).
func (s *Service) token(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	resp, err := s.grant(ctx, r)
	if no := (*refusal)(nil); errors.As(err, &no) {
		return no.response(), nil
	}
	return resp, err
}

func (s *Service) grant(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	ct := r.Get("Content-Type")
	if !strings.HasPrefix(strings.ToLower(ct), "application/x-www-form-urlencoded") {
		return nil, &refusal{"invalid_request", "Unsupported content type", 0}
	}
	form, err := url.ParseQuery(string(r.Body))
	if err != nil {
		return nil, &refusal{"invalid_request", "Could not parse form", 0}
	}
	switch gt := form.Get("grant_type"); gt {
	case "":
		return nil, &refusal{"invalid_request", "Missing grant_type", 0}
	case "client_credentials":
		return s.clientCredentials(ctx, r, form)
	case "authorization_code":
		return s.authorizationCode(ctx, r, form)
	case "refresh_token":
		return s.refreshToken(ctx, r, form)
	case grantTokenExchange:
		return s.tokenExchange(ctx, r, form)
	default:
		// RFC 6749 §5.2's code (jwt-bearer, password, ...), with Medplum's text.
		return nil, &refusal{"unsupported_grant_type", "Unsupported grant_type", 0}
	}
}

// clientAuth reads the client's id and secret from HTTP Basic (the
// Authorization header) or else the form (RFC 6749 §2.3.1): when both
// come, the header counts and the form is not read.
func clientAuth(authorization string, form url.Values) (id, secret string, no *refusal) {
	if authorization != "" {
		var ok bool
		if id, secret, ok = basicHalves(authorization); !ok {
			return "", "", &refusal{"invalid_request", "Invalid authorization header", 0}
		}
	} else {
		id, secret = form.Get("client_id"), form.Get("client_secret")
	}
	switch {
	case id == "":
		return "", "", &refusal{"invalid_request", "Missing client_id", 0}
	case secret == "":
		return "", "", &refusal{"invalid_request", "Missing client_secret", 0}
	}
	return id, secret, nil
}

func (s *Service) clientCredentials(ctx context.Context, r *bus.Request, form url.Values) (*bus.Response, error) {
	var (
		c      *clients.Client
		member *session.Membership
		no     *refusal
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
		if id, secret, no = clientAuth(r.Get("Authorization"), form); no != nil {
			return nil, no
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
	if hasScope(form.Get("scope"), "openid") {
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
	resp := bus.JSON(200, body)
	resp.Header["Cache-Control"] = "no-store"
	resp.Header["Pragma"] = "no-cache"
	return resp, nil
}

// refusal is why the token endpoint issues no tokens: RFC 6749 §5.2's code
// and Medplum's text. It is an error, answered by token; rev, when set, is
// the logins bucket revision of the revocation the refusal wrote, which the
// caller's next request must see.
type refusal struct {
	code, text string
	rev        uint64
}

func (r *refusal) Error() string { return r.code + ": " + r.text }

// revoked is the refusal, marked with the revocation it wrote.
func (r *refusal) revoked(rev uint64) *refusal {
	c := *r
	c.rev = rev
	return &c
}

// authenticateClient is clients.Authenticate for the token endpoint: its
// refusals as OAuth errors (RFC 6749 §5.2).
func (s *Service) authenticateClient(ctx context.Context, r *bus.Request, id string, proof func(*clients.Client) bool) (*clients.Client, *session.Membership, *refusal, error) {
	c, member, err := s.clients.Authenticate(ctx, id, r.Remote, session.AppliedRevision(r.Get(session.AppliedHeader)), proof)
	switch {
	case errors.Is(err, clients.ErrUnknown), errors.Is(err, clients.ErrSecret):
		return nil, nil, &refusal{"invalid_client", err.Error(), 0}, nil
	case errors.Is(err, clients.ErrInactive), errors.Is(err, clients.ErrAddress):
		return nil, nil, &refusal{"unauthorized_client", err.Error(), 0}, nil
	case err != nil:
		return nil, nil, nil, err
	}
	return c, member, nil, nil
}

// basic is HTTP Basic client authentication on the API (the gateway asks,
// with the id and secret it read from the Authorization header): the same
// checks as the token endpoint, answered with the client's login. Failures
// count against the sign-in limiter, per client and address, as password
// failures do; the caller gets 401 (403 for a blocked address) without
// learning which check failed.
func (s *Service) basic(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	var in bus.BasicAuth
	if err := json.Unmarshal(r.Body, &in); err != nil || in.ID == "" || in.Secret == "" {
		return nil, fhir.Unauthorized()
	}
	key := "client:" + in.ID
	if err := s.limiter.Allow(r.Remote, key); err != nil {
		return nil, err
	}
	c, _, err := s.clients.Authenticate(ctx, in.ID, r.Remote, session.AppliedRevision(r.Get(session.AppliedHeader)), s.clients.SecretProof(ctx, in.ID, in.Secret))
	switch {
	case errors.Is(err, clients.ErrAddress):
		s.limiter.Released(r.Remote, key)
		return nil, fhir.AddressNotAllowed()
	case errors.Is(err, clients.ErrUnknown), errors.Is(err, clients.ErrSecret), errors.Is(err, clients.ErrInactive):
		s.limiter.Failed(r.Remote, key)
		return nil, fhir.Unauthorized()
	case err != nil:
		s.limiter.Released(r.Remote, key)
		return nil, err
	}
	s.limiter.Succeeded(r.Remote, key)
	return bus.JSON(200, bus.BasicLogin{LoginID: c.LoginID}), nil
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
