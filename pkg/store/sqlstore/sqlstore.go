// Package sqlstore is the SQLite adapter of the storage port (store.Store),
// the one-machine default: a single file, no server.
//
// Writes go through one writer goroutine on one connection, which commits
// whatever calls are queued together (group commit): concurrent writers
// share an fsync instead of queueing for one each. A failing call still
// stores nothing: the transaction is rolled back and the others run again
// without it. Reads use a separate pool
// of read-only connections and never wait behind the writer (WAL mode).
//
// Every Write call is atomic, however many writes it holds.
//
// A search reads its page off one index walk confined to its project and
// stops there (stream.go), so its cost follows the page, not the number of
// matches or what other projects hold.
//
// It is one package of about 3,300 lines because it is one adapter of one
// port: the writer, the query compiler and the streaming reader share the
// schema and the connections, and splitting them would export what the
// port hides. Its files are split by concern instead (schema.go, write.go,
// writer.go, query.go, stream.go, reindex.go, checkpoint.go).
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/pinion-health/pinion/pkg/store"
)

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("sqlstore: closed")

// ErrReadOnly is returned by the writes of a store opened ReadOnly.
var ErrReadOnly = errors.New("sqlstore: opened read-only")

// Options tune Open.
type Options struct {
	// Sync is PRAGMA synchronous: "full" (the default: a committed write
	// survives power loss), "normal" (it may be lost, the file stays
	// consistent) or "off".
	Sync string
	// Log receives the store's errors; nil uses slog.Default().
	Log *slog.Logger
	// Readers caps the read connections; 0 chooses from GOMAXPROCS.
	Readers int
	// ReadOnly opens only the read connections, beside the process that
	// writes the file (SQLite's WAL lets another process read while it
	// writes) or with none running: no writer, no migration, no
	// checkpoints. The file must exist at this program's schema version;
	// every write answers ErrReadOnly. For tools (`pinion audit verify`).
	ReadOnly bool
}

// Store is a store.Store on one SQLite file.
type Store struct {
	log *slog.Logger
	wdb *sql.DB // one connection, owned by the writer goroutine
	rdb *sql.DB // read-only pool
	w   *writer
	// ckpt copies the WAL back into the database beside the writer.
	ckpt *checkpointer
	// queries holds the searches built per call, prepared on the pool.
	queries *stmtCache
	get     *sql.Stmt
	getVer  *sql.Stmt
	hist    *sql.Stmt
	owner   *sql.Stmt
	secret  *sql.Stmt
	outbox  *sql.Stmt
}

var _ store.Store = (*Store)(nil)

// busyMillis is how long a connection waits for a lock another process
// holds (a backup, the sqlite3 shell) before failing.
const busyMillis = 10000

// Open opens the database at path, creating the file and the schema if
// missing and migrating an older schema.
func Open(ctx context.Context, path string, o Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlstore: no path")
	}
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	sync := strings.ToLower(o.Sync)
	switch sync {
	case "":
		sync = "full"
	case "full", "normal", "off":
	default:
		return nil, fmt.Errorf("sqlstore: unknown sync mode %q", o.Sync)
	}
	busy := fmt.Sprintf("busy_timeout(%d)", busyMillis)
	if o.ReadOnly {
		return openReadOnly(ctx, path, busy, o, log)
	}
	// The file holds every tenant's data and credentials: only this user
	// may read it. SQLite gives its -wal and -shm files the same mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: %w", err)
	}
	f.Close()
	// The checkpointer (checkpoint.go) copies the WAL back; the writer's
	// own threshold is only a bound.
	// In full mode the store syncs the WAL itself, off the writer's path
	// (durable.go); SQLite's normal still syncs around checkpoints.
	wsync := sync
	if sync == "full" {
		wsync = "normal"
	}
	wdb, err := sql.Open("sqlite", dsn(path, "journal_mode(WAL)", fmt.Sprintf("wal_autocheckpoint(%d)", writerAutoCheckpoint),
		busy, "synchronous("+wsync+")",
		"cache_size(-32000)", "temp_store(MEMORY)"))
	if err != nil {
		return nil, err
	}
	// The writer holds its one connection for the store's life; a second
	// one would only contend for SQLite's single write lock.
	wdb.SetMaxOpenConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	conn, err := wdb.Conn(ctx)
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("sqlstore: open %s: %w", path, err)
	}
	fail := func(err error) (*Store, error) {
		conn.Close()
		wdb.Close()
		return nil, err
	}
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fail(err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fail(fmt.Errorf("sqlstore: %s: journal mode is %s, not wal", path, mode))
	}
	if err := migrate(ctx, conn, log); err != nil {
		return fail(err)
	}
	var durable *syncer
	if sync == "full" {
		if durable, err = startSyncer(path, log); err != nil {
			return fail(err)
		}
		if err := durable.sync(); err != nil { // the migration's commit
			durable.close()
			return fail(err)
		}
	}
	w, err := newWriter(ctx, conn, durable, log)
	if err != nil {
		if durable != nil {
			durable.close()
		}
		return fail(err)
	}
	s := &Store{log: log, wdb: wdb, w: w}
	if s.ckpt, err = startCheckpointer(ctx, path, sync, w.askRestart, log); err != nil {
		s.w.close()
		wdb.Close()
		return nil, fmt.Errorf("sqlstore: open %s: %w", path, err)
	}

	n := readers(o.Readers)
	if err := s.openReaders(ctx, path, busy, n); err != nil {
		s.Close()
		return nil, err
	}
	log.Info("sqlstore: opened", "path", path, "sync", sync, "schema", schemaVersion, "readers", n)
	return s, nil
}

