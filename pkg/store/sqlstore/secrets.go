package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/pinion-health/pinion/pkg/store"
)

// Secret returns a credential, or store.ErrNotFound.
func (s *Store) Secret(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := s.secret.QueryRowContext(ctx, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: secret %s", store.ErrNotFound, key)
	}
	if err == nil && v == nil {
		v = []byte{} // an empty credential is still one
	}
	return v, err
}

// SwapSecret replaces a credential if it still holds old. Read and write
// happen in the writer's transaction, so two swaps from the same old value
// cannot both succeed.
func (s *Store) SwapSecret(ctx context.Context, key string, old, new []byte) error {
	return s.w.do(ctx, "", len(key)+len(new), true, func(c *wconn) error {
		var cur []byte
		err := c.secret.QueryRowContext(c.ctx, key).Scan(&cur)
		exists := err == nil
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		}
		switch {
		case old == nil && exists:
			return fmt.Errorf("%w: secret %s", store.ErrExists, key)
		case old != nil && !exists:
			return fmt.Errorf("%w: secret %s", store.ErrNotFound, key)
		case old != nil && !bytes.Equal(cur, old):
			return fmt.Errorf("%w: secret %s changed", store.ErrConflict, key)
		case new == nil:
			if exists {
				_, err = c.delSecret.ExecContext(c.ctx, key)
			}
		case exists:
			_, err = c.updSecret.ExecContext(c.ctx, new, key)
		default:
			_, err = c.insSecret.ExecContext(c.ctx, key, new)
		}
		return err
	})
}

// SetSecret stores a credential whatever it held; nil deletes it.
func (s *Store) SetSecret(ctx context.Context, key string, value []byte) error {
	return s.w.do(ctx, "", len(key)+len(value), true, func(c *wconn) error {
		var err error
		if value == nil {
			_, err = c.delSecret.ExecContext(c.ctx, key)
		} else {
			_, err = c.setSecret.ExecContext(c.ctx, key, value)
		}
		return err
	})
}
