package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// schemaVersion is the layout this code reads and writes. A database at a
// lower version is migrated at Open; a higher one was written by newer code
// and is refused rather than misread.
const schemaVersion = 6

// migrations[v] brings a database from version v to v+1; migrations[0]
// creates the first layout. migrate runs them in one transaction, so an
// interrupted migration leaves the database as it was.
var migrations = [][]string{
	{
		// rid is the rowid: stable across versions of a resource, so search
		// rows can point at it and a listing's order survives updates.
		`CREATE TABLE IF NOT EXISTS resources(
			rid     INTEGER PRIMARY KEY,
			type    TEXT NOT NULL,
			id      TEXT NOT NULL,
			version TEXT NOT NULL,
			ts      INTEGER NOT NULL,
			project TEXT NOT NULL,
			deleted INTEGER NOT NULL,
			json    BLOB)`,
		`CREATE UNIQUE INDEX IF NOT EXISTS resources_type_id ON resources(type, id)`,
		// Listing a project's resources with no filter, in the default
		// (ts, rid) order: every index ends with the rowid, so this index
		// delivers that order without sorting.
		`CREATE INDEX IF NOT EXISTS resources_list ON resources(type, project, deleted, ts)`,
		// A rowid table, not WITHOUT ROWID: its rows carry whole resources,
		// far larger than the few hundred bytes WITHOUT ROWID suits.
		`CREATE TABLE IF NOT EXISTS history(
			type    TEXT NOT NULL,
			id      TEXT NOT NULL,
			version TEXT NOT NULL,
			ts      INTEGER NOT NULL,
			project TEXT NOT NULL,
			deleted INTEGER NOT NULL,
			json    BLOB,
			PRIMARY KEY(type, id, version))`,
		`CREATE INDEX IF NOT EXISTS history_newest ON history(type, id, ts)`,
		// value has no declared type, hence no affinity: text stays text
		// ("007" is not the number 7), floats stay REAL and instants
		// INTEGER, so the kinds never convert into each other. BINARY
		// collation (the default) orders text byte by byte, as Go does.
		`CREATE TABLE IF NOT EXISTS search(
			key     TEXT NOT NULL,
			value   NOT NULL,
			project TEXT NOT NULL,
			rid     INTEGER NOT NULL,
			PRIMARY KEY(key, value, project, rid)) WITHOUT ROWID`,
		// Deleting a resource's rows, and exists/sort lookups. The primary
		// key columns ride along, so min/max(value) is read from the index.
		`CREATE INDEX IF NOT EXISTS search_rid ON search(rid, key)`,
		`CREATE TABLE IF NOT EXISTS claims(key TEXT PRIMARY KEY, owner TEXT NOT NULL) WITHOUT ROWID`,
		`CREATE TABLE IF NOT EXISTS outbox(id TEXT PRIMARY KEY, event BLOB, at INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS secrets(key TEXT PRIMARY KEY, value BLOB)`,
	},
	{
		// Version 2 keys history by the resource's rid and keeps each
		// version's unpublished event in its history row. Keyed by (type,
		// id) and by outbox id, every create wrote three index pages chosen
		// by a random id; keyed by rid, a create appends to pages the
		// previous creates just wrote.
		`CREATE TABLE history2(
			rid     INTEGER NOT NULL,
			version TEXT NOT NULL,
			ts      INTEGER NOT NULL,
			project TEXT NOT NULL,
			deleted INTEGER NOT NULL,
			json    BLOB,
			event   BLOB,    -- the version's event, until it is published
			at      INTEGER, -- when the event was recorded
			PRIMARY KEY(rid, version))`,
		`INSERT INTO history2(rowid, rid, version, ts, project, deleted, json, event, at)
			SELECT h.rowid, r.rid, h.version, h.ts, h.project, h.deleted, h.json, o.event, o.at
			FROM history h JOIN resources r ON r.type = h.type AND r.id = h.id
			LEFT JOIN outbox o ON o.id = h.type || '/' || h.id || '/' || h.version`,
		`DROP TABLE history`,
		`DROP TABLE outbox`,
		`ALTER TABLE history2 RENAME TO history`,
		`CREATE INDEX history_newest ON history(rid, ts)`,
		`CREATE INDEX history_pending ON history(at) WHERE event IS NOT NULL`,
	},
	{
		// Version 3 puts the project before the value in the search
		// table's key: a search walks only its own project's rows, in
		// value order, so that it stops at the page (stream.go). Keyed
		// (key, value, project), a project's search read every other
		// project's rows of the same value range, and a page had to
		// gather every match to order it.
		`CREATE TABLE search3(
			key     TEXT NOT NULL,
			value   NOT NULL,
			project TEXT NOT NULL,
			rid     INTEGER NOT NULL,
			PRIMARY KEY(key, project, value, rid)) WITHOUT ROWID`,
		`INSERT INTO search3(key, value, project, rid) SELECT key, value, project, rid FROM search`,
		`DROP TABLE search`,
		`ALTER TABLE search3 RENAME TO search`,
		`CREATE INDEX search_rid ON search(rid, key)`,
	},
	{
		// Version 4 keeps the values as written (store.ExactSuffix, for
		// :exact) by resource: a condition on them always comes beside one
		// on the normalised values, which finds the resources, so they are
		// only ever read for a resource already found. In the search table
		// each was a row on a page chosen by its value, and a Patient's
		// ten of them a tenth of what a create cost the writer; here a
		// resource's rows sit together, at the end of the table for a new
		// one. project is not kept: rid has one.
		`CREATE TABLE search_exact(
			rid   INTEGER NOT NULL,
			key   TEXT NOT NULL,
			value NOT NULL,
			PRIMARY KEY(rid, key, value)) WITHOUT ROWID`,
		`INSERT INTO search_exact(rid, key, value) SELECT rid, key, value FROM search WHERE key LIKE '%\_exact' ESCAPE '\'`,
		`DELETE FROM search WHERE key LIKE '%\_exact' ESCAPE '\'`,
	},
	{
		// Version 5 keeps the search table's key and project as numbers,
		// each the id of its text in names. The two texts were some 55 of
		// a row's 70 bytes ("Patient.s_name" and a project's UUID), and
		// the same in every row of a range. A row a quarter the size puts
		// four times the rows on a page: a create dirtied 15 pages of the
		// table, now 9, and an insert's search of the B-tree compares
		// numbers before it reaches a value. The rows are copied in their
		// new order, so that each page is written once.
		`CREATE TABLE names(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)`,
		`INSERT INTO names(name) SELECT key FROM search UNION SELECT project FROM search`,
		`CREATE TABLE search5(
			key     INTEGER NOT NULL,
			project INTEGER NOT NULL,
			value   NOT NULL,
			rid     INTEGER NOT NULL,
			PRIMARY KEY(key, project, value, rid)) WITHOUT ROWID`,
		`INSERT INTO search5(key, project, value, rid)
			SELECT k.id, p.id, s.value, s.rid FROM search s
			JOIN names k ON k.name = s.key JOIN names p ON p.name = s.project
			ORDER BY 1, 2, 3, 4`,
		`DROP TABLE search`,
		`ALTER TABLE search5 RENAME TO search`,
		`CREATE INDEX search_rid ON search(rid, key)`,
	},
	{
		// Version 6 keeps the audit trail in blocks (store.TrailBlock): a
		// row per writer's write, its events a JSON array, and a row per
		// block and key that finds it. A resource per event, with its
		// history and some forty search rows, cost the writer ten times
		// the read it recorded. Everything is read by project and first
		// place (the primary key); last and the times are kept to filter.
		`CREATE TABLE trail(
			project TEXT NOT NULL,
			first   INTEGER NOT NULL,
			last    INTEGER NOT NULL,
			ts_from INTEGER NOT NULL,
			ts_to   INTEGER NOT NULL,
			events  BLOB NOT NULL,
			PRIMARY KEY(project, first))`,
		`CREATE TABLE trail_keys(
			project TEXT NOT NULL,
			key     TEXT NOT NULL,
			first   INTEGER NOT NULL,
			PRIMARY KEY(project, key, first)) WITHOUT ROWID`,
	},
}

