// Package secrets keeps the identity service's credentials — password
// hashes, second factors, client secrets, signing keys, one-time links —
// in the repository's secret store (repo.Secret) as JSON documents: never
// searched, never in an event, never a FHIR resource a policy could
// expose. A document is swapped only if it still holds what was read, so
// two writers of one credential never lose each other's change.
package secrets

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
)

// Store reads and writes credential documents.
type Store struct{ repo *repo.Repo }

// New is the credentials of r.
func New(r *repo.Repo) *Store { return &Store{repo: r} }

// Load reads a credential into v and returns its stored bytes, the
// condition of a later Swap; found is false when there is none.
func (s *Store) Load(ctx context.Context, key string, v any) (raw []byte, found bool, err error) {
	raw, err = s.repo.Secret(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return raw, true, json.Unmarshal(raw, v)
}

// Save stores v under key whatever was there.
func (s *Store) Save(ctx context.Context, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.repo.SetSecret(ctx, key, b)
}

// Swap stores v under key if it still holds old (nil: if absent):
// store.ErrConflict or store.ErrExists when it does not.
func (s *Store) Swap(ctx context.Context, key string, old []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.repo.SwapSecret(ctx, key, old, b)
}

// Raw reads a credential's bytes: nil when there is none.
func (s *Store) Raw(ctx context.Context, key string) ([]byte, error) {
	b, err := s.repo.Secret(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return b, err
}

// SetRaw stores bytes under key whatever was there; nil removes nothing
// but stores an empty value, which Raw reads as nil.
func (s *Store) SetRaw(ctx context.Context, key string, b []byte) error {
	return s.repo.SetSecret(ctx, key, b)
}
