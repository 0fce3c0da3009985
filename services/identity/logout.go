package identity

import (
	"context"
	"errors"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/session"
)

// logout is /oauth2/logout: the caller's login ends (POST, or GET with a
// token), and so does the browser's sign-in (GET from a browser, which may
// ask to go back to its application: OIDC RP-initiated logout).
func (s *Service) logout(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if b := browserOf(r); !b.isNew {
		if err := s.browsers.Delete(ctx, sessionKey(b)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, err
		}
	}
	if r.Principal == nil {
		return s.signedOutPage(ctx, r)
	}
	if strings.HasPrefix(r.Principal.User, "ClientApplication/") {
		if r.Principal.TokenID == "" {
			// Signed in by HTTP Basic: no token, nothing to end.
			return bus.OK(), nil
		}
		// One login serves all of a client's tokens: end only this token,
		// so the client's other sessions, and its next grant, still work.
		rev, err := s.sessions.RevokeToken(ctx, r.Principal.TokenID)
		if err != nil {
			return nil, err
		}
		return bus.OK().WithSession(session.RevokedBucket, rev), nil
	}
	_, rev, err := s.sessions.UpdateLoginRev(ctx, r.Principal.LoginID, func(l *session.Login) error {
		l.Revoked = true
		return nil
	})
	if errors.Is(err, session.ErrNotFound) {
		// The login expired since the gateway let the request in: it is
		// over already.
		return bus.OK(), nil
	}
	if err != nil {
		return nil, err
	}
	return bus.OK().WithSession(session.LoginsBucket, rev), nil
}

// signedOutPage ends a browser's sign-in: back to the application when it
// names a post_logout_redirect_uri it registered, else a page saying so.
func (s *Service) signedOutPage(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	b := browserOf(r)
	back := r.Query.Get("post_logout_redirect_uri")
	if back != "" {
		a := authRequest{ClientID: r.Query.Get("client_id"), RedirectURI: back, State: r.Query.Get("state")}
		problem, err := s.checkClient(ctx, &a)
		if err != nil {
			return nil, err
		}
		if problem == "" {
			return a.redirect(url.Values{}), nil
		}
	}
	return s.message(200, b, "Signed out", "", "", "You are signed out in this browser. The next sign-in will ask for your password.")
}
