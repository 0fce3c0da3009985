package mongostore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/pinion-health/pinion/pkg/store"
)

// Search implements store.Store.
func (s *Store) Search(ctx context.Context, typ string, q *store.Query) ([]*store.Record, error) {
	filter, err := toFilter(q)
	if err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		return nil, nil // a MongoDB limit of 0 means none
	}
	sort := sortOf(q.Sort)
	if len(q.Sort) > 0 && !recordField(q.Sort[0].Field) {
		return s.sortedSearch(ctx, typ, filter, q, sort)
	}
	return s.find(ctx, typ, filter, sort, q.Offset, q.Limit)
}

// find runs one query of a search.
func (s *Store) find(ctx context.Context, typ string, filter any, sort bson.D, offset, limit int) ([]*store.Record, error) {
	fo := options.Find().SetSkip(int64(offset)).SetLimit(int64(limit)).SetProjection(recordFields)
	if len(sort) > 0 {
		fo.SetSort(sort)
	}
	cur, err := s.coll(typ).Find(ctx, filter, fo)
	if err != nil {
		return nil, fmt.Errorf("search %s: %w", typ, searchError(err))
	}
	return collect(ctx, typ, cur)
}

// collect reads a search's records.
func collect(ctx context.Context, typ string, cur *mongo.Cursor) ([]*store.Record, error) {
	defer cur.Close(ctx)
	var out []*store.Record
	for cur.Next(ctx) {
		out = append(out, fromDoc(typ, cur.Current))
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("search %s: %w", typ, searchError(err))
	}
	return out, nil
}

// sortOf is the sort document of sorts, ending with _id so that ties keep
// one order from page to page.
func sortOf(sorts []store.Sort) bson.D {
	var sort bson.D
	hasID := false
	for _, o := range sorts {
		dir := 1
		if o.Desc {
			dir = -1
		}
		hasID = hasID || o.Field == store.FieldID
		sort = append(sort, bson.E{Key: o.Field, Value: dir})
	}
	if len(sorts) > 0 && !hasID {
		sort = append(sort, bson.E{Key: store.FieldID, Value: 1})
	}
	return sort
}

func recordField(f string) bool {
	return f == store.FieldID || f == store.FieldTime || f == store.FieldProject
}

// sortedSearch runs a search whose first sort is by a search field.
// MongoDB sorts a missing field first ascending; store.Sort puts a
// resource without the first sorted field last either way. So the matches
// are found in two parts, each one find: those with the field, then those
// without it. The second part is counted only when the page starts past
// the first's end.
func (s *Store) sortedSearch(ctx context.Context, typ string, filter bson.D, q *store.Query, sort bson.D) ([]*store.Record, error) {
	offset, limit := q.Offset, q.Limit
	var out []*store.Record
	for _, present := range []bool{true, false} {
		part := bson.D{{Key: "$and", Value: bson.A{filter, bson.D{{Key: q.Sort[0].Field, Value: bson.D{{Key: "$exists", Value: present}}}}}}}
		recs, err := s.find(ctx, typ, part, sort, offset, limit)
		if err != nil {
			return nil, err
		}
		out, limit = append(out, recs...), limit-len(recs)
		if limit == 0 {
			break
		}
		if len(recs) > 0 {
			offset = 0
		} else if offset > 0 {
			n, err := s.coll(typ).CountDocuments(ctx, part)
			if err != nil {
				return nil, fmt.Errorf("count %s: %w", typ, searchError(err))
			}
			offset = max(0, offset-int(n))
		}
	}
	return out, nil
}

// Count implements store.Store.
func (s *Store) Count(ctx context.Context, typ string, q *store.Query) (int, error) {
	filter, err := toFilter(q)
	if err != nil {
		return 0, err
	}
	n, err := s.coll(typ).CountDocuments(ctx, filter)
	if err != nil {
		return 0, fmt.Errorf("count %s: %w", typ, searchError(err))
	}
	return int(n), nil
}

// tooComplex are the server's error codes for a search refused for its
// shape: BSONObjectTooLarge (the filter), a regular expression too long,
// and a sort too large for memory without an index.
var tooComplex = []int{10334, 51091, 292}

// searchError marks the errors MongoDB gives for a search's shape as
// store.ErrTooComplex, so they answer 400 rather than 500.
func searchError(err error) error {
	var se mongo.ServerError
	if errors.As(err, &se) {
		for _, code := range tooComplex {
			if se.HasErrorCode(code) {
				return fmt.Errorf("%w: %v", store.ErrTooComplex, err)
			}
		}
	}
	return err
}

// toFilter translates a query. Each field appears once at the top level,
// where an index can serve it; a second condition on one field joins a
// trailing $and (MongoDB would not read a repeated key as AND).
func toFilter(q *store.Query) (bson.D, error) {
	var f topLevel
	f.add(fDeleted, false)
	if q.Project != "" {
		f.add(fProject, q.Project)
	}
	for _, c := range q.Filter {
		if err := store.Check(c); err != nil {
			return nil, err
		}
		f.addCond(c)
	}
	return f.done(), nil
}

type topLevel struct {
	top  bson.D
	more bson.A
}

func (f *topLevel) add(key string, val any) {
	for _, e := range f.top {
		if e.Key == key {
			f.more = append(f.more, bson.D{{Key: key, Value: val}})
			return
		}
	}
	f.top = append(f.top, bson.E{Key: key, Value: val})
}

