package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// maxShapes bounds the statements a cache prepares: an application uses a
// few dozen shapes of search; a client inventing new ones gets them parsed
// each time instead of growing the cache.
const maxShapes = 256

// stmtCache keeps statements prepared by their text, so that SQL built per
// call (searches, a resource's search rows) is parsed once per shape rather
// than on every execution: parsing is most of what a small query costs.
//
// It stops growing at max entries. Shapes past that are run unprepared, and
// no entry is ever closed before the cache is, so a statement handed out is
// never closed under a caller.
type stmtCache struct {
	prepare func(context.Context, string) (*sql.Stmt, error)
	max     int

	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newStmtCache(prepare func(context.Context, string) (*sql.Stmt, error), max int) *stmtCache {
	return &stmtCache{prepare: prepare, max: max, m: map[string]*sql.Stmt{}}
}

// get returns the statement for text, preparing it on first use; nil when
// the cache is full or the text does not prepare (the caller then runs the
// text itself, and reports its error).
func (c *stmtCache) get(ctx context.Context, text string) *sql.Stmt {
	c.mu.Lock()
	st, full := c.m[text], len(c.m) >= c.max
	c.mu.Unlock()
	if st != nil || full {
		return st
	}
	st, err := c.prepare(ctx, text)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.m[text]; cur != nil {
		// Another caller prepared the same text meanwhile.
		st.Close()
		return cur
	}
	if len(c.m) >= c.max {
		st.Close()
		return nil
	}
	c.m[text] = st
	return st
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for text, st := range c.m {
		errs = append(errs, st.Close())
		delete(c.m, text)
	}
	return errors.Join(errs...)
}
