package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
)

// A database written by schema version 1 opens with its versions, history
// and unpublished events intact.
func TestMigrateFromVersion1(t *testing.T) {
	ctx := context.Background()
	path := oldDatabase(t, 1,
		`INSERT INTO resources(type, id, version, ts, project, deleted, json) VALUES('Patient', 'a', '2', 2000, 'p', 0, '{"v":2}')`,
		`INSERT INTO history(type, id, version, ts, project, deleted, json) VALUES('Patient', 'a', '1', 1000, 'p', 0, '{"v":1}')`,
		`INSERT INTO history(type, id, version, ts, project, deleted, json) VALUES('Patient', 'a', '2', 2000, 'p', 0, '{"v":2}')`,
		`INSERT INTO outbox(id, event, at) VALUES('Patient/a/2', '{"e":2}', 2000)`,
	)

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

// A version 3 database's values as written move to search_exact, where
// :exact still finds them and an update replaces them.
func TestMigrateExactRows(t *testing.T) {
	ctx := context.Background()
	path := oldDatabase(t, 3,
		`INSERT INTO resources(rid, type, id, version, ts, project, deleted, json) VALUES(7, 'Patient', 'a', '1', 1000, 'p', 0, '{}')`,
		`INSERT INTO history(rid, version, ts, project, deleted, json) VALUES(7, '1', 1000, 'p', 0, '{}')`,
		`INSERT INTO search(key, value, project, rid) VALUES('Patient.s_family', 'smith', 'p', 7), ('Patient.s_family_exact', 'Smith', 'p', 7), ('Patient.s_exactly', 'x', 'p', 7)`,
	)

	s, err := Open(ctx, path, Options{Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var inSearch, moved int
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM search WHERE key = 'Patient.s_family_exact'`).Scan(&inSearch); err != nil {
		t.Fatal(err)
	}
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM search_exact WHERE rid = 7 AND key = 'Patient.s_family_exact' AND value = 'Smith'`).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	if inSearch != 0 || moved != 1 {
		t.Fatalf("after migrating: %d exact rows left in search, %d in search_exact", inSearch, moved)
	}
	find := func(exact string) int {
		t.Helper()
		n, err := s.Count(ctx, "Patient", &store.Query{Project: "p", Filter: []store.Cond{store.Eq("s_family", "smith"), store.Eq("s_family_exact", exact)}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if find("Smith") != 1 {
		t.Fatal(":exact does not find the migrated value")
	}
	if n, err := s.Count(ctx, "Patient", &store.Query{Project: "p", Filter: []store.Cond{store.Eq("s_exactly", "x")}}); err != nil || n != 1 {
		t.Fatalf("a field whose name only contains exact was moved: %d, %v", n, err)
	}
	if err := s.Write(ctx, &store.Write{Record: store.Record{Type: "Patient", ID: "a", Version: "2", Time: time.Now(), Project: "p", JSON: []byte("{}")}, Prev: "1",
		Fields: map[string]any{"s_family": []string{"smith"}, "s_family_exact": []string{"SMITH"}}}); err != nil {
		t.Fatal(err)
	}
	if find("Smith") != 0 || find("SMITH") != 1 {
		t.Fatal("an update did not replace the value as written")
	}
}

// oldDatabase writes a database at schema version (the layout the first
// version migrations build, as the code of that time left it) holding the
// rows rows inserts, and returns its path.
func oldDatabase(t *testing.T, version int, rows ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), fmt.Sprintf("v%d.db", version))
	db, err := sql.Open("sqlite", dsn(path, "journal_mode(WAL)"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var stmts []string
	for _, m := range migrations[:version] {
		stmts = append(stmts, m...)
	}
	stmts = append(stmts,
		`CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID`,
		fmt.Sprintf(`INSERT INTO meta VALUES('schema_version', '%d')`, version))
	for _, q := range append(stmts, rows...) {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return path
}