// addCond adds a condition, lifting an AND's members to the top level.
func (f *topLevel) addCond(c store.Cond) {
	switch c.Op {
	case store.OpAnd:
		for _, s := range c.Sub {
			f.addCond(s)
		}
	case store.OpOr:
		f.more = append(f.more, toBSON(c))
	default:
		f.add(c.Field, operand(c))
	}
}

func (f *topLevel) done() bson.D {
	d := append(bson.D{}, f.top...)
	if len(f.more) > 0 {
		d = append(d, bson.E{Key: "$and", Value: f.more})
	}
	return d
}

// toBSON is one condition as a filter document.
func toBSON(c store.Cond) bson.D {
	switch c.Op {
	case store.OpAnd, store.OpOr:
		op := "$and"
		if c.Op == store.OpOr {
			op = "$or"
		}
		a := make(bson.A, len(c.Sub))
		for i, s := range c.Sub {
			a[i] = toBSON(s)
		}
		return bson.D{{Key: op, Value: a}}
	}
	return bson.D{{Key: c.Field, Value: operand(c)}}
}

// operand is the value side of a field condition.
func operand(c store.Cond) any {
	switch c.Op {
	case store.OpEq:
		if len(c.Values) == 1 {
			return c.Values[0]
		}
		return bson.D{{Key: "$in", Value: bson.A(c.Values)}}
	case store.OpNotIn:
		return bson.D{{Key: "$nin", Value: bson.A(c.Values)}}
	case store.OpPrefix, store.OpContains:
		anchor := ""
		if c.Op == store.OpPrefix {
			anchor = "^"
		}
		if len(c.Values) == 1 {
			return bson.D{{Key: "$regex", Value: anchor + quoteRegex(c.Values[0].(string))}}
		}
		rs := make(bson.A, len(c.Values))
		for i, v := range c.Values {
			rs[i] = bson.Regex{Pattern: anchor + quoteRegex(v.(string))}
		}
		return bson.D{{Key: "$in", Value: rs}}
	case store.OpExists:
		return bson.D{{Key: "$exists", Value: c.Values[0]}}
	}
	op := map[store.Op]string{store.OpLt: "$lt", store.OpLe: "$lte", store.OpGt: "$gt", store.OpGe: "$gte"}[c.Op]
	return bson.D{{Key: op, Value: c.Values[0]}}
}

// quoteRegex escapes s for a regular expression. A NUL byte is written as
// \x00 because BSON stores a pattern NUL-terminated.
func quoteRegex(s string) string {
	return strings.ReplaceAll(regexp.QuoteMeta(s), "\x00", `\x00`)
}

func (s *Store) ensureIndexes(ctx context.Context, typ string) error {
	if _, ok := s.indexed.Load(typ); ok {
		return nil
	}
	// Each index begins with the project, as the SQLite store's do: a
	// search reads its own project's entries only, and an index on
	// (project, field) serves a sort by the field within the project.
	keys := append([]string{fTime}, s.o.IndexKeys(typ)...)
	if err := createIndexes(ctx, s.coll(typ), fProject, keys); err != nil {
		return fmt.Errorf("indexes of %s: %w", typ, err)
	}
	if err := createIndexes(ctx, s.history(typ), "", []string{"id"}); err != nil {
		return fmt.Errorf("history indexes of %s: %w", typ, err)
	}
	s.indexed.Store(typ, struct{}{})
	return nil
}

// createIndexes creates the ascending indexes, on lead and then each key
// (on the key alone without a lead), that do not exist
// yet. Asking for existing ones is avoided on purpose: FerretDB 1.24 fails
// (a server-side panic that drops the connection) when createIndexes names
// indexes it already has — which also happens when two processes starting
// at once create the same index. So a failure is followed by a fresh look:
// indexes another process made count as made.
func createIndexes(ctx context.Context, c *mongo.Collection, lead string, keys []string) error {
	var err error
	for attempt := 0; attempt < 4; attempt++ {
		var missing []string
		if missing, err = missingIndexes(ctx, c, lead, keys); err != nil || len(missing) == 0 {
			return err
		}
		models := make([]mongo.IndexModel, len(missing))
		for i, k := range missing {
			models[i] = mongo.IndexModel{Keys: indexKeys(lead, k)}
		}
		if _, err = c.Indexes().CreateMany(ctx, models); err == nil {
			return nil
		}
		time.Sleep(time.Duration(50*(attempt+1)) * time.Millisecond)
	}
	return err
}

// indexKeys is the index on key, after lead when there is one.
func indexKeys(lead, key string) bson.D {
	if lead == "" {
		return bson.D{{Key: key, Value: 1}}
	}
	return bson.D{{Key: lead, Value: 1}, {Key: key, Value: 1}}
}

// missingIndexes lists the keys without their index (MongoDB names an
// index by its fields and directions: project_1_ts_1).
func missingIndexes(ctx context.Context, c *mongo.Collection, lead string, keys []string) ([]string, error) {
	have := map[string]bool{}
	specs, err := c.Indexes().ListSpecifications(ctx)
	var ce mongo.CommandError
	if errors.As(err, &ce) && ce.Code == 26 { // NamespaceNotFound: a new collection
		err = nil
	}
	if err != nil {
		return nil, err
	}
	for _, s := range specs {
		have[s.Name] = true
	}
	var missing []string
	prefix := ""
	if lead != "" {
		prefix = lead + "_1_"
	}
	for _, k := range keys {
		if !have[prefix+k+"_1"] {
			missing = append(missing, k)
		}
	}
	return missing, nil
}
