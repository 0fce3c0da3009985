package authserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
)

// Token revocation (RFC 7009) at /oauth2/revoke, token introspection
// (RFC 7662) at /oauth2/introspect, and Medplum's POST /auth/revoke.
//
// Revocation answers 200 whether or not it revoked anything (§2.2): an
// unknown, malformed or expired token, and a token issued to another
// client, are all left as they are. Refusing another client's token with
// an error would tell a client which tokens exist; answering 200 without
// revoking keeps a client from ending tokens it was never given.

// maxFormBody bounds the form these endpoints read; MaxPresentedToken, a
// token before its signature is checked.
const (
	maxFormBody       = 16 << 10
	MaxPresentedToken = 8192
)

// presentedToken is a token sent to revocation or introspection, read and
// verified; claims is nil when it is not a token Pinion issued and still
// valid (expired, malformed, signed by another key).
type presentedToken struct {
	raw    string
	claims *auth.Claims
}

// refresh reports a refresh token; else an access token, or neither.
func (t presentedToken) refresh() bool {
	return t.claims != nil && t.claims.RefreshSecret != "" && t.claims.LoginID != ""
}

func (t presentedToken) access() bool { return t.claims != nil && t.claims.IsAccessToken() }

// tokenRequest reads a revocation or introspection request: its form, the
// client that sent it (RFC 6749 §2.3) and its token.
func (s *Service) tokenRequest(ctx context.Context, r *bus.Request) (*tokenClient, presentedToken, error) {
	if !strings.HasPrefix(strings.ToLower(r.Get("Content-Type")), "application/x-www-form-urlencoded") {
		return nil, presentedToken{}, InvalidRequest("Unsupported content type")
	}
	if len(r.Body) > maxFormBody {
		return nil, presentedToken{}, InvalidRequest("Request too large")
	}
	form, err := url.ParseQuery(string(r.Body))
	if err != nil {
		return nil, presentedToken{}, InvalidRequest("Could not parse form")
	}
	tc, no, err := s.presentedClient(ctx, r, form)
	if err != nil {
		return nil, presentedToken{}, err
	}
	if no != nil {
		return nil, presentedToken{}, no
	}
	t := presentedToken{raw: form.Get("token")}
	if t.raw == "" {
		return nil, presentedToken{}, InvalidRequest("Missing token")
	}
	// token_type_hint is only a hint (RFC 7009 §2.1): the token's own
	// claims say what it is.
	if len(t.raw) <= MaxPresentedToken {
		if c, err := s.Verifier().Verify(t.raw); err == nil {
			t.claims = c
		}
	}
	return tc, t, nil
}

// Revoke is POST /oauth2/revoke (RFC 7009).
func (s *Service) Revoke(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return Answer(s.revokeToken(ctx, r))
}

func (s *Service) revokeToken(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	tc, t, err := s.tokenRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	done := bus.JSON(200, map[string]any{})
	if t.claims == nil {
		return done, nil
	}
	if t.claims.ClientID != tc.ID {
		s.log.Info("revocation of another client's token ignored", "client", tc.ID, "issuedTo", t.claims.ClientID)
		return done, nil
	}
	switch {
	case t.refresh():
		// A refresh token stands for its whole sign-in (§2.1: the access
		// tokens of the same grant should end too).
		_, rev, err := s.sessions.UpdateLoginRev(ctx, t.claims.LoginID, func(l *session.Login) error {
			l.Revoked = true
			return nil
		})
		if errors.Is(err, session.ErrNotFound) {
			return done, nil // expired already
		}
		if err != nil {
			return nil, fmt.Errorf("revoke login: %w", err)
		}
		return done.WithSession(session.LoginsBucket, rev), nil
	case t.access():
		rev, err := s.sessions.RevokeToken(ctx, t.claims.ID)
		if err != nil {
			return nil, fmt.Errorf("revoke token: %w", err)
		}
		return done.WithSession(session.RevokedBucket, rev), nil
	}
	return done, nil
}

// Introspect is POST /oauth2/introspect (RFC 7662), for a confidential
// client that authenticated: whether a token of its own project is live.
func (s *Service) Introspect(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return Answer(s.introspectToken(ctx, r))
}

