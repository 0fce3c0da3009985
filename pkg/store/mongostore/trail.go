package mongostore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/pinion-health/pinion/pkg/store"
)

// The audit trail's blocks (store.TrailBlock), a document each in
// audit_trail: its events one JSON array (a string, so that the bytes a
// digest covers are kept exactly), its keys an array. The _id is the
// project and the block's first place: two writers that both take a
// place collide on it, whether or not the server runs transactions.

type trailDoc struct {
	ID      string    `bson:"_id"`
	Project string    `bson:"project"`
	First   int64     `bson:"first"`
	Last    int64     `bson:"last"`
	From    time.Time `bson:"from"`
	To      time.Time `bson:"to"`
	Events  []byte    `bson:"events"` // store.EncodeTrail
	Keys    []string  `bson:"keys"`
}

func trailID(project string, first int64) string { return project + ":" + strconv.FormatInt(first, 10) }

// trailIndexed marks the indexes of audit_trail as ensured.
const trailIndexed = "\x00" + trailColl

// ensureTrailIndexes makes the trail's indexes once per process: a
// project's blocks in place order, and by key.
func (s *Store) ensureTrailIndexes(ctx context.Context) error {
	if _, ok := s.indexed.Load(trailIndexed); ok {
		return nil
	}
	// createIndexes asks only for those missing: FerretDB fails when asked
	// for an index it has.
	if err := createIndexes(ctx, s.db.Collection(trailColl), "project", []string{"first", "keys"}); err != nil {
		return fmt.Errorf("mongostore: audit trail indexes: %w", err)
	}
	s.indexed.Store(trailIndexed, struct{}{})
	return nil
}

// AppendTrail stores b after the project's last block.
func (s *Store) AppendTrail(ctx context.Context, b *store.TrailBlock) error {
	if len(b.Events) == 0 {
		return errors.New("mongostore: an empty trail block")
	}
	if err := s.ensureTrailIndexes(ctx); err != nil {
		return err
	}
	last, err := s.LastTrailBlock(ctx, b.Project)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// Empty: a first block, or the first after retention removed all.
	case err != nil:
		return err
	case b.First <= last.Last():
		return fmt.Errorf("%w: trail place %d of %q", store.ErrExists, b.First, b.Project)
	case b.First != last.Last()+1:
		return fmt.Errorf("%w: trail of %q ends at %d, not %d", store.ErrConflict, b.Project, last.Last(), b.First-1)
	}
	keys := b.Keys
	if keys == nil {
		keys = []string{}
	}
	_, err = s.db.Collection(trailColl).InsertOne(ctx, trailDoc{ID: trailID(b.Project, b.First), Project: b.Project, First: b.First,
		Last: b.Last(), From: b.From.UTC(), To: b.To.UTC(), Events: store.EncodeTrail(b.Events), Keys: keys})
	if mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("%w: trail place %d of %q", store.ErrExists, b.First, b.Project)
	}
	return err
}

func (d *trailDoc) block() (*store.TrailBlock, error) {
	events, err := store.DecodeTrail(d.Events)
	if err != nil {
		return nil, fmt.Errorf("mongostore: trail block %s: %w", d.ID, err)
	}
	return &store.TrailBlock{Project: d.Project, First: d.First, Keys: d.Keys, From: d.From.UTC(), To: d.To.UTC(), Events: events}, nil
}

