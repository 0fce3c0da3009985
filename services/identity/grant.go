package identity

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/clients"
)

// The token endpoint's rules for the grants that redeem a sign-in: an
// authorization code, or a refresh token. They run inside the session
// bucket's update of the login, which may retry, so they only decide; the
// caller writes.

// verdict is what presenting a code or a refresh token does to its login.
type verdict struct {
	refused *refusal // why no tokens are issued; nil: they are
	// revoke ends the login as well: what came was replayed or stolen, or
	// the user's sessions ended since. The login is written, refused.
	revoke bool
}

// settle applies a refusal to the login being updated: one that revokes is
// written, any other leaves the login as it was (errStop: nothing written).
func (v verdict) settle(l *session.Login) error {
	if !v.revoke {
		return errStop
	}
	l.Revoked = true
	return nil
}

func refused(code, text string) verdict { return verdict{refused: &refusal{code, text, 0}} }

func refusedRevoking(code, text string) verdict {
	return verdict{refused: &refusal{code, text, 0}, revoke: true}
}

// codeGrant is an authorization_code grant's form.
type codeGrant struct {
	loginID, secret string // the code's halves (newCode)
	clientID        string // the client that presents it ("" when none is named)
	redirectURI     string
	verifier        string // PKCE's code_verifier
}

// readCodeGrant reads the form of an authorization_code grant.
func readCodeGrant(form url.Values) (codeGrant, *refusal) {
	code := form.Get("code")
	if code == "" {
		return codeGrant{}, &refusal{"invalid_request", "Missing code", 0}
	}
	loginID, secret, ok := strings.Cut(code, ".")
	if !ok {
		return codeGrant{}, &refusal{"invalid_grant", "Invalid code", 0}
	}
	return codeGrant{loginID: loginID, secret: secret, redirectURI: form.Get("redirect_uri"), verifier: form.Get("code_verifier")}, nil
}

// redeemCode decides a code's redemption at now; ended is when the user's
// sessions were last ended (session.Store.SessionsEnded). The checks run
// in Medplum's order, so that a request wrong in several ways gets its
// text.
func redeemCode(l *session.Login, g codeGrant, now time.Time, ended int64) verdict {
	switch {
	case !auth.SecretMatches(l.CodeDigest, g.secret):
		return refused("invalid_grant", "Invalid code")
	case l.Revoked:
		return refused("invalid_grant", "Token revoked")
	case l.Granted:
		// A code used twice is stolen or replayed: end the login.
		return refusedRevoking("invalid_grant", "Token already granted")
	case now.Sub(time.UnixMilli(l.CodeAt)) > codeLifetime:
		return refused("invalid_grant", "Code expired")
	case l.Dead(ended):
		return refusedRevoking("invalid_grant", "Token revoked")
	case l.Membership == "":
		return refused("invalid_grant", "Invalid profile")
	case g.clientID != "" && g.clientID != l.Client:
		// Bound to the client it was issued to (RFC 6749 §4.1.3); another
		// client's code is worth nothing to this one.
		return refused("invalid_grant", "Invalid client")
	case l.RedirectURI != "" && g.redirectURI != l.RedirectURI:
		return refused("invalid_grant", "Invalid redirect_uri")
	case l.NoPKCE:
		// The client may skip PKCE (pkceOptional) and this sign-in did.
		return verdict{}
	case l.Challenge == "":
		return refused("invalid_grant", "Missing verification context")
	case g.verifier == "":
		return refused("invalid_request", "Missing code verifier")
	case !verifierMatches(l.Challenge, l.ChallengeMethod, g.verifier):
		return refused("invalid_grant", "Invalid code verifier")
	}
	return verdict{}
}

// renewRefresh decides a refresh_token grant: secret is the token's
// refresh secret, clientID the client that presents it ("" when none is
// named), ended as for redeemCode.
func renewRefresh(l *session.Login, secret, clientID string, ended int64) verdict {
	switch {
	case clientID != "" && clientID != l.Client:
		// Bound to its client (RFC 6749 §6): another client's refresh token
		// is refused, and not spent.
		return refused("invalid_grant", "Invalid client")
	case l.Revoked:
		return refused("invalid_grant", "Token revoked")
	case l.Dead(ended):
		// The password changed since this sign-in: its refresh tokens end too.
		return refusedRevoking("invalid_grant", "Token revoked")
	case !auth.SecretMatches(l.RefreshDigest, secret):
		// An old refresh token came back: someone holds a copy. End the chain.
		return refusedRevoking("invalid_grant", "Invalid token")
	}
	return verdict{}
}

// hasScope reports whether a space-separated scope names want.
func hasScope(scope, want string) bool {
	return strings.Contains(" "+scope+" ", " "+want+" ")
}

// response is the token endpoint's answer to a refusal.
func (r *refusal) response() *bus.Response {
	resp := tokenError(r.code, r.text)
	if r.rev > 0 {
		resp.WithSession(session.LoginsBucket, r.rev)
	}
	return resp
}

// authenticatedFor checks the one rule of a code or refresh grant that
// needs the client's registration: a confidential client (a secret or a
// jwksUri) to which the code or token was issued must have authenticated
// (RFC 6749 §4.1.3, §6), even when the request names no client.
func (s *Service) authenticatedFor(ctx context.Context, tc *tokenClient, issuedTo string) (*refusal, error) {
	if issuedTo == "" || tc.Authenticated || clients.Builtin(issuedTo, s.cfg.BaseURL) != nil {
		return nil, nil
	}
	c, err := s.clients.Get(ctx, issuedTo)
	if err != nil {
		return nil, err
	}
	if c != nil && (c.Cred != nil || c.JWKS) {
		return &refusal{"invalid_client", "Client authentication required", 0}, nil
	}
	return nil, nil
}
