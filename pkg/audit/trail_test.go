package audit

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	_ "modernc.org/sqlite"

	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/pkg/store/mongostore"
	"github.com/pinion-health/pinion/pkg/store/sqlstore"
	"github.com/pinion-health/pinion/pkg/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if ferret.stop != nil {
		ferret.stop()
	}
	os.Exit(code)
}

// trail is a store and a stream, with the store reopened at will, as a
// process that restarts (or a tamperer between two runs) sees it. Its
// store is SQLite (newTrail) or MongoDB on the embedded FerretDB
// (newMongoTrail), which the tamperer reaches past the API.
type trail struct {
	t    testing.TB
	js   jetstream.JetStream
	db   database
	repo *repo.Repo
	st   store.Store
}

// database is where a trail's store lives, reached past the API: what
// someone with the database in hand could do to the stored events.
type database interface {
	open(t testing.TB) store.Store
	// setJSON stores b as the stored JSON of the AuditEvent id.
	setJSON(t testing.TB, id string, b []byte)
	// remove deletes the AuditEvents' current rows (their history stays,
	// as a hand-made delete leaves it).
	remove(t testing.TB, ids ...string)
	// markDeleted marks the AuditEvent deleted, its JSON gone, as a
	// delete through the API would have.
	markDeleted(t testing.TB, id string)
}

func newTrail(t testing.TB) *trail {
	return startTrail(t, &sqliteDB{path: filepath.Join(t.TempDir(), "pinion.db")})
}

func newMongoTrail(t testing.TB) *trail {
	t.Helper()
	ferret.once.Do(func() { ferret.client, ferret.stop, ferret.err = testenv.FerretDB() })
	if ferret.err != nil {
		t.Fatal(ferret.err)
	}
	db := ferret.client.Database(fmt.Sprintf("audit_%d", ferret.dbs.Add(1)))
	t.Cleanup(func() { _ = db.Drop(context.Background()) })
	return startTrail(t, &mongoDB{db: db})
}

func startTrail(t testing.TB, db database) *trail {
	t.Helper()
	tr := &trail{t: t, js: testenv.JetStream(t), db: db}
	if err := EnsureStream(context.Background(), tr.js); err != nil {
		t.Fatal(err)
	}
	tr.open()
	t.Cleanup(tr.close)
	return tr
}

func (tr *trail) open() {
	tr.t.Helper()
	st := tr.db.open(tr.t)
	r, err := repo.New(st, nil, repo.Options{})
	if err != nil {
		tr.t.Fatal(err)
	}
	tr.st, tr.repo = st, r
}

// runWriter runs a writer, as a service does, until stop or the test's
// end.
func (tr *trail) runWriter() (w *Writer, stop func()) {
	tr.t.Helper()
	w = NewWriter(tr.repo, tr.js, quiet)
	halt, err := w.Start(context.Background())
	if err != nil {
		tr.t.Fatal(err)
	}
	stop = sync.OnceFunc(halt)
	tr.t.Cleanup(stop)
	return w, stop
}

func (tr *trail) close() {
	if tr.repo != nil {
		tr.repo.Close()
		tr.st.Close()
		tr.repo, tr.st = nil, nil
	}
}

// underneath does something to the database with Pinion stopped, and
// starts it again (a fresh cache) to look.
func (tr *trail) underneath(do func(db database)) {
	tr.t.Helper()
	tr.close()
	do(tr.db)
	tr.open()
}

func (tr *trail) setJSON(id string, b []byte) {
	tr.underneath(func(db database) { db.setJSON(tr.t, id, b) })
}

// editJSON replaces old with new in an event's stored JSON.
func (tr *trail) editJSON(id, old, new string) {
	tr.t.Helper()
	b := tr.stored(id)
	if !bytes.Contains(b, []byte(old)) {
		tr.t.Fatalf("%s holds no %s", id, old)
	}
	tr.setJSON(id, bytes.Replace(b, []byte(old), []byte(new), 1))
}

func (tr *trail) remove(ids ...string) {
	tr.underneath(func(db database) { db.remove(tr.t, ids...) })
}

