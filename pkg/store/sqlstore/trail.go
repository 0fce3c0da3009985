package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
)

// The audit trail's blocks (store.TrailBlock): the trail table holds a
// row per block, its events one JSON array; trail_keys a row per block
// and search key. Schema version 6.

// AppendTrail stores b after the project's last block, in the writer's
// transaction: the check of the end and the insert cannot interleave
// with another append.
func (s *Store) AppendTrail(ctx context.Context, b *store.TrailBlock) error {
	if len(b.Events) == 0 {
		return errors.New("sqlstore: an empty trail block")
	}
	data := store.EncodeTrail(b.Events)
	return s.w.do(ctx, b.Project, len(data)+64*len(b.Keys), false, func(c *wconn) error {
		// The last block is the one with the greatest first (blocks are
		// appended in order): read through the primary key, not a scan.
		var last sql.NullInt64
		err := c.conn.QueryRowContext(c.ctx, `SELECT last FROM trail WHERE project = ? ORDER BY first DESC LIMIT 1`, b.Project).Scan(&last)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		switch {
		case b.First <= last.Int64:
			return fmt.Errorf("%w: trail place %d of %q", store.ErrExists, b.First, b.Project)
		case last.Valid && b.First != last.Int64+1:
			return fmt.Errorf("%w: trail of %q ends at %d, not %d", store.ErrConflict, b.Project, last.Int64, b.First-1)
		}
		if _, err := c.conn.ExecContext(c.ctx, `INSERT INTO trail(project, first, last, ts_from, ts_to, events) VALUES(?, ?, ?, ?, ?, ?)`,
			b.Project, b.First, b.Last(), b.From.UnixMilli(), b.To.UnixMilli(), data); err != nil {
			return err
		}
		// The keys in statements of up to keysChunk rows: a block of
		// reads holds hundreds.
		for keys := b.Keys; len(keys) > 0; {
			n := min(len(keys), keysChunk)
			args := make([]any, 0, 3*n)
			for _, k := range keys[:n] {
				args = append(args, b.Project, k, b.First)
			}
			if err := c.execText(insertKeys(n), args); err != nil {
				return err
			}
			keys = keys[n:]
		}
		return nil
	})
}

// keysChunk bounds the rows of one insert of keys (three variables each:
// SQLite allows 32,766).
const keysChunk = 256

// insertKeys is the insert of n keys' rows.
func insertKeys(n int) string {
	return `INSERT OR IGNORE INTO trail_keys(project, key, first) VALUES ` + strings.Repeat("(?, ?, ?), ", n-1) + `(?, ?, ?)`
}

const trailColumns = `project, first, ts_from, ts_to, events`

func scanBlock(row interface{ Scan(...any) error }) (*store.TrailBlock, error) {
	var b store.TrailBlock
	var from, to int64
	var data []byte
	if err := row.Scan(&b.Project, &b.First, &from, &to, &data); err != nil {
		return nil, err
	}
	var err error
	if b.Events, err = store.DecodeTrail(data); err != nil {
		return nil, err
	}
	b.From, b.To = time.UnixMilli(from).UTC(), time.UnixMilli(to).UTC()
	return &b, nil
}

func (s *Store) oneBlock(ctx context.Context, q string, args ...any) (*store.TrailBlock, error) {
	b, err := scanBlock(s.rdb.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: trail block", store.ErrNotFound)
	}
	return b, err
}

// TrailBlock returns the block holding seq (see store.Store).
func (s *Store) TrailBlock(ctx context.Context, project string, seq int64) (*store.TrailBlock, error) {
	return s.oneBlock(ctx, `SELECT `+trailColumns+` FROM trail WHERE project = ? AND first <= ? ORDER BY first DESC LIMIT 1`, project, seq)
}

// LastTrailBlock returns the project's last block.
func (s *Store) LastTrailBlock(ctx context.Context, project string) (*store.TrailBlock, error) {
	return s.oneBlock(ctx, `SELECT `+trailColumns+` FROM trail WHERE project = ? ORDER BY first DESC LIMIT 1`, project)
}

// TrailBlocks lists a project's blocks, as q asks.
func (s *Store) TrailBlocks(ctx context.Context, q *store.TrailQuery) ([]*store.TrailBlock, error) {
	where, args := []string{"t.project = ?"}, []any{q.Project}
	if !q.From.IsZero() {
		where, args = append(where, "t.ts_to >= ?"), append(args, q.From.UnixMilli())
	}
	if !q.To.IsZero() {
		where, args = append(where, "t.ts_from <= ?"), append(args, q.To.UnixMilli())
	}
	if q.Before > 0 {
		where, args = append(where, "t.first < ?"), append(args, q.Before)
	}
	if q.After > 0 {
		// From the block that holds the place after: a range of the
		// primary key, where "last > After" alone would scan from the start.
		where = append(where, "t.first >= coalesce((SELECT max(first) FROM trail WHERE project = ? AND first <= ?), 0)", "t.last > ?")
		args = append(args, q.Project, q.After+1, q.After)
	}
	for _, k := range q.Keys {
		where = append(where, "EXISTS (SELECT 1 FROM trail_keys k WHERE k.project = t.project AND k.key = ? AND k.first = t.first)")
		args = append(args, k)
	}
	text := `SELECT ` + strings.ReplaceAll("t."+trailColumns, ", ", ", t.") + ` FROM trail t WHERE ` + strings.Join(where, " AND ")
	if q.Ascending {
		text += " ORDER BY t.first"
	} else {
		text += " ORDER BY t.first DESC"
	}
	limit := q.Limit
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.rdb.QueryContext(ctx, text+" LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.TrailBlock
	for rows.Next() {
		b, err := scanBlock(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// TrailProjects lists the projects with a trail.
func (s *Store) TrailProjects(ctx context.Context) ([]string, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT DISTINCT project FROM trail ORDER BY project`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// PurgeTrail removes the events at or before through, in one
// transaction: the blocks that end by it, and the head of the one that
// holds it.
func (s *Store) PurgeTrail(ctx context.Context, project string, through int64) (int, error) {
	var n int64
	err := s.w.do(ctx, project, 64, false, func(c *wconn) error {
		if _, err := c.conn.ExecContext(c.ctx, `DELETE FROM trail_keys WHERE project = ? AND first IN (SELECT first FROM trail WHERE project = ? AND last <= ?)`,
			project, project, through); err != nil {
			return err
		}
		r, err := c.conn.ExecContext(c.ctx, `DELETE FROM trail WHERE project = ? AND last <= ?`, project, through)
		if err != nil {
			return err
		}
		if n, err = r.RowsAffected(); err != nil {
			return err
		}
		var first int64
		var data []byte
		err = c.conn.QueryRowContext(c.ctx, `SELECT first, events FROM trail WHERE project = ? AND first <= ? AND last > ?`, project, through, through).Scan(&first, &data)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		events, err := store.DecodeTrail(data)
		if err != nil {
			return err
		}
		// The block's keys stay: a key of an event removed finds the
		// block, whose events the search then reads and passes over.
		if _, err := c.conn.ExecContext(c.ctx, `UPDATE trail SET first = ?, events = ? WHERE project = ? AND first = ?`,
			through+1, store.EncodeTrail(events[through-first+1:]), project, first); err != nil {
			return err
		}
		if _, err := c.conn.ExecContext(c.ctx, `UPDATE trail_keys SET first = ? WHERE project = ? AND first = ?`, through+1, project, first); err != nil {
			return err
		}
		n++
		return nil
	})
	return int(n), err
}
