package identity

import (
	"context"

	"github.com/pinion-health/pinion/pkg/auth"
)

// passwordBreached reports whether a new password is a known breached one:
// on the list shipped with Pinion, or, when PINION_PASSWORD_BREACH_URL is
// set, listed by that range API.
//
// A range service that fails or is slow lets the password through (and is
// logged): the shipped list, which has the passwords guessed first, was
// checked anyway, and a third party's outage must not stop people from
// registering or setting a password. An operator who wants the opposite
// can keep the service beside Pinion.
func (s *Service) passwordBreached(ctx context.Context, password string) bool {
	if auth.Breached(password) {
		return true
	}
	if s.breachRange == nil {
		return false
	}
	found, err := s.breachRange.Breached(ctx, password)
	if err != nil {
		s.log.WarnContext(ctx, "password breach range not checked", "err", err)
		return false
	}
	return found
}
