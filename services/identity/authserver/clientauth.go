package authserver

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
func (s *Service) presentedClient(ctx context.Context, r *bus.Request, form url.Values) (*tokenClient, *Refusal, error) {
	if form.Has("client_assertion_type") || form.Has("client_assertion") {
		id, no, err := s.clientAssertion(ctx, form.Get("client_assertion_type"), form.Get("client_assertion"))
		if err != nil || no != nil {
			return nil, no, err
		}
		if cid := form.Get("client_id"); cid != "" && cid != id {
			return nil, InvalidClient("Invalid client"), nil
		}
		return &tokenClient{ID: id, Authenticated: true}, nil, nil
	}
	id, secret, no := credentials(r.Get("Authorization"), form)
	if no != nil {
		return nil, no, nil
	}
	if id == "" {
		return &tokenClient{}, nil, nil
	}
	if clients.Builtin(id, s.cfg.BaseURL) != nil {
		// The console and Medplum's CLI are public clients: no secret.
		if secret != "" {
			return nil, InvalidClient("Invalid secret"), nil
		}
		return &tokenClient{ID: id}, nil, nil
	}
	c, err := s.clients.Get(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case c == nil:
		return nil, InvalidClient("Invalid client"), nil
	case secret == "" && (c.Cred != nil || c.JWKS):
		return nil, InvalidClient("Client authentication required"), nil
	case secret == "":
		return &tokenClient{ID: id}, nil, nil
	case c.Cred == nil || !s.clients.SecretProof(ctx, id, secret)(c):
		return nil, InvalidClient("Invalid secret"), nil
	}
	return &tokenClient{ID: id, Authenticated: true}, nil, nil
}

// credentials reads the client id and secret a request presents, for
// every endpoint that takes them (token, revocation, introspection): from
// HTTP Basic, whose halves are form-encoded (RFC 6749 §2.3.1), or from the
// form (client_secret_post). Medplum's client may send both (its basic
// auth and a client login at once): then they must name the same client
// and, where the form has a secret, the same secret — two different
// credentials are refused (RFC 6749 §2.3: one method per request), never
// one silently preferred. A secret alone names no client and is refused.
func credentials(authorization string, form url.Values) (id, secret string, no *Refusal) {
	id, secret = form.Get("client_id"), form.Get("client_secret")
	if authorization == "" {
		if id == "" && secret != "" {
			return "", "", InvalidRequest("Missing client_id")
		}
		return id, secret, nil
	}
	bid, bsecret, ok := basicHalves(authorization)
	switch {
	case !ok || bid == "":
		return "", "", InvalidRequest("Invalid authorization header")
	case id != "" && id != bid:
		return "", "", InvalidClient("Invalid client")
	case secret != "" && secret != bsecret:
		return "", "", InvalidRequest("Client credentials sent twice")
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

// authenticatedFor checks the one rule of a code or refresh grant that
// needs the client's registration: a confidential client (a secret or a
// jwksUri) to which the code or token was issued must have authenticated
// (RFC 6749 §4.1.3, §6), even when the request names no client.
func (s *Service) authenticatedFor(ctx context.Context, tc *tokenClient, issuedTo string) (*Refusal, error) {
	if issuedTo == "" || tc.Authenticated || clients.Builtin(issuedTo, s.cfg.BaseURL) != nil {
		return nil, nil
	}
	c, err := s.clients.Get(ctx, issuedTo)
	if err != nil {
		return nil, err
	}
	if c != nil && (c.Cred != nil || c.JWKS) {
		return InvalidClient("Client authentication required"), nil
	}
	return nil, nil
}
