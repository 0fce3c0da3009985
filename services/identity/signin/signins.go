package signin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
)

// AuthPassword is Medplum's Login.authMethod for a sign-in with e-mail and
// password (the app's form and the authorize page alike); AuthExternal,
// through an external identity provider; AuthExchange, a token exchange;
// AuthGoogle, Google Sign-In.
const (
	AuthPassword = "password"
	AuthExternal = "external"
	AuthExchange = "exchange"
	AuthGoogle   = "google"
)

// PutSignIn stores a person's new login, noting how and from where it was
// made, and adds it to the person's list of sessions (/auth/me).
func (s *Service) PutSignIn(ctx context.Context, r *bus.Request, loginID string, l *session.Login) error {
	// A browser that signed in through its provider keeps saying so.
	l.SetOrigin(cmp.Or(l.AuthMethod, AuthPassword), r.Remote, r.Get("User-Agent"))
	if _, err := s.sessions.PutLogin(ctx, loginID, *l); err != nil {
		return err
	}
	if !strings.HasPrefix(l.User, "User/") {
		return nil
	}
	u, err := s.sessions.UserLogins(ctx)
	if err != nil {
		return fmt.Errorf("user logins: %w", err)
	}
	return u.Add(ctx, l.User, loginID, time.UnixMilli(l.Start))
}

// authRevokeRequest is POST /auth/revoke's body.
type authRevokeRequest struct {
	LoginID string `json:"loginId"`
}

// AuthRevoke is Medplum's POST /auth/revoke: the caller ends one of its
// own logins (another sign-in of theirs, listed by /auth/me); another
// person's login, or none, is 404.
func (s *Service) AuthRevoke(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	var in authRevokeRequest
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	if _, err := uuid.Parse(in.LoginID); err != nil {
		return nil, fhir.Invalid(fhir.FieldIssue("loginId", "Login ID is required."))
	}
	if r.Principal == nil {
		return nil, fhir.Unauthorized()
	}
	_, rev, err := s.sessions.UpdateLoginRev(ctx, in.LoginID, func(l *session.Login) error {
		if l.User != r.Principal.User {
			return fhir.NotFound()
		}
		l.Revoked = true
		return nil
	})
	if errors.Is(err, session.ErrNotFound) {
		return nil, fhir.NotFound()
	}
	if err != nil {
		return nil, err
	}
	return bus.OK().WithSession(session.LoginsBucket, rev), nil
}
