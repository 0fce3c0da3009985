package authserver

import (
	"context"
	"net/url"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/session"
)

// Grant is one grant_type of the token endpoint, each in a file of its
// own (grant_*.go; the token exchange is package federation's). Issue
// refuses with a *Refusal, which the endpoint answers as RFC 6749 §5.2
// says; any other error is the service failing.
type Grant interface {
	// Type is the grant_type it answers.
	Type() string
	Issue(ctx context.Context, r *bus.Request, form url.Values) (*bus.Response, error)
}

// The token endpoint's rules for the grants that redeem a sign-in: an
// authorization code, or a refresh token. They run inside the session
// bucket's update of the login, which may retry, so they only decide; the
// caller writes.

// verdict is what presenting a code or a refresh token does to its login.
type verdict struct {
	refused *Refusal // why no tokens are issued; nil: they are
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

// refused is a verdict that refuses and leaves the login as it is.
func refused(no *Refusal) verdict { return verdict{refused: no} }

// refusedRevoking is a verdict that refuses and ends the login.
func refusedRevoking(no *Refusal) verdict { return verdict{refused: no, revoke: true} }
