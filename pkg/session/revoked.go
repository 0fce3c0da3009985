package session

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// TokenRevoked reports whether one token (by jti) was ended early, read
// from the bucket itself: for a service that keeps no View (introspection).
func (s *Store) TokenRevoked(ctx context.Context, jti string) (bool, error) {
	_, err := s.revoked.Get(ctx, jti)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrInvalidKey):
		return false, nil
	}
	return false, err
}
