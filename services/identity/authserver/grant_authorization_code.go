package authserver

import (
	"cmp"
	"context"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/session"
)

// codeGrant is an authorization_code grant's form.
type codeGrant struct {
	loginID, secret string // the code's halves (newCode)
	clientID        string // the client that presents it ("" when none is named)
	redirectURI     string
	verifier        string // PKCE's code_verifier
}

// readCodeGrant reads the form of an authorization_code grant.
func readCodeGrant(form url.Values) (codeGrant, *Refusal) {
	code := form.Get("code")
	if code == "" {
		return codeGrant{}, InvalidRequest("Missing code")
	}
	loginID, secret, ok := strings.Cut(code, ".")
	if !ok {
		return codeGrant{}, InvalidGrant("Invalid code")
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
		return refused(InvalidGrant("Invalid code"))
	case l.Revoked:
		return refused(InvalidGrant("Token revoked"))
	case l.Granted:
		// A code used twice is stolen or replayed: end the login.
		return refusedRevoking(InvalidGrant("Token already granted"))
	case now.Sub(time.UnixMilli(l.CodeAt)) > codeLifetime:
		return refused(InvalidGrant("Code expired"))
	case l.Dead(ended):
		return refusedRevoking(InvalidGrant("Token revoked"))
	case l.Membership == "":
		return refused(InvalidGrant("Invalid profile"))
	case g.clientID != "" && g.clientID != l.Client:
		// Bound to the client it was issued to (RFC 6749 §4.1.3); another
		// client's code is worth nothing to this one.
		return refused(InvalidGrant("Invalid client"))
	case l.RedirectURI != "" && g.redirectURI != l.RedirectURI:
		return refused(InvalidGrant("Invalid redirect_uri"))
	case l.NoPKCE:
		// The client may skip PKCE (pkceOptional) and this sign-in did.
		return verdict{}
	case l.Challenge == "":
		return refused(InvalidGrant("Missing verification context"))
	case g.verifier == "":
		return refused(InvalidRequest("Missing code verifier"))
	case !verifierMatches(l.Challenge, l.ChallengeMethod, g.verifier):
		return refused(InvalidGrant("Invalid code verifier"))
	}
	return verdict{}
}

// authorizationCode is the authorization_code grant (RFC 6749 §4.1.3,
// with PKCE): a code a sign-in made, redeemed once by the client it was
// issued to, with the redirect URI and verifier of its request.
type authorizationCode struct{ s *Service }

func (authorizationCode) Type() string { return "authorization_code" }

func (a authorizationCode) Issue(ctx context.Context, r *bus.Request, form url.Values) (*bus.Response, error) {
	s := a.s
	g, no := readCodeGrant(form)
	if no != nil {
		return nil, no
	}
	tc, no, err := s.presentedClient(ctx, r, form)
	if err != nil {
		return nil, err
	}
	if no != nil {
		return nil, no
	}
	g.clientID = tc.ID
	loginID := g.loginID
	var terr *Refusal
	var refresh string
	l, rev, err := s.sessions.UpdateLoginRev(ctx, loginID, func(l *session.Login) error {
		terr = nil
		ended, err := s.sessions.SessionsEnded(ctx, l.User)
		if err != nil {
			return err
		}
		if v := redeemCode(l, g, time.Now(), ended); v.refused != nil {
			terr = v.refused
			return v.settle(l)
		}
		if terr, err = s.authenticatedFor(ctx, tc, l.Client); err != nil || terr != nil {
			return cmp.Or(err, errStop)
		}
		l.Granted = true
		refresh = RotateRefresh(l)
		return nil
	})
	if terr != nil {
		if err == nil { // the login was revoked: let the caller's next request see it
			terr = terr.Revoked(rev)
		}
		return nil, terr
	}
	if errors.Is(err, session.ErrNotFound) {
		return nil, InvalidGrant("Invalid code")
	}
	if err != nil {
		return nil, err
	}
	return s.UserTokens(ctx, r, a.Type(), loginID, l, refresh)
}
