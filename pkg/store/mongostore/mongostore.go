// Package mongostore is the storage port over MongoDB (the distributed
// deployment), and over FerretDB speaking its wire protocol (the test double,
// and the shared store of several processes on one machine).
//
// One collection per resource type holds current versions, with the search
// values as top-level s_* fields; <type>_history holds every version;
// unique_keys the claims; outbox the events; credentials the secrets.
//
// On a replica set or a sharded cluster each Write call is one
// multi-document transaction. FerretDB has none: there a write records its
// event in the outbox first, then the history, then the current document
// (conditional on the previous version), so every current version is in the
// history and Pending publishes only events whose version exists. A write
// refused half-way (a conflict) removes what it had written; only a crash
// in between leaves a history version nothing points at.
package mongostore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/pinion-health/pinion/pkg/store"
)

// Stored document fields. Search fields (s_*) sit beside them, top level.
const (
	fID      = "_id"
	fVersion = "v"
	fTime    = "ts"
	fProject = "project"
	fDeleted = "deleted"
	fJSON    = "r"
)

const (
	claimsColl  = "unique_keys"
	outboxColl  = "outbox"
	secretsColl = "credentials"
	metaColl    = "meta"
	trailColl   = "audit_trail"
)

// Options configures Open.
type Options struct {
	// IndexKeys names the search fields of a type worth an index, made on
	// the type's first write in this process. None are made at Open: every
	// service process opens the store at once, and FerretDB drops the
	// connection of a createIndexes that races another.
	IndexKeys func(typ string) []string
	Log       *slog.Logger
}

// Store is the adapter. It is safe for concurrent use.
type Store struct {
	db *mongo.Database
	o  Options
	// locks serialise writes to one resource within this process.
	// MongoDB's conditional replace already lets one of two racing writers
	// win, but FerretDB's is not atomic (it finds, then writes): measured,
	// two writers could both succeed. Across processes on FerretDB that
	// race remains; on MongoDB it does not.
	locks   [256]sync.Mutex
	indexed sync.Map // resource type → struct{}: indexes ensured
	// txn: the server runs multi-document transactions, and every Write
	// call is one.
	txn bool
}

var _ store.Store = (*Store)(nil)

// Open uses db.
func Open(ctx context.Context, db *mongo.Database, o Options) (*Store, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.IndexKeys == nil {
		o.IndexKeys = func(string) []string { return nil }
	}
	txn, err := transactions(ctx, db)
	if err != nil {
		return nil, err
	}
	return &Store{db: db, o: o, txn: txn}, nil
}

// transactions asks the server whether it runs multi-document
// transactions: a replica set member or a mongos with sessions does; a
// standalone mongod and FerretDB do not.
func transactions(ctx context.Context, db *mongo.Database) (bool, error) {
	var hello struct {
		SetName  string `bson:"setName"`
		Msg      string `bson:"msg"`
		Sessions *int64 `bson:"logicalSessionTimeoutMinutes"`
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return false, fmt.Errorf("ask the database what it supports: %w", err)
	}
	return hello.Sessions != nil && (hello.SetName != "" || hello.Msg == "isdbgrid"), nil
}

// Transactional reports whether a Write call of several writes is all or
// nothing (the server runs transactions).
func (s *Store) Transactional() bool { return s.txn }

// Close does nothing: the caller owns the client.
func (s *Store) Close() error { return nil }

func (s *Store) coll(typ string) *mongo.Collection    { return s.db.Collection(typ) }
func (s *Store) history(typ string) *mongo.Collection { return s.db.Collection(typ + "_history") }

func (s *Store) lock(typ, id string) func() {
	h := fnv.New32a()
	h.Write([]byte(typ + "/" + id))
	m := &s.locks[h.Sum32()%uint32(len(s.locks))]
	m.Lock()
	return m.Unlock
}

var recordFields = bson.D{{Key: fVersion, Value: 1}, {Key: fTime, Value: 1}, {Key: fProject, Value: 1}, {Key: fDeleted, Value: 1}, {Key: fJSON, Value: 1}}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, typ, id string) (*store.Record, error) {
	var doc bson.Raw
	err := s.coll(typ).FindOne(ctx, bson.D{{Key: fID, Value: id}}, options.FindOne().SetProjection(recordFields)).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read %s/%s: %w", typ, id, err)
	}
	return fromDoc(typ, doc), nil
}

