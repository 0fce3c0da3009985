package sqlstore

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"
)

// A database written by schema version 1 opens with its versions, history
// and unpublished events intact.
func TestMigrateFromVersion1(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := sql.Open("sqlite", dsn(path, "journal_mode(WAL)"))
	if err != nil {
		t.Fatal(err)
	}
	stmts := append([]string{}, migrations[0]...)
	stmts = append(stmts,
		`CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID`,
		`INSERT INTO meta VALUES('schema_version', '1')`,
		`INSERT INTO resources(type, id, version, ts, project, deleted, json) VALUES('Patient', 'a', '2', 2000, 'p', 0, '{"v":2}')`,
		`INSERT INTO history(type, id, version, ts, project, deleted, json) VALUES('Patient', 'a', '1', 1000, 'p', 0, '{"v":1}')`,
		`INSERT INTO history(type, id, version, ts, project, deleted, json) VALUES('Patient', 'a', '2', 2000, 'p', 0, '{"v":2}')`,
		`INSERT INTO outbox(id, event, at) VALUES('Patient/a/2', '{"e":2}', 2000)`,
	)
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s, err := Open(ctx, path, Options{Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v1, err := s.GetVersion(ctx, "Patient", "a", "1")
	if err != nil || string(v1.JSON) != `{"v":1}` || v1.Project != "p" {
		t.Fatalf("version 1: %+v, %v", v1, err)
	}
	h, err := s.History(ctx, "Patient", "a", 0)
	if err != nil || len(h) != 2 || h[0].Version != "2" || h[1].Version != "1" {
		t.Fatalf("history: %v, %v", h, err)
	}
	p, err := s.Pending(ctx, time.Now(), time.Now())
	if err != nil || len(p) != 1 || p[0].ID != "Patient/a/2" || string(p[0].Event) != `{"e":2}` {
		t.Fatalf("pending: %+v, %v", p, err)
	}
	if err := s.ClearOutbox(ctx, []string{"Patient/a/2", "not/an-event", "junk"}); err != nil {
		t.Fatal(err)
	}
	if p, err := s.Pending(ctx, time.Now(), time.Now()); err != nil || len(p) != 0 {
		t.Fatalf("pending after clearing: %+v, %v", p, err)
	}
}
