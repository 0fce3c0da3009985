package sqlstore

import (
	"context"
	"database/sql"
	"errors"
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
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM search s JOIN names k ON k.id = s.key WHERE k.name = 'Patient.s_family_exact'`).Scan(&inSearch); err != nil {
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

// A version 4 database's search rows keep their keys and projects as the
// ids of their names: every search finds what it found, in each project,
// and an update replaces the rows it changes.
func TestMigrateSearchNames(t *testing.T) {
	ctx := context.Background()
	path := oldDatabase(t, 4,
		`INSERT INTO resources(rid, type, id, version, ts, project, deleted, json) VALUES
			(1, 'Patient', 'a', '1', 1000, 'p1', 0, '{}'), (2, 'Patient', 'b', '1', 1000, 'p1', 0, '{}'), (3, 'Patient', 'c', '1', 1000, 'p2', 0, '{}')`,
		`INSERT INTO history(rid, version, ts, project, deleted, json) VALUES
			(1, '1', 1000, 'p1', 0, '{}'), (2, '1', 1000, 'p1', 0, '{}'), (3, '1', 1000, 'p2', 0, '{}')`,
		`INSERT INTO search(key, value, project, rid) VALUES
			('Patient.s_family', 'smith', 'p1', 1), ('Patient.s_given', 'ann', 'p1', 1),
			('Patient.s_family', 'jones', 'p1', 2),
			('Patient.s_family', 'smith', 'p2', 3)`,
	)
	s, err := Open(ctx, path, Options{Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var texts int
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM search WHERE typeof(key) != 'integer' OR typeof(project) != 'integer'`).Scan(&texts); err != nil || texts != 0 {
		t.Fatalf("%d search rows still keep a text key or project (%v)", texts, err)
	}
	ids := func(project string, cs ...store.Cond) string {
		t.Helper()
		recs, err := s.Search(ctx, "Patient", &store.Query{Project: project, Filter: cs, Sort: []store.Sort{{Field: "s_family"}}})
		if err != nil {
			t.Fatal(err)
		}
		out := ""
		for _, r := range recs {
			out += r.ID
		}
		return out
	}
	if got := ids("p1", store.Eq("s_family", "smith")); got != "a" {
		t.Errorf("p1's smiths: %q, want a", got)
	}
	if got := ids("p2", store.Eq("s_family", "smith")); got != "c" {
		t.Errorf("p2's smiths: %q, want c", got)
	}
	if got := ids("p1"); got != "ba" {
		t.Errorf("p1 sorted by family: %q, want ba", got)
	}
	if got := ids("p1", store.Eq("s_given", "ann")); got != "a" {
		t.Errorf("p1's anns: %q, want a", got)
	}
	if err := s.Write(ctx, &store.Write{Record: store.Record{Type: "Patient", ID: "a", Version: "2", Time: time.Now(), Project: "p1", JSON: []byte("{}")}, Prev: "1",
		Fields: map[string]any{"s_family": []string{"smith"}, "s_birth": []string{"x"}}}); err != nil {
		t.Fatal(err)
	}
	if got := ids("p1", store.Eq("s_given", "ann")); got != "" {
		t.Errorf("a value the update dropped is still found: %q", got)
	}
	if got := ids("p1", store.Eq("s_family", "smith"), store.Eq("s_birth", "x")); got != "a" {
		t.Errorf("the updated Patient by its kept and new values: %q, want a", got)
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

// A name first stored by a transaction that rolls back is not remembered:
// SQLite may give its id to the next new name, and the two would then
// share one id in the search table.
func TestNamesOfARolledBackTransaction(t *testing.T) {
	s := openFull(t)
	ctx := context.Background()
	do := func(run func(*wconn) error) error { return s.w.do(ctx, "p", 0, false, run) }
	var x, y, again int64
	failed := errors.New("this call fails")
	if err := do(func(c *wconn) (err error) {
		if x, err = c.nameID("x"); err != nil {
			return err
		}
		return failed
	}); !errors.Is(err, failed) {
		t.Fatalf("the failing call answered %v", err)
	}
	if err := do(func(c *wconn) (err error) { y, err = c.nameID("y"); return err }); err != nil {
		t.Fatal(err)
	}
	if err := do(func(c *wconn) (err error) { again, err = c.nameID("x"); return err }); err != nil {
		t.Fatal(err)
	}
	if again == y {
		t.Fatalf("x and y share the id %d (x had %d in the rolled-back transaction)", y, x)
	}
	for name, id := range map[string]int64{"x": again, "y": y} {
		var stored string
		if err := s.rdb.QueryRowContext(ctx, `SELECT name FROM names WHERE id = ?`, id).Scan(&stored); err != nil || stored != name {
			t.Errorf("id %d names %q (%v), want %q", id, stored, err, name)
		}
	}
}
