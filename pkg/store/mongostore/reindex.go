package mongostore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/pinion-health/pinion/pkg/store"
)

const reindexBatch = 200

// Reindex implements store.Store. Each document's search fields are
// updated on the condition that its version is still the one read: a write
// racing the reindex wrote current fields of its own. The version is kept in the meta
// collection under "fields:" + typ. Two processes reindexing at once do
// the same work twice, harmlessly.
func (s *Store) Reindex(ctx context.Context, typ string, version int, fields store.Refields, progress func(done int)) (int, error) {
	key := "fields:" + typ
	meta := s.db.Collection(metaColl)
	var m struct {
		Version int `bson:"version"`
	}
	switch err := meta.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&m); {
	case errors.Is(err, mongo.ErrNoDocuments):
		m.Version = 1
	case err != nil:
		return 0, fmt.Errorf("reindex %s: %w", typ, err)
	}
	if m.Version >= version {
		return 0, nil
	}
	if err := s.ensureIndexes(ctx, typ); err != nil {
		return 0, err
	}
	done := 0
	filter := bson.D{{Key: fDeleted, Value: false}}
	for {
		cur, err := s.coll(typ).Find(ctx, filter, options.Find().SetSort(bson.D{{Key: fID, Value: 1}}).SetLimit(reindexBatch))
		if err != nil {
			return done, fmt.Errorf("reindex %s: %w", typ, err)
		}
		var docs []bson.D
		if err := cur.All(ctx, &docs); err != nil {
			return done, fmt.Errorf("reindex %s: %w", typ, err)
		}
		for _, d := range docs {
			if err := s.refield(ctx, typ, d, fields); err != nil {
				return done, err
			}
		}
		done += len(docs)
		if len(docs) < reindexBatch {
			break
		}
		filter = bson.D{{Key: fDeleted, Value: false}, {Key: fID, Value: bson.D{{Key: "$gt", Value: lookup(docs[len(docs)-1], fID)}}}}
		if progress != nil {
			progress(done)
		}
	}
	// $max: a process still on an older version never lowers it.
	if err := upsert(func() error {
		_, err := meta.UpdateOne(ctx, bson.D{{Key: "_id", Value: key}},
			bson.D{{Key: "$max", Value: bson.D{{Key: "version", Value: version}}}}, options.UpdateOne().SetUpsert(true))
		return err
	}); err != nil {
		return done, fmt.Errorf("reindex %s: %w", typ, err)
	}
	if progress != nil {
		progress(done)
	}
	return done, nil
}

// refield sets one current document's search fields to those fields
// computes from its JSON, if its version is still the one read. It
// updates the fields alone, never the document, and holds the resource's
// lock as a write does: FerretDB's conditional update is not atomic.
func (s *Store) refield(ctx context.Context, typ string, d bson.D, fields store.Refields) error {
	id := lookup(d, fID)
	j, _ := lookup(d, fJSON).(string)
	f, err := fields([]byte(j))
	if err != nil {
		// One resource's fields must not keep the store from starting: it
		// keeps the fields it had.
		s.o.Log.Warn("mongostore: reindex skipped a resource", "type", typ, "id", id, "err", err)
		return nil
	}
	set, unset := bson.D{}, bson.D{}
	for k, v := range f {
		set = append(set, bson.E{Key: k, Value: v})
	}
	for _, e := range d {
		if _, ok := f[e.Key]; !ok && strings.HasPrefix(e.Key, "s_") {
			unset = append(unset, bson.E{Key: e.Key, Value: ""})
		}
	}
	update := bson.D{}
	if len(set) > 0 {
		update = append(update, bson.E{Key: "$set", Value: set})
	}
	if len(unset) > 0 {
		update = append(update, bson.E{Key: "$unset", Value: unset})
	}
	if len(update) == 0 {
		return nil
	}
	if sid, ok := id.(string); ok {
		defer s.lock(typ, sid)()
	}
	if _, err := s.coll(typ).UpdateOne(ctx, bson.D{{Key: fID, Value: id}, {Key: fVersion, Value: lookup(d, fVersion)}}, update); err != nil {
		return fmt.Errorf("reindex %s/%v: %w", typ, id, err)
	}
	return nil
}

// lookup is the value of key in d, or nil.
func lookup(d bson.D, key string) any {
	for _, e := range d {
		if e.Key == key {
			return e.Value
		}
	}
	return nil
}
