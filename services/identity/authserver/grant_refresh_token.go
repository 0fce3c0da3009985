package authserver

import (
	"cmp"
	"context"
	"errors"
	"net/url"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/session"
)

// renewRefresh decides a refresh_token grant: secret is the token's
// refresh secret, clientID the client that presents it ("" when none is
// named), ended as for redeemCode.
func renewRefresh(l *session.Login, secret, clientID string, ended int64) verdict {
	switch {
	case clientID != "" && clientID != l.Client:
		// Bound to its client (RFC 6749 §6): another client's refresh token
		// is refused, and not spent.
		return refused(InvalidGrant("Invalid client"))
	case l.Revoked:
		return refused(InvalidGrant("Token revoked"))
	case l.Dead(ended):
		// The password changed since this sign-in: its refresh tokens end too.
		return refusedRevoking(InvalidGrant("Token revoked"))
	case !auth.SecretMatches(l.RefreshDigest, secret):
		// An old refresh token came back: someone holds a copy. End the chain.
		return refusedRevoking(InvalidGrant("Invalid token"))
	}
	return verdict{}
}

// refreshToken is the refresh_token grant (RFC 6749 §6): a sign-in's
// refresh token, rotated at each use; a spent one revokes its sign-in.
type refreshToken struct{ s *Service }

func (refreshToken) Type() string { return "refresh_token" }

func (g refreshToken) Issue(ctx context.Context, r *bus.Request, form url.Values) (*bus.Response, error) {
	s := g.s
	raw := form.Get("refresh_token")
	if raw == "" {
		return nil, InvalidRequest("Invalid refresh token")
	}
	tc, no, err := s.presentedClient(ctx, r, form)
	if err != nil {
		return nil, err
	}
	if no != nil {
		return nil, no
	}
	c, err := s.Verifier().Verify(raw)
	if err != nil || c.RefreshSecret == "" || c.LoginID == "" {
		return nil, InvalidGrant("Invalid refresh token")
	}
	var terr *Refusal
	var refresh string
	l, rev, err := s.sessions.UpdateLoginRev(ctx, c.LoginID, func(l *session.Login) error {
		terr = nil
		ended, err := s.sessions.SessionsEnded(ctx, l.User)
		if err != nil {
			return err
		}
		if v := renewRefresh(l, c.RefreshSecret, tc.ID, ended); v.refused != nil {
			terr = v.refused
			return v.settle(l)
		}
		if terr, err = s.authenticatedFor(ctx, tc, l.Client); err != nil || terr != nil {
			return cmp.Or(err, errStop)
		}
		if l.Consented {
			withdrawn, err := s.sessions.ConsentWithdrawn(ctx, l)
			if err != nil {
				return err
			}
			ok, err := s.consents.Given(ctx, l.User, l.Client, "")
			if err != nil {
				return err
			}
			if !ok || l.Withdrawn(withdrawn) {
				// The person withdrew their consent (and may have given a
				// new one since, to a new sign-in): this sign-in ends.
				terr = InvalidGrant("Consent withdrawn")
				l.Revoked = true
				return nil
			}
		}
		refresh = RotateRefresh(l)
		return nil
	})
	if terr != nil {
		if err == nil {
			terr = terr.Revoked(rev)
		}
		return nil, terr
	}
	if errors.Is(err, session.ErrNotFound) {
		return nil, InvalidGrant("Invalid refresh token")
	}
	if err != nil {
		return nil, err
	}
	return s.UserTokens(ctx, r, "refresh_token", c.LoginID, l, refresh)
}