// readers is how many read connections to open: n, or when 0 a number
// chosen from GOMAXPROCS.
func readers(n int) int {
	if n > 0 {
		return n
	}
	return min(max(2*runtime.GOMAXPROCS(0), 4), 16)
}

// openReaders opens the pool of n read-only connections and prepares the
// reads by id.
func (s *Store) openReaders(ctx context.Context, path, busy string, n int) error {
	// query_only keeps a bug from writing outside the writer's transactions.
	rdb, err := sql.Open("sqlite", dsn(path, busy, "query_only(1)", "cache_size(-16000)", "temp_store(MEMORY)"))
	if err != nil {
		return err
	}
	rdb.SetMaxOpenConns(n)
	rdb.SetMaxIdleConns(n)
	s.rdb = rdb
	s.queries = newStmtCache(rdb.PrepareContext, maxShapes)
	for _, p := range []struct {
		st **sql.Stmt
		q  string
	}{
		{&s.get, getSQL},
		{&s.getVer, versionSQL},
		{&s.hist, historySQL},
		{&s.owner, `SELECT owner FROM claims WHERE key = ?`},
		{&s.secret, `SELECT value FROM secrets WHERE key = ?`},
		{&s.outbox, pendingSQL},
	} {
		if *p.st, err = rdb.PrepareContext(ctx, p.q); err != nil {
			return fmt.Errorf("sqlstore: prepare: %w", err)
		}
	}
	return nil
}

