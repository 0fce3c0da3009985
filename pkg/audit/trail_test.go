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
	"go.mongodb.org/mongo-driver/v2/mongo/options"
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
// someone with the database in hand could do to the stored blocks.
type database interface {
	open(t testing.TB) store.Store
	// block reads the block holding place seq of project's trail.
	block(t testing.TB, project string, seq int64) (first int64, events [][]byte)
	// put stores events as the block at first, in place of any there.
	put(t testing.TB, project string, first int64, events [][]byte)
	// drop deletes the block at first.
	drop(t testing.TB, project string, first int64)
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

// setJSON stores b in place of the AuditEvent id, in its block.
func (tr *trail) setJSON(id string, b []byte) {
	tr.t.Helper()
	project, seq, ok := repo.ParseTrailID(id)
	if !ok {
		tr.t.Fatalf("%s is not a trail id", id)
	}
	tr.underneath(func(db database) {
		first, events := db.block(tr.t, project, seq)
		events[seq-first] = b
		db.put(tr.t, project, first, events)
	})
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

// remove deletes events from their blocks, each place left empty: a
// block is cut in two around it (the later events keep their places), or
// shortened, or dropped when nothing is left of it.
func (tr *trail) remove(ids ...string) {
	tr.t.Helper()
	tr.underneath(func(db database) {
		for _, id := range ids {
			project, seq, ok := repo.ParseTrailID(id)
			if !ok {
				tr.t.Fatalf("%s is not a trail id", id)
			}
			first, events := db.block(tr.t, project, seq)
			if seq > first+int64(len(events))-1 {
				tr.t.Fatalf("%s is not stored", id)
			}
			before, after := events[:seq-first], events[seq-first+1:]
			db.drop(tr.t, project, first)
			if len(before) > 0 {
				db.put(tr.t, project, first, before)
			}
			if len(after) > 0 {
				db.put(tr.t, project, seq+1, after)
			}
		}
	})
}

// markDeleted is remove of one event: a trail event has no deleted
// version, so a delete underneath is the place emptied.
func (tr *trail) markDeleted(id string) { tr.remove(id) }

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

func (d *sqliteDB) block(t testing.TB, project string, seq int64) (int64, [][]byte) {
	t.Helper()
	db, err := sql.Open("sqlite", d.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var first int64
	var data []byte
	if err := db.QueryRow(`SELECT first, events FROM trail WHERE project = ? AND first <= ? ORDER BY first DESC LIMIT 1`, project, seq).Scan(&first, &data); err != nil {
		t.Fatalf("the block of %s:%d: %v", project, seq, err)
	}
	events, err := store.DecodeTrail(data)
	if err != nil {
		t.Fatal(err)
	}
	return first, events
}

func (d *sqliteDB) put(t testing.TB, project string, first int64, events [][]byte) {
	d.exec(t, `INSERT INTO trail(project, first, last, ts_from, ts_to, events) VALUES(?, ?, ?, 0, 0, ?)
		ON CONFLICT(project, first) DO UPDATE SET last = excluded.last, events = excluded.events`,
		project, first, first+int64(len(events))-1, store.EncodeTrail(events))
}

func (d *sqliteDB) drop(t testing.TB, project string, first int64) {
	d.exec(t, `DELETE FROM trail WHERE project = ? AND first = ?`, project, first)
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
// the audit_trail collection's documents (mongostore's layout: the
// events as store.EncodeTrail writes them, the project and first place in
// the _id).
type mongoDB struct{ db *mongo.Database }

func (d *mongoDB) open(t testing.TB) store.Store {
	st, err := mongostore.Open(context.Background(), d.db, mongostore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (d *mongoDB) block(t testing.TB, project string, seq int64) (int64, [][]byte) {
	t.Helper()
	var doc struct {
		First  int64  `bson:"first"`
		Events []byte `bson:"events"`
	}
	err := d.db.Collection("audit_trail").FindOne(context.Background(),
		bson.D{{Key: "project", Value: project}, {Key: "first", Value: bson.D{{Key: "$lte", Value: seq}}}},
		options.FindOne().SetSort(bson.D{{Key: "first", Value: -1}})).Decode(&doc)
	if err != nil {
		t.Fatalf("the block of %s:%d: %v", project, seq, err)
	}
	events, err := store.DecodeTrail(doc.Events)
	if err != nil {
		t.Fatal(err)
	}
	return doc.First, events
}

func (d *mongoDB) put(t testing.TB, project string, first int64, events [][]byte) {
	t.Helper()
	id := fmt.Sprintf("%s:%d", project, first)
	_, err := d.db.Collection("audit_trail").UpdateOne(context.Background(), bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "project", Value: project}, {Key: "first", Value: first},
			{Key: "last", Value: first + int64(len(events)) - 1}, {Key: "events", Value: store.EncodeTrail(events)}}}},
		options.UpdateOne().SetUpsert(true))
	if err != nil {
		t.Fatal(err)
	}
}

func (d *mongoDB) drop(t testing.TB, project string, first int64) {
	t.Helper()
	res, err := d.db.Collection("audit_trail").DeleteOne(context.Background(), bson.D{{Key: "_id", Value: fmt.Sprintf("%s:%d", project, first)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.DeletedCount == 0 {
		t.Fatalf("no block %s:%d", project, first)
	}
}
