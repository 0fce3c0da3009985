package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Write stores new versions. The writes of one call commit together or not
// at all: the first that fails (store.ErrExists, store.ErrConflict, ...)
// undoes the others, and its error is returned.
func (s *Store) Write(ctx context.Context, ws ...*store.Write) error {
	if len(ws) == 0 {
		return nil
	}
	size, strict := 0, false
	for _, w := range ws {
		if err := check(w); err != nil {
			return err
		}
		size += len(w.JSON) + len(w.Event) + 64*len(w.Fields)
		strict = strict || w.Strict
	}
	return s.w.do(ctx, ws[0].Project, size, strict, func(c *wconn) error {
		at := time.Now().UnixMilli()
		for _, w := range ws {
			if err := c.put(w, at); err != nil {
				return err
			}
		}
		return nil
	})
}

// check refuses a write before it is queued, so a malformed one costs the
// batch nothing.
func check(w *store.Write) error {
	switch {
	case w == nil:
		return errors.New("sqlstore: nil write")
	case w.Type == "" || w.ID == "" || w.Version == "":
		return fmt.Errorf("sqlstore: write of %s/%s needs type, id and version", w.Type, w.ID)
	case w.Prev == w.Version:
		return fmt.Errorf("%w: %s/%s: version %q replaces itself", store.ErrConflict, w.Type, w.ID, w.Version)
	}
	if !w.Deleted {
		for k, v := range w.Fields {
			if err := eachValue(v, func(any) error { return nil }); err != nil {
				return fmt.Errorf("sqlstore: %s/%s field %s: %w", w.Type, w.ID, k, err)
			}
		}
	}
	return nil
}

// put stores one write inside the shared transaction. Every statement is a
// round through SQLite's virtual machine, so the version check is folded
// into the write itself: a create is an INSERT that
// the unique (type, id) index refuses, a replace an UPDATE conditioned on
// the version.
func (c *wconn) put(w *store.Write, at int64) error {
	ts := w.Time.UnixMilli()
	var doc []byte
	if !w.Deleted {
		doc = w.JSON
	}
	var rid int64
	var old map[searchRow]bool // a replaced version's search rows
	if w.Prev == "" {
		res, err := c.insResource.ExecContext(c.ctx, w.Type, w.ID, w.Version, ts, w.Project, w.Deleted, doc)
		if isConstraint(err) {
			return fmt.Errorf("%w: %s/%s", store.ErrExists, w.Type, w.ID)
		}
		if err != nil {
			return err
		}
		if rid, err = res.LastInsertId(); err != nil {
			return err
		}
	} else {
		err := c.updResource.QueryRowContext(c.ctx, w.Version, ts, w.Project, w.Deleted, doc, w.Type, w.ID, w.Prev).Scan(&rid)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %s/%s is not at version %q", store.ErrConflict, w.Type, w.ID, w.Prev)
		}
		if err != nil {
			return err
		}
		if old, err = c.searchRows(rid); err != nil {
			return err
		}
	}
	var eventAt any // NULL without an event
	if w.Event != nil {
		eventAt = at
	}
	if _, err := c.insHistory.ExecContext(c.ctx, rid, w.Version, ts, w.Project, w.Deleted, doc, w.Event, eventAt); err != nil {
		if isConstraint(err) {
			return fmt.Errorf("%w: %s/%s already has version %q", store.ErrConflict, w.Type, w.ID, w.Version)
		}
		return err
	}
	if !w.Deleted {
		if err := c.putFields(w, rid, old); err != nil {
			return err
		}
	}
	if err := c.dropRows(rid, old); err != nil {
		return err
	}
	return nil
}

// searchRow is one search value of a resource, with its key and project
// by name (the table keeps their ids: wconn.nameID).
type searchRow struct {
	key     string
	value   any // string, float64 or int64
	project string
}

