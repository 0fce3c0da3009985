package repo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhirschema"
	"github.com/pinion-health/pinion/pkg/search"
)

// Page is one page of search results.
type Page struct {
	Resources []*Resource
	// Total is the number of matches, or -1 when it was not counted.
	Total int
	// More reports that another page follows.
	More bool
}

// Search runs a parsed query within the scope. Criteria pushed in extra
// (for example an access policy's) are ANDed with the query.
func (r *Repo) Search(ctx context.Context, sc Scope, typ string, q *search.Query, extra ...bson.D) (*Page, error) {
	if !fhirschema.IsResourceType(typ) {
		return nil, fhir.BadRequest("Unknown resource type: "+typ, "resourceType")
	}
	conds := []bson.E{{Key: fDeleted, Value: false}}
	if !sc.SuperAdmin {
		conds = append(conds, bson.E{Key: fProject, Value: sc.Project})
	}
	for _, e := range extra {
		conds = append(conds, e...)
	}
	// Scoped keeps each field once at the top level (a query may name
	// project itself), so the conditions AND as they should.
	filter := q.Scoped(conds...)
	page := &Page{Total: -1}
	if q.Summary == "count" {
		n, err := r.coll(typ).CountDocuments(ctx, filter)
		if err != nil {
			return nil, fmt.Errorf("count %s: %w", typ, err)
		}
		page.Total = int(n)
		return page, nil
	}
	// One extra row tells whether a next page exists without counting.
	fo := options.Find().SetSkip(int64(q.Offset)).SetLimit(int64(q.Count) + 1).
		SetProjection(bson.D{{Key: fVersion, Value: 1}, {Key: fTime, Value: 1}, {Key: fProject, Value: 1}, {Key: fJSON, Value: 1}})
	if len(q.Sort) > 0 {
		fo.SetSort(q.Sort)
	}
	if q.Count > 0 {
		cur, err := r.coll(typ).Find(ctx, filter, fo)
		if err != nil {
			return nil, fmt.Errorf("search %s: %w", typ, err)
		}
		defer cur.Close(ctx)
		for cur.Next(ctx) {
			if len(page.Resources) == q.Count {
				page.More = true
				break
			}
			page.Resources = append(page.Resources, fromDoc(typ, cur.Current))
		}
		if err := cur.Err(); err != nil {
			return nil, fmt.Errorf("search %s: %w", typ, err)
		}
	}
	switch {
	case q.Total == "accurate" || q.Total == "estimate" || q.Count == 0:
		n, err := r.coll(typ).CountDocuments(ctx, filter)
		if err != nil {
			return nil, fmt.Errorf("count %s: %w", typ, err)
		}
		page.Total = int(n)
	case !page.More && (q.Offset == 0 || len(page.Resources) > 0):
		// The last page tells the total for free.
		page.Total = q.Offset + len(page.Resources)
	}
	return page, nil
}

// coreTypes get their indexes at start-up; others on their first write.
var coreTypes = []string{
	"Project", "ProjectMembership", "User", "ClientApplication", "Login", "Bot", "AccessPolicy",
	"Patient", "Practitioner", "RelatedPerson", "Binary", "AuditEvent", "Observation", "JsonWebKey",
}

// EnsureIndexes creates the indexes of the core resource types. It is
// idempotent and runs at every start.
func (r *Repo) EnsureIndexes(ctx context.Context) error {
	for _, t := range coreTypes {
		if err := r.ensureIndexes(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

func (r *Repo) ensureIndexes(ctx context.Context, typ string) error {
	if _, ok := r.indexed.Load(typ); ok {
		return nil
	}
	keys := append([]string{fProject, fTime}, search.IndexKeys(typ)...)
	if err := createIndexes(ctx, r.coll(typ), keys); err != nil {
		return fmt.Errorf("indexes of %s: %w", typ, err)
	}
	if err := createIndexes(ctx, r.history(typ), []string{"id"}); err != nil {
		return fmt.Errorf("history indexes of %s: %w", typ, err)
	}
	r.indexed.Store(typ, struct{}{})
	return nil
}

// createIndexes creates the single-field ascending indexes that do not exist
// yet. Asking for existing ones is avoided on purpose: FerretDB 1.24 fails
// (a server-side panic that drops the connection) when createIndexes names
// indexes it already has — which also happens when two processes starting
// at once create the same index. So a failure is followed by a fresh look:
// indexes another process made count as made.
func createIndexes(ctx context.Context, c *mongo.Collection, keys []string) error {
	var err error
	for attempt := 0; attempt < 4; attempt++ {
		var missing []string
		if missing, err = missingIndexes(ctx, c, keys); err != nil || len(missing) == 0 {
			return err
		}
		models := make([]mongo.IndexModel, len(missing))
		for i, k := range missing {
			models[i] = mongo.IndexModel{Keys: bson.D{{Key: k, Value: 1}}}
		}
		if _, err = c.Indexes().CreateMany(ctx, models); err == nil {
			return nil
		}
		time.Sleep(time.Duration(50*(attempt+1)) * time.Millisecond)
	}
	return err
}

// missingIndexes lists the keys without a single-field index.
func missingIndexes(ctx context.Context, c *mongo.Collection, keys []string) ([]string, error) {
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
	for _, k := range keys {
		if !have[k+"_1"] {
			missing = append(missing, k)
		}
	}
	return missing, nil
}