func fromDoc(typ string, doc bson.Raw) *store.Record {
	rec := &store.Record{Type: typ}
	rec.ID, _ = doc.Lookup(fID).StringValueOK()
	rec.Version, _ = doc.Lookup(fVersion).StringValueOK()
	if dt, ok := doc.Lookup(fTime).DateTimeOK(); ok {
		rec.Time = time.UnixMilli(dt).UTC()
	}
	rec.Project, _ = doc.Lookup(fProject).StringValueOK()
	rec.Deleted, _ = doc.Lookup(fDeleted).BooleanOK()
	if js, ok := doc.Lookup(fJSON).StringValueOK(); ok {
		rec.JSON = []byte(js)
	}
	return rec
}

// GetVersion implements store.Store.
func (s *Store) GetVersion(ctx context.Context, typ, id, version string) (*store.Record, error) {
	var doc bson.Raw
	err := s.history(typ).FindOne(ctx, bson.D{{Key: fID, Value: id + "/" + version}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("vread %s/%s/%s: %w", typ, id, version, err)
	}
	rec := fromDoc(typ, doc)
	rec.ID = id
	return rec, nil
}

// History implements store.Store.
func (s *Store) History(ctx context.Context, typ, id string, limit int) ([]*store.Record, error) {
	cur, err := s.history(typ).Find(ctx, bson.D{{Key: "id", Value: id}},
		options.Find().SetSort(bson.D{{Key: fTime, Value: -1}, {Key: fID, Value: -1}}).SetLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("history %s/%s: %w", typ, id, err)
	}
	defer cur.Close(ctx)
	var out []*store.Record
	for cur.Next(ctx) {
		rec := fromDoc(typ, cur.Current)
		rec.ID = id
		out = append(out, rec)
	}
	return out, cur.Err()
}

// Write implements store.Store. With transactions the call is one;
// without, several creates go in three round trips (outbox, history,
// current documents), and if one fails those before it may stay stored.
func (s *Store) Write(ctx context.Context, ws ...*store.Write) error {
	if len(ws) == 0 {
		return nil
	}
	for _, w := range ws {
		// Before the transaction: an index build may not run inside one.
		if err := s.ensureIndexes(ctx, w.Type); err != nil {
			return err
		}
	}
	if !s.txn {
		return s.write(ctx, ws, true)
	}
	sess, err := s.db.Client().StartSession()
	if err != nil {
		return fmt.Errorf("start a session: %w", err)
	}
	defer sess.EndSession(context.WithoutCancel(ctx))
	// WithTransaction retries a transaction that lost a write conflict to
	// another; the retry then finds the new version and answers
	// ErrConflict, as the conditional replace does without transactions.
	_, err = sess.WithTransaction(ctx, func(ctx context.Context) (any, error) {
		return nil, s.write(ctx, ws, false)
	})
	return err
}

// write stores ws; compensate undoes a refused single write and
// serialises writers of one resource in this process (needed only without
// a transaction, which aborts as a whole).
func (s *Store) write(ctx context.Context, ws []*store.Write, compensate bool) error {
	if len(ws) == 1 || !allCreates(ws) {
		for _, w := range ws {
			if err := s.writeOne(ctx, w, compensate); err != nil {
				return err
			}
		}
		return nil
	}
	var outbox []any
	hist := map[string][]any{}
	docs := map[string][]any{}
	var types []string
	for _, w := range ws {
		if w.Event != nil {
			outbox = append(outbox, outboxDoc(w))
		}
		if _, ok := docs[w.Type]; !ok {
			types = append(types, w.Type)
		}
		hist[w.Type] = append(hist[w.Type], historyDoc(w))
		docs[w.Type] = append(docs[w.Type], currentDoc(w))
	}
	if len(outbox) > 0 {
		if _, err := s.db.Collection(outboxColl).InsertMany(ctx, outbox); err != nil {
			return fmt.Errorf("write outbox: %w", err)
		}
	}
	for _, t := range types {
		if _, err := s.history(t).InsertMany(ctx, hist[t]); err != nil {
			return fmt.Errorf("write %s history: %w", t, err)
		}
		if _, err := s.coll(t).InsertMany(ctx, docs[t]); err != nil {
			if mongo.IsDuplicateKeyError(err) {
				err = store.ErrExists
			}
			return fmt.Errorf("write %s: %w", t, err)
		}
	}
	return nil
}

func allCreates(ws []*store.Write) bool {
	for _, w := range ws {
		if w.Prev != "" {
			return false
		}
	}
	return true
}

func (s *Store) writeOne(ctx context.Context, w *store.Write, compensate bool) (err error) {
	undo := func(bool) {}
	if compensate {
		defer s.lock(w.Type, w.ID)()
		undo = func(history bool) { s.undo(w, history) }
	}
	refused := func(e error) error { return fmt.Errorf("write %s/%s: %w", w.Type, w.ID, e) }
	if w.Event != nil {
		if _, err := s.db.Collection(outboxColl).InsertOne(ctx, outboxDoc(w)); err != nil {
			if mongo.IsDuplicateKeyError(err) && w.Prev == "" {
				return refused(store.ErrExists) // another create of this very version
			}
			return fmt.Errorf("write %s/%s outbox: %w", w.Type, w.ID, err)
		}
	}
	if _, err := s.history(w.Type).InsertOne(ctx, historyDoc(w)); err != nil {
		undo(false)
		if mongo.IsDuplicateKeyError(err) && w.Prev == "" {
			return refused(store.ErrExists)
		}
		return fmt.Errorf("write %s/%s history: %w", w.Type, w.ID, err)
	}
	if w.Prev == "" {
		if _, err := s.coll(w.Type).InsertOne(ctx, currentDoc(w)); err != nil {
			undo(true)
			if mongo.IsDuplicateKeyError(err) {
				return refused(store.ErrExists)
			}
			return refused(err)
		}
		return nil
	}
	res, err := s.coll(w.Type).ReplaceOne(ctx, bson.D{{Key: fID, Value: w.ID}, {Key: fVersion, Value: w.Prev}}, currentDoc(w))
	if err != nil {
		undo(true)
		return refused(err)
	}
	if res.MatchedCount == 0 {
		undo(true)
		return refused(store.ErrConflict)
	}
	return nil
}

// undo removes what a refused write had stored: its outbox record and,
// with history set, its history version, so no read returns a version that
// never became current. A crash before this leaves them; the relay drops
// the outbox record once it is old.
func (s *Store) undo(w *store.Write, history bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if history {
		_, _ = s.history(w.Type).DeleteOne(ctx, bson.D{{Key: fID, Value: w.ID + "/" + w.Version}})
	}
	if w.Event != nil {
		_, _ = s.db.Collection(outboxColl).DeleteOne(ctx, bson.D{{Key: "_id", Value: store.OutboxID(w.Type, w.ID, w.Version)}})
	}
}

func historyDoc(w *store.Write) bson.D {
	d := bson.D{{Key: fID, Value: w.ID + "/" + w.Version}, {Key: "id", Value: w.ID}, {Key: fVersion, Value: w.Version},
		{Key: fTime, Value: w.Time}, {Key: fProject, Value: w.Project}, {Key: fDeleted, Value: w.Deleted}}
	if !w.Deleted {
		d = append(d, bson.E{Key: fJSON, Value: string(w.JSON)})
	}
	return d
}

func currentDoc(w *store.Write) bson.D {
	d := bson.D{{Key: fID, Value: w.ID}, {Key: fVersion, Value: w.Version}, {Key: fTime, Value: w.Time},
		{Key: fProject, Value: w.Project}, {Key: fDeleted, Value: w.Deleted}}
	if w.Deleted {
		return d
	}
	d = append(d, bson.E{Key: fJSON, Value: string(w.JSON)})
	for k, v := range w.Fields {
		d = append(d, bson.E{Key: k, Value: v})
	}
	return d
}
