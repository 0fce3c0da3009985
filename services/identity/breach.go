package identity

import (
	"context"
)

// passwordBreached reports whether a new password is a known breached one
// (auth.BreachCheck: the shipped list, and PINION_PASSWORD_BREACH_URL).
func (s *Service) passwordBreached(ctx context.Context, password string) bool {
	return s.breach.Breached(ctx, password)
}
