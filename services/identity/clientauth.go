package identity

import (
	"context"
	"encoding/base64"
	"net/url"
	"strings"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/services/identity/clients"
)

// Client authentication at the token, revocation and introspection
// endpoints (RFC 6749 §2.3, §3.2.1). A client proves itself with a signed
// assertion (private_key_jwt), with its secret in HTTP Basic (each half
// form-encoded, §2.3.1) or in the form (client_secret_post), or — a
// public client — names itself with client_id alone. Credentials that come
// are always checked; a confidential client, one with a secret or a
// jwksUri, must send them.

// tokenClient is the client a token-endpoint request comes from.
type tokenClient struct {
	ID string // "" when the request names no client
	// Authenticated: it proved who it is (a secret or an assertion).
	Authenticated bool
}

// presentedClient reads and checks the client of a token-endpoint request.
// A refusal is invalid_client (401) when credentials were wrong or a
// confidential client sent none, invalid_request when they were malformed.
func (s *Service) presentedClient(ctx context.Context, r *bus.Request, form url.Values) (*tokenClient, *refusal, error) {
	if form.Has("client_assertion_type") || form.Has("client_assertion") {
		id, no, err := s.clientAssertion(ctx, form.Get("client_assertion_type"), form.Get("client_assertion"))
		if err != nil || no != nil {
			return nil, no, err
		}
		if cid := form.Get("client_id"); cid != "" && cid != id {
			return nil, &refusal{"invalid_client", "Invalid client", 0}, nil
		}
		return &tokenClient{ID: id, Authenticated: true}, nil, nil
	}
	id, secret, no := presentedCredentials(r.Get("Authorization"), form)
	if no != nil {
		return nil, no, nil
	}
	if id == "" {
		return &tokenClient{}, nil, nil
	}
	if clients.Builtin(id, s.cfg.BaseURL) != nil {
		// The console and Medplum's CLI are public clients: no secret.
		if secret != "" {
			return nil, &refusal{"invalid_client", "Invalid secret", 0}, nil
		}
		return &tokenClient{ID: id}, nil, nil
	}
	c, err := s.clients.Get(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case c == nil:
		return nil, &refusal{"invalid_client", "Invalid client", 0}, nil
	case secret == "" && (c.Cred != nil || c.JWKS):
		return nil, &refusal{"invalid_client", "Client authentication required", 0}, nil
	case secret == "":
		return &tokenClient{ID: id}, nil, nil
	case c.Cred == nil || !s.clients.SecretProof(ctx, id, secret)(c):
		return nil, &refusal{"invalid_client", "Invalid secret", 0}, nil
	}
	return &tokenClient{ID: id, Authenticated: true}, nil, nil
}

// presentedCredentials reads a client id and secret from HTTP Basic, whose
// halves are form-encoded (RFC 6749 §2.3.1), or else from the form. Both at
// once must name one client; a secret alone names none and is refused.
func presentedCredentials(authorization string, form url.Values) (id, secret string, no *refusal) {
	id, secret = form.Get("client_id"), form.Get("client_secret")
	if authorization == "" {
		if id == "" && secret != "" {
			return "", "", &refusal{"invalid_request", "Missing client_id", 0}
		}
		return id, secret, nil
	}
	bid, bsecret, ok := basicHalves(authorization)
	switch {
	case !ok || bid == "":
		return "", "", &refusal{"invalid_request", "Invalid authorization header", 0}
	case secret != "":
		// Two methods at once (RFC 6749 §2.3: MUST NOT).
		return "", "", &refusal{"invalid_request", "Client credentials sent twice", 0}
	case id != "" && id != bid:
		return "", "", &refusal{"invalid_client", "Invalid client", 0}
	}
	return bid, bsecret, nil
}

// basicHalves reads HTTP Basic credentials: ok is false for another scheme
// or bad base64. Both halves are form-encoded (RFC 6749 §2.3.1); a half
// with a bad escape reads as empty, and is then missing.
func basicHalves(authorization string) (id, secret string, ok bool) {
	enc, ok := strings.CutPrefix(authorization, "Basic ")
	if !ok {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return "", "", false
	}
	id, secret, _ = strings.Cut(string(raw), ":")
	id, _ = url.QueryUnescape(id)
	secret, _ = url.QueryUnescape(secret)
	return id, secret, true
}