func (s *Store) oneBlock(ctx context.Context, filter bson.D) (*store.TrailBlock, error) {
	var d trailDoc
	err := s.db.Collection(trailColl).FindOne(ctx, filter, options.FindOne().SetSort(bson.D{{Key: "first", Value: -1}})).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("%w: trail block", store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return d.block()
}

// TrailBlock returns the block holding seq (see store.Store).
func (s *Store) TrailBlock(ctx context.Context, project string, seq int64) (*store.TrailBlock, error) {
	return s.oneBlock(ctx, bson.D{{Key: "project", Value: project}, {Key: "first", Value: bson.D{{Key: "$lte", Value: seq}}}})
}

// LastTrailBlock returns the project's last block.
func (s *Store) LastTrailBlock(ctx context.Context, project string) (*store.TrailBlock, error) {
	return s.oneBlock(ctx, bson.D{{Key: "project", Value: project}})
}

// TrailBlocks lists a project's blocks, as q asks.
func (s *Store) TrailBlocks(ctx context.Context, q *store.TrailQuery) ([]*store.TrailBlock, error) {
	filter := bson.D{{Key: "project", Value: q.Project}}
	sort := bson.D{{Key: "first", Value: -1}}
	if q.Ascending {
		sort = bson.D{{Key: "first", Value: 1}}
	}
	if !q.From.IsZero() {
		filter = append(filter, bson.E{Key: "to", Value: bson.D{{Key: "$gte", Value: q.From.UTC()}}})
	}
	if !q.To.IsZero() {
		filter = append(filter, bson.E{Key: "from", Value: bson.D{{Key: "$lte", Value: q.To.UTC()}}})
	}
	if q.Before > 0 {
		filter = append(filter, bson.E{Key: "first", Value: bson.D{{Key: "$lt", Value: q.Before}}})
	}
	if q.After > 0 {
		// From the block that holds the place after, through the index on
		// (project, first).
		from := int64(0)
		if b, err := s.TrailBlock(ctx, q.Project, q.After+1); err == nil {
			from = b.First
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		filter = append(filter, bson.E{Key: "first", Value: bson.D{{Key: "$gte", Value: from}}},
			bson.E{Key: "last", Value: bson.D{{Key: "$gt", Value: q.After}}})
	}
	if len(q.Keys) > 0 {
		filter = append(filter, bson.E{Key: "keys", Value: bson.D{{Key: "$all", Value: q.Keys}}})
	}
	o := options.Find().SetSort(sort)
	if q.Limit > 0 {
		o.SetLimit(int64(q.Limit))
	}
	cur, err := s.db.Collection(trailColl).Find(ctx, filter, o)
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	var out []*store.TrailBlock
	for cur.Next(ctx) {
		var d trailDoc
		if err := cur.Decode(&d); err != nil {
			return nil, err
		}
		b, err := d.block()
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, cur.Err()
}

// TrailProjects lists the projects with a trail.
func (s *Store) TrailProjects(ctx context.Context) ([]string, error) {
	cur, err := s.db.Collection(trailColl).Aggregate(ctx, mongo.Pipeline{
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$project"}}}},
		{{Key: "$sort", Value: bson.D{{Key: "_id", Value: 1}}}},
	})
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	var out []string
	for cur.Next(ctx) {
		var d struct {
			ID string `bson:"_id"`
		}
		if err := cur.Decode(&d); err != nil {
			return nil, err
		}
		out = append(out, d.ID)
	}
	return out, cur.Err()
}

// PurgeTrail removes the events at or before through. The block that
// holds it is cut by writing its rest as a new block first, then deleting
// it: a crash between leaves both, the old one only before through
// (which nobody reads), and the next purge finishes.
func (s *Store) PurgeTrail(ctx context.Context, project string, through int64) (int, error) {
	c := s.db.Collection(trailColl)
	r, err := c.DeleteMany(ctx, bson.D{{Key: "project", Value: project}, {Key: "last", Value: bson.D{{Key: "$lte", Value: through}}}})
	if err != nil {
		return 0, err
	}
	n := int(r.DeletedCount)
	var d trailDoc
	err = c.FindOne(ctx, bson.D{{Key: "project", Value: project}, {Key: "first", Value: bson.D{{Key: "$lte", Value: through}}},
		{Key: "last", Value: bson.D{{Key: "$gt", Value: through}}}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return n, nil
	}
	if err != nil {
		return n, err
	}
	b, err := d.block()
	if err != nil {
		return n, err
	}
	rest := d
	rest.ID, rest.First = trailID(project, through+1), through+1
	rest.Events = store.EncodeTrail(b.Events[through-d.First+1:])
	if _, err := c.InsertOne(ctx, rest); err != nil && !mongo.IsDuplicateKeyError(err) {
		return n, err
	}
	if _, err := c.DeleteOne(ctx, bson.D{{Key: "_id", Value: d.ID}}); err != nil {
		return n, err
	}
	return n + 1, nil
}
