package identity

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/pinion-health/pinion/pkg/store"
)

// Credentials live in the repository's secrets (repo.Secret), as JSON:
// never searched, never in an event, never a FHIR resource a policy could
// expose.

// loadSecret reads a credential into v and returns its stored bytes, the
// condition of a later swap; found is false when there is none.
func (s *Service) loadSecret(ctx context.Context, key string, v any) (raw []byte, found bool, err error) {
	raw, err = s.repo.Secret(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return raw, true, json.Unmarshal(raw, v)
}

// saveSecret stores v under key whatever was there.
func (s *Service) saveSecret(ctx context.Context, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.repo.SetSecret(ctx, key, b)
}

// swapSecret stores v under key if it still holds old (nil: if absent).
func (s *Service) swapSecret(ctx context.Context, key string, old []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.repo.SwapSecret(ctx, key, old, b)
}