// openReadOnly opens the read connections alone (Options.ReadOnly).
func openReadOnly(ctx context.Context, path, busy string, o Options, log *slog.Logger) (*Store, error) {
	// Not created: a tool pointed at the wrong directory says so rather
	// than reading an empty store.
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("sqlstore: %w", err)
	}
	s := &Store{log: log}
	if err := s.openReaders(ctx, path, busy, readers(o.Readers)); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlstore: open %s: %w", path, err)
	}
	var v string
	err := s.rdb.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'schema_version'`).Scan(&v)
	if err != nil || v != strconv.Itoa(schemaVersion) {
		s.Close()
		if err != nil {
			return nil, fmt.Errorf("sqlstore: %s holds no Pinion store: %w", path, err)
		}
		return nil, fmt.Errorf("sqlstore: %s has schema version %s, this program reads %d (start Pinion once to migrate it)", path, v, schemaVersion)
	}
	log.Debug("sqlstore: opened read-only", "path", path)
	return s, nil
}

// The reads by id, prepared once per connection; the plan test checks
// each uses its index.
const (
	getSQL     = `SELECT type, id, version, ts, project, deleted, json FROM resources WHERE type = ? AND id = ?`
	versionSQL = `SELECT r.type, r.id, h.version, h.ts, h.project, h.deleted, h.json
		FROM resources r JOIN history h ON h.rid = r.rid WHERE r.type = ? AND r.id = ? AND h.version = ?`
	historySQL = `SELECT r.type, r.id, h.version, h.ts, h.project, h.deleted, h.json
		FROM resources r JOIN history h ON h.rid = r.rid WHERE r.type = ? AND r.id = ? ORDER BY h.ts DESC, h.rowid DESC LIMIT ?`
	// An event's id is store.OutboxID of its version.
	pendingSQL = `SELECT r.type || '/' || r.id || '/' || h.version, h.event
		FROM history h JOIN resources r ON r.rid = h.rid
		WHERE h.event IS NOT NULL AND h.at < ? ORDER BY h.at, h.rowid LIMIT ?`
)

// dsn makes a URI for the driver: the path escaped so '?', '#' and '%' in
// it stay part of the name, and each pragma run on every new connection.
func dsn(path string, pragmas ...string) string {
	r := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
	q := url.Values{"_pragma": pragmas}
	return "file:" + r.Replace(path) + "?" + q.Encode()
}

// Close drains the queued writes, stops the writer and closes the database.
func (s *Store) Close() error {
	var errs []error
	if s.ckpt != nil {
		errs = append(errs, s.ckpt.close())
	}
	if s.w != nil {
		s.w.close()
	}
	if s.queries != nil {
		errs = append(errs, s.queries.close())
	}
	for _, st := range []*sql.Stmt{s.get, s.getVer, s.hist, s.owner, s.secret, s.outbox} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	if s.rdb != nil {
		errs = append(errs, s.rdb.Close())
	}
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
	}
	return errors.Join(errs...)
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(...any) error }

func scanRecord(sc scanner) (*store.Record, error) {
	var (
		r       store.Record
		ts      int64
		deleted int64
	)
	if err := sc.Scan(&r.Type, &r.ID, &r.Version, &ts, &r.Project, &deleted, &r.JSON); err != nil {
		return nil, err
	}
	r.Time = time.UnixMilli(ts).UTC()
	r.Deleted = deleted != 0
	if len(r.JSON) == 0 {
		r.JSON = nil
	}
	return &r, nil
}

func one(row *sql.Row, what string) (*store.Record, error) {
	r, err := scanRecord(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", store.ErrNotFound, what)
	}
	return r, err
}

// Get returns the current version of a resource, deleted or not.
func (s *Store) Get(ctx context.Context, typ, id string) (*store.Record, error) {
	return one(s.get.QueryRowContext(ctx, typ, id), typ+"/"+id)
}

// GetVersion returns one version from the history.
func (s *Store) GetVersion(ctx context.Context, typ, id, version string) (*store.Record, error) {
	return one(s.getVer.QueryRowContext(ctx, typ, id, version), typ+"/"+id+"/_history/"+version)
}

// History lists at most limit versions of a resource, newest first; limit
// <= 0 lists them all. A resource never written has an empty history.
func (s *Store) History(ctx context.Context, typ, id string, limit int) ([]*store.Record, error) {
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.hist.QueryContext(ctx, typ, id, limit)
	if err != nil {
		return nil, err
	}
	return collect(rows)
}

func collect(rows *sql.Rows) ([]*store.Record, error) {
	defer rows.Close()
	var out []*store.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Claim reserves key for owner and returns the winner.
func (s *Store) Claim(ctx context.Context, key, owner string) (string, error) {
	var winner string
	err := s.w.do(ctx, "", len(key)+len(owner), true, func(c *wconn) error {
		if _, err := c.claimIns.ExecContext(c.ctx, key, owner); err != nil {
			return err
		}
		return c.claimOwner.QueryRowContext(c.ctx, key).Scan(&winner)
	})
	return winner, err
}

// ClaimOwner returns who holds key, or "".
func (s *Store) ClaimOwner(ctx context.Context, key string) (string, error) {
	var owner string
	err := s.owner.QueryRowContext(ctx, key).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return owner, err
}

// Release frees key if owner still holds it.
func (s *Store) Release(ctx context.Context, key, owner string) error {
	return s.w.do(ctx, "", len(key)+len(owner), true, func(c *wconn) error {
		_, err := c.claimDel.ExecContext(c.ctx, key, owner)
		return err
	})
}

// maxPending bounds one Pending answer; the publisher clears what it sent
// and asks again for the rest.
const maxPending = 1000

// Pending lists outbox events recorded before the given time. Every one of
// them belongs to a committed write (a write and its event commit
// together), so abandon is not needed. At most maxPending are returned,
// oldest first.
func (s *Store) Pending(ctx context.Context, before, _ time.Time) ([]store.Pending, error) {
	rows, err := s.outbox.QueryContext(ctx, before.UnixMilli(), maxPending)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Pending
	for rows.Next() {
		var p store.Pending
		if err := rows.Scan(&p.ID, &p.Event); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// ClearOutbox removes published events. An id not naming a recorded
// version's event is ignored, as one already cleared is.
func (s *Store) ClearOutbox(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	size := 0
	for _, id := range ids {
		size += len(id)
	}
	return s.w.do(ctx, "", size, false, func(c *wconn) error {
		for _, id := range ids {
			typ, rest, _ := strings.Cut(id, "/")
			rid, version, ok := strings.Cut(rest, "/")
			if !ok {
				continue
			}
			if _, err := c.clearEvent.ExecContext(c.ctx, typ, rid, version); err != nil {
				return err
			}
		}
		return nil
	})
}
