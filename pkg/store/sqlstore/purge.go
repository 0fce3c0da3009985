package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/pinion-health/pinion/pkg/store"
)

// Purge removes resources entirely, in one transaction: each one's search
// rows, its history (and with it the events of its versions, which the
// history holds) and its current row.
func (s *Store) Purge(ctx context.Context, typ string, ids []string) error {
	if len(ids) > store.MaxPurge {
		return fmt.Errorf("sqlstore: purge of %d resources: at most %d a call", len(ids), store.MaxPurge)
	}
	if len(ids) == 0 {
		return nil
	}
	return s.w.do(ctx, "", 64*len(ids), false, func(c *wconn) error {
		const find = `SELECT rid FROM resources WHERE type = ? AND id = ?`
		for _, id := range ids {
			var row *sql.Row
			if st := c.shapes.get(c.ctx, find); st != nil {
				row = st.QueryRowContext(c.ctx, typ, id)
			} else {
				row = c.conn.QueryRowContext(c.ctx, find, typ, id)
			}
			var rid int64
			err := row.Scan(&rid)
			if errors.Is(err, sql.ErrNoRows) {
				continue // never stored, or purged already
			}
			if err != nil {
				return err
			}
			for _, q := range purgeSQL {
				if err := c.execText(q, []any{rid}); err != nil {
					return fmt.Errorf("sqlstore: purge %s/%s: %w", typ, id, err)
				}
			}
		}
		return nil
	})
}

// purgeSQL removes one resource's rows (by rid), the rows that point at
// it first.
var purgeSQL = []string{
	`DELETE FROM search WHERE rid = ?`,
	`DELETE FROM search_exact WHERE rid = ?`,
	`DELETE FROM history WHERE rid = ?`,
	`DELETE FROM resources WHERE rid = ?`,
}