func (tr *trail) markDeleted(id string) {
	tr.underneath(func(db database) { db.markDeleted(tr.t, id) })
}

// editSecret changes a secret (a checkpoint) in the store's secrets,
// which no API serves: through the store is as underneath as past it.
func (tr *trail) editSecret(key string, change func([]byte) []byte) {
	tr.t.Helper()
	ctx := context.Background()
	v, err := tr.st.Secret(ctx, key)
	if err != nil {
		tr.t.Fatal(err)
	}
	if err := tr.st.SetSecret(ctx, key, change(v)); err != nil {
		tr.t.Fatal(err)
	}
}

// stored is an event's JSON as stored.
func (tr *trail) stored(id string) []byte {
	tr.t.Helper()
	res, err := tr.repo.Read(context.Background(), repo.AllProjects, "AuditEvent", id)
	if err != nil {
		tr.t.Fatal(err)
	}
	return res.JSON
}

func (tr *trail) verify(project string) *Report {
	tr.t.Helper()
	rep, err := Verify(context.Background(), tr.repo, project)
	if err != nil {
		tr.t.Fatal(err)
	}
	return rep
}

// sqliteDB is the SQLite store's file, changed with SQL.
type sqliteDB struct{ path string }

func (d *sqliteDB) open(t testing.TB) store.Store {
	st, err := sqlstore.Open(context.Background(), d.path, sqlstore.Options{Sync: "off"})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (d *sqliteDB) exec(t testing.TB, query string, args ...any) {
	t.Helper()
	db, err := sql.Open("sqlite", d.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(query, args...)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		t.Fatalf("%s changed nothing", query)
	}
}

func (d *sqliteDB) setJSON(t testing.TB, id string, b []byte) {
	d.exec(t, `UPDATE resources SET json = ? WHERE type = 'AuditEvent' AND id = ?`, b, id)
}

func (d *sqliteDB) remove(t testing.TB, ids ...string) {
	for _, id := range ids {
		d.exec(t, `DELETE FROM resources WHERE type = 'AuditEvent' AND id = ?`, id)
	}
}

func (d *sqliteDB) markDeleted(t testing.TB, id string) {
	d.exec(t, `UPDATE resources SET deleted = 1, json = NULL WHERE type = 'AuditEvent' AND id = ?`, id)
}

// ferret is the package's embedded FerretDB, started by the first test
// that needs it and stopped by TestMain.
var ferret struct {
	once   sync.Once
	client *mongo.Client
	stop   func()
	err    error
	dbs    atomic.Int64
}

// mongoDB is a database of the MongoDB store, changed with the driver:
// the AuditEvent collection's documents (mongostore's layout: the JSON in
// r, deleted beside it).
type mongoDB struct{ db *mongo.Database }

func (d *mongoDB) open(t testing.TB) store.Store {
	st, err := mongostore.Open(context.Background(), d.db, mongostore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (d *mongoDB) update(t testing.TB, id string, change bson.D) {
	t.Helper()
	res, err := d.db.Collection("AuditEvent").UpdateOne(context.Background(), bson.D{{Key: "_id", Value: id}}, change)
	if err != nil {
		t.Fatal(err)
	}
	if res.MatchedCount == 0 {
		t.Fatalf("no AuditEvent %s", id)
	}
}

func (d *mongoDB) setJSON(t testing.TB, id string, b []byte) {
	d.update(t, id, bson.D{{Key: "$set", Value: bson.D{{Key: "r", Value: string(b)}}}})
}

func (d *mongoDB) remove(t testing.TB, ids ...string) {
	for _, id := range ids {
		res, err := d.db.Collection("AuditEvent").DeleteOne(context.Background(), bson.D{{Key: "_id", Value: id}})
		if err != nil {
			t.Fatal(err)
		}
		if res.DeletedCount == 0 {
			t.Fatalf("no AuditEvent %s", id)
		}
	}
}

func (d *mongoDB) markDeleted(t testing.TB, id string) {
	d.update(t, id, bson.D{{Key: "$set", Value: bson.D{{Key: "deleted", Value: true}}}, {Key: "$unset", Value: bson.D{{Key: "r", Value: ""}}}})
}
