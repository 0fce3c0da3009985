package identity

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/session"
)

// authPassword is Medplum's Login.authMethod for a sign-in with e-mail and
// password (the app's form and the authorize page alike).
const authPassword = "password"

// putSignIn stores a person's new login, noting how and from where it was
// made, and adds it to the person's list of sessions (/auth/me).
func (s *Service) putSignIn(ctx context.Context, r *bus.Request, loginID string, l *session.Login) error {
	// A browser that signed in through its provider keeps saying so.
	l.SetOrigin(cmp.Or(l.AuthMethod, authPassword), r.Remote, r.Get("User-Agent"))
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
