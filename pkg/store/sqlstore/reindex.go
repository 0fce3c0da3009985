package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/pinion-health/pinion/pkg/store"
)

// reindexBatch is how many resources one writer turn recomputes: a few
// milliseconds, so the writes queued beside a reindex wait little.
const reindexBatch = 200

// Reindex rewrites the search rows of typ's current resources whose
// fields an older version computed (see store.Store). Each batch reads the
// resources inside the writer's transaction, so a write racing the
// reindex is either reindexed after it or written with its own, current,
// fields. The version is kept in the meta table under "fields:" + typ.
func (s *Store) Reindex(ctx context.Context, typ string, version int, fields store.Refields, progress func(done int)) (int, error) {
	key := "fields:" + typ
	have := 1
	var v string
	switch err := s.rdb.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, key).Scan(&v); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return 0, err
	default:
		if have, err = strconv.Atoi(v); err != nil {
			return 0, fmt.Errorf("sqlstore: bad %s %q", key, v)
		}
	}
	if have >= version {
		return 0, nil
	}
	done := 0
	for after := int64(0); ; {
		var n int
		var last int64
		err := s.w.do(ctx, "", reindexBatch*1024, false, func(c *wconn) error {
			// Runs again if the shared transaction is retried: it only
			// reads after and sets n and last.
			rows, err := c.conn.QueryContext(c.ctx, `SELECT rid, id, version, project, json FROM resources
				WHERE rid > ? AND type = ? AND deleted = 0 ORDER BY rid LIMIT ?`, after, typ, reindexBatch)
			if err != nil {
				return err
			}
			type doc struct {
				rid                  int64
				id, version, project string
				json                 []byte
			}
			var docs []doc
			for rows.Next() {
				var d doc
				if err := rows.Scan(&d.rid, &d.id, &d.version, &d.project, &d.json); err != nil {
					rows.Close()
					return err
				}
				docs = append(docs, d)
			}
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				return err
			}
			for _, d := range docs {
				f, err := fields(d.json)
				w := &store.Write{Record: store.Record{Type: typ, ID: d.id, Version: d.version, Project: d.project}, Fields: f}
				if err == nil {
					err = check(w)
				}
				if err != nil {
					// One resource's fields must not keep the store from
					// starting: it keeps the rows it had.
					s.log.Warn("sqlstore: reindex skipped a resource", "type", typ, "id", d.id, "err", err)
					continue
				}
				old, err := c.searchRows(d.rid)
				if err != nil {
					return err
				}
				if err := c.putFields(w, d.rid, old); err != nil {
					return err
				}
				if err := c.dropRows(d.rid, old); err != nil {
					return err
				}
			}
			if n = len(docs); n > 0 {
				last = docs[n-1].rid
			}
			return nil
		})
		if err != nil {
			return done, err
		}
		done, after = done+n, last
		if n < reindexBatch {
			break
		}
		if progress != nil {
			progress(done)
		}
	}
	err := s.w.do(ctx, "", 64, false, func(c *wconn) error {
		_, err := c.conn.ExecContext(c.ctx, `INSERT INTO meta(key, value) VALUES(?, ?)
			ON CONFLICT(key) DO UPDATE SET value = excluded.value`, key, strconv.Itoa(version))
		return err
	})
	if err == nil && progress != nil {
		progress(done)
	}
	return done, err
}