// migrate creates or upgrades the schema in one transaction on the writer's
// connection.
func migrate(ctx context.Context, c *sql.Conn, log *slog.Logger) (err error) {
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_, _ = c.ExecContext(context.Background(), "ROLLBACK")
		}
	}()
	if _, err := c.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID`); err != nil {
		return err
	}
	v := 0
	var s string
	switch err := c.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'schema_version'`).Scan(&s); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	default:
		if v, err = strconv.Atoi(s); err != nil {
			return fmt.Errorf("sqlstore: bad schema version %q", s)
		}
	}
	if v > schemaVersion {
		return fmt.Errorf("sqlstore: database has schema version %d, newer than this program's %d", v, schemaVersion)
	}
	from, start := v, time.Now()
	for ; v < schemaVersion; v++ {
		if from > 0 {
			// Rewriting a table of a grown store takes a while: say so
			// (a new store, built up from nothing, has nothing to rewrite).
			log.Info("sqlstore: migrating the schema; a large store takes a while", "from", v, "to", v+1)
		}
		for _, stmt := range migrations[v] {
			if _, err := c.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("sqlstore: migrating to version %d: %w", v+1, err)
			}
		}
	}
	if _, err := c.ExecContext(ctx, `INSERT INTO meta(key, value) VALUES('schema_version', ?)
		ON CONFLICT(key) DO UPDATE SET value = excluded.value`, strconv.Itoa(v)); err != nil {
		return err
	}
	if _, err = c.ExecContext(ctx, "COMMIT"); err == nil && from > 0 && from < schemaVersion {
		log.Info("sqlstore: schema migrated", "from", from, "to", schemaVersion, "took", time.Since(start).Round(time.Millisecond))
	}
	return err
}