func (s *Service) introspectToken(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	tc, t, err := s.tokenRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	if !tc.Authenticated {
		// A public client, or none: introspection would let anyone who
		// holds a token learn whose it is.
		return nil, InvalidClient("Client authentication required")
	}
	caller, err := s.callerMembership(ctx, tc.ID)
	if err != nil {
		return nil, err
	}
	if caller == nil {
		return nil, InvalidClient("Invalid client")
	}
	body, err := s.tokenInfo(ctx, t, caller)
	if err != nil {
		return nil, err
	}
	return bus.JSON(200, body), nil
}

// callerMembership is the live membership of an authenticated client; nil
// when it has none.
func (s *Service) callerMembership(ctx context.Context, clientID string) (*session.Membership, error) {
	c, err := s.clients.Get(ctx, clientID)
	if err != nil || c == nil || c.Membership == "" {
		return nil, err
	}
	m, err := s.sessions.GetMembership(ctx, c.Membership)
	if errors.Is(err, session.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("session membership: %w", err)
	}
	if !m.Active {
		return nil, nil
	}
	return m, nil
}

// inactive is every answer about a token that does not count (RFC 7662
// §2.2: nothing more is said).
var inactive = map[string]any{"active": false}

// tokenInfo says whether a token counts as the gateway would take it —
// signed, unexpired, not revoked, its login and membership live — and, when
// it does and it is of the caller's project, what it is.
func (s *Service) tokenInfo(ctx context.Context, t presentedToken, caller *session.Membership) (map[string]any, error) {
	c := t.claims
	if !t.access() && !t.refresh() {
		return inactive, nil
	}
	if t.access() {
		gone, err := s.sessions.TokenRevoked(ctx, c.ID)
		if err != nil {
			return nil, fmt.Errorf("revoked tokens: %w", err)
		}
		if gone {
			return inactive, nil
		}
	}
	l, err := s.sessions.GetLogin(ctx, c.LoginID)
	if errors.Is(err, session.ErrNotFound) {
		return inactive, nil
	}
	if err != nil {
		return nil, fmt.Errorf("session login: %w", err)
	}
	ended, err := s.sessions.SessionsEnded(ctx, l.User)
	if err != nil {
		return nil, fmt.Errorf("sessions ended: %w", err)
	}
	if l.Revoked || l.Dead(ended) || t.refresh() && !auth.SecretMatches(l.RefreshDigest, c.RefreshSecret) {
		// A rotated-out refresh token would revoke its login if used.
		return inactive, nil
	}
	// A sign-in made under a consent ends when the consent goes.
	if withdrawn, err := s.sessions.ConsentWithdrawn(ctx, l); err != nil || l.Withdrawn(withdrawn) {
		return inactive, err
	}
	m, err := s.sessions.GetMembership(ctx, l.Membership)
	if errors.Is(err, session.ErrNotFound) {
		return inactive, nil
	}
	if err != nil {
		return nil, fmt.Errorf("session membership: %w", err)
	}
	if !m.Active || m.Project != caller.Project && !caller.SuperAdmin {
		// Another project's token is none of this client's business.
		return inactive, nil
	}
	_, user, _ := fhir.SplitReference(l.User)
	info := map[string]any{
		"active":     true,
		"scope":      cmp.Or(c.Scope, l.Scope),
		"client_id":  c.ClientID,
		"username":   cmp.Or(c.Username, user),
		"sub":        cmp.Or(c.Subject, user),
		"token_type": "Bearer",
		"iss":        c.Issuer,
		"aud":        []string(c.Audience),
		"jti":        c.ID,
	}
	if t.refresh() {
		info["token_type"] = "refresh_token"
	}
	// The patient in context, as Medplum's introspection says it.
	if p := l.Patient(); p != "" {
		info["patient"] = p
	} else if typ, id, _ := fhir.SplitReference(m.Profile); typ == "Patient" {
		info["patient"] = id
	}
	if c.ExpiresAt != nil {
		info["exp"] = c.ExpiresAt.Unix()
	}
	if c.IssuedAt != nil {
		info["iat"] = c.IssuedAt.Unix()
	}
	if c.NotBefore != nil {
		info["nbf"] = c.NotBefore.Unix()
	}
	return info, nil
}