// searchRows reads a resource's search rows, so that a new version writes
// only the rows that change: most of a resource's values outlive an
// update, and each row rewritten costs two B-tree pages.
func (c *wconn) searchRows(rid int64) (map[searchRow]bool, error) {
	rows, err := c.selSearch.QueryContext(c.ctx, rid)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[searchRow]bool{}
	for rows.Next() {
		var r searchRow
		if err := rows.Scan(&r.key, &r.value, &r.project); err != nil {
			return nil, err
		}
		if b, ok := r.value.([]byte); ok {
			r.value = string(b)
		}
		out[r] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	exact, err := c.selExact.QueryContext(c.ctx, rid)
	if err != nil {
		return nil, err
	}
	defer exact.Close()
	for exact.Next() {
		var r searchRow // project "": the table has none (exactRow)
		if err := exact.Scan(&r.key, &r.value); err != nil {
			return nil, err
		}
		if b, ok := r.value.([]byte); ok {
			r.value = string(b)
		}
		out[r] = true
	}
	return out, exact.Err()
}

// exactField tells the fields kept in search_exact (store.ExactSuffix)
// from those of the search table; keys are type.field.
func exactField(key string) bool { return strings.HasSuffix(key, store.ExactSuffix) }

// exactRow is how a search_exact row appears among a resource's rows: no
// project, which that table does not keep.
func exactRow(key string, value any) searchRow { return searchRow{key: key, value: value} }

// dropRows deletes the rows left in old (those the new version no longer
// has), up to searchChunk a statement, from the table each is in.
func (c *wconn) dropRows(rid int64, old map[searchRow]bool) error {
	if len(old) == 0 {
		return nil
	}
	var exact []searchRow
	for r := range old {
		if exactField(r.key) {
			exact = append(exact, r)
			delete(old, r)
		}
	}
	for _, r := range exact {
		if _, err := c.delExact.ExecContext(c.ctx, rid, r.key, r.value); err != nil {
			return err
		}
	}
	if len(old) == 0 {
		return nil
	}
	args := make([]any, 0, 1+3*min(len(old), searchChunk))
	var sb strings.Builder
	flush := func() error {
		if len(args) <= 1 {
			return nil
		}
		return c.execText(sb.String(), args)
	}
	start := func() {
		args = append(args[:0], rid)
		sb.Reset()
		sb.WriteString("DELETE FROM search WHERE rid = ? AND (")
	}
	start()
	n := 0
	for r := range old {
		if n > 0 {
			sb.WriteString(" OR ")
		}
		key, err := c.nameID(r.key)
		if err != nil {
			return err
		}
		project, err := c.nameID(r.project)
		if err != nil {
			return err
		}
		sb.WriteString("(key = ? AND value = ? AND project = ?)")
		args = append(args, key, r.value, project)
		if n++; n == searchChunk {
			sb.WriteString(")")
			if err := flush(); err != nil {
				return err
			}
			start()
			n = 0
		}
	}
	if n == 0 {
		return nil
	}
	sb.WriteString(")")
	return flush()
}

// putFields inserts one search row per value that old (the replaced
// version's rows) does not hold, up to searchChunk rows a statement; the
// rows it keeps are removed from old.
func (c *wconn) putFields(w *store.Write, rid int64, old map[searchRow]bool) error {
	args, exact := c.args[:0], c.exactArgs[:0]
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		err := c.execText(insertSearch(len(args)/4), args)
		args = args[:0]
		return err
	}
	flushExact := func() error {
		if len(exact) == 0 {
			return nil
		}
		err := c.execText(insertExact(len(exact)/3), exact)
		exact = exact[:0]
		return err
	}
	project, err := c.nameID(w.Project)
	if err != nil {
		return err
	}
	for k, v := range w.Fields {
		key := w.Type + "." + k
		if exactField(key) {
			err = eachValue(v, func(x any) error {
				if r := exactRow(key, x); old[r] {
					delete(old, r)
					return nil
				}
				if exact = append(exact, rid, key, x); len(exact) == 3*searchChunk {
					return flushExact()
				}
				return nil
			})
		} else {
			var keyID int64
			if keyID, err = c.nameID(key); err == nil {
				err = eachValue(v, func(x any) error {
					if r := (searchRow{key, x, w.Project}); old[r] {
						delete(old, r)
						return nil
					}
					if args = append(args, keyID, x, project, rid); len(args) == 4*searchChunk {
						return flush()
					}
					return nil
				})
			}
		}
		if err != nil {
			return err
		}
	}
	err = errors.Join(flush(), flushExact())
	clear(args[:cap(args)])
	clear(exact[:cap(exact)])
	c.args, c.exactArgs = args, exact
	return err
}

// searchChunk caps the rows of one INSERT (4 parameters each, far below
// SQLite's limit of 32766).
const searchChunk = 128

// insertSearch returns the INSERT of n search rows; OR IGNORE drops a
// value repeated within a field.
var insertSearch = func() func(n int) string {
	texts := make([]string, searchChunk+1)
	for n := 1; n <= searchChunk; n++ {
		texts[n] = "INSERT OR IGNORE INTO search(key, value, project, rid) VALUES (?, ?, ?, ?)" +
			strings.Repeat(", (?, ?, ?, ?)", n-1)
	}
	return func(n int) string { return texts[n] }
}()

// insertExact returns the INSERT of n search_exact rows.
var insertExact = func() func(n int) string {
	texts := make([]string, searchChunk+1)
	for n := 1; n <= searchChunk; n++ {
		texts[n] = "INSERT OR IGNORE INTO search_exact(rid, key, value) VALUES (?, ?, ?)" +
			strings.Repeat(", (?, ?, ?)", n-1)
	}
	return func(n int) string { return texts[n] }
}()

// eachValue calls f with the stored form of each value of a search field:
// text as TEXT, numbers as REAL, instants as INTEGER unix milliseconds (the
// kinds stay apart in the untyped value column). NaN is skipped: it equals
// nothing. Other kinds are refused rather than stored as something a
// condition would read differently from store.Matches.
func eachValue(v any, f func(any) error) error {
	scalar := func(x any) error {
		switch x := x.(type) {
		case string:
			return f(x)
		case float64:
			if math.IsNaN(x) {
				return nil
			}
			return f(x)
		case time.Time:
			return f(x.UnixMilli())
		}
		return fmt.Errorf("unsupported search value %T", x)
	}
	switch l := v.(type) {
	case []string:
		for _, x := range l {
			if err := f(x); err != nil {
				return err
			}
		}
		return nil
	case []float64:
		for _, x := range l {
			if err := scalar(x); err != nil {
				return err
			}
		}
		return nil
	case []any:
		for _, x := range l {
			if err := scalar(x); err != nil {
				return err
			}
		}
		return nil
	}
	return scalar(v)
}

func isConstraint(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_CONSTRAINT
}
