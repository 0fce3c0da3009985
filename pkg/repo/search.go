package repo

import (
	"context"
	"errors"
	"fmt"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhirschema"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/store"
)

// Page is one page of search results.
type Page struct {
	Resources []*Resource
	// Total is the number of matches, or -1 when it was not counted.
	Total int
	// More reports that another page follows.
	More bool
}

// Search runs a parsed query within the scope. Conditions in extra (an
// access policy's) are ANDed with the query.
func (r *Repo) Search(ctx context.Context, sc Scope, typ string, q *search.Query, extra ...store.Cond) (*Page, error) {
	if !fhirschema.IsResourceType(typ) {
		return nil, fhir.BadRequest("Unknown resource type: "+typ, "resourceType")
	}
	sq := &store.Query{
		Filter: append(append(make([]store.Cond, 0, len(q.Filter)+len(extra)), q.Filter...), extra...),
		Sort:   q.Sort, Offset: q.Offset,
		// One extra row tells whether a next page exists without counting.
		Limit: q.Count + 1,
	}
	if !sc.AllProjects {
		sq.Project = sc.Project
	}
	page := &Page{Total: -1}
	if q.Count > 0 && q.Summary != "count" {
		recs, err := r.st.Search(ctx, typ, sq)
		if err != nil {
			return nil, searchError(ctx, "search", typ, err)
		}
		if len(recs) > q.Count {
			page.More = true
			recs = recs[:q.Count]
		}
		page.Resources = make([]*Resource, len(recs))
		for i, rec := range recs {
			page.Resources[i] = fromRecord(rec)
		}
	}
	switch {
	case q.Total == "accurate" || q.Total == "estimate" || q.Count == 0 || q.Summary == "count":
		n, err := r.st.Count(ctx, typ, sq)
		if err != nil {
			return nil, searchError(ctx, "count", typ, err)
		}
		page.Total = n
	case !page.More && (q.Offset == 0 || len(page.Resources) > 0):
		// The last page tells the total for free.
		page.Total = q.Offset + len(page.Resources)
	}
	return page, nil
}

// searchError answers a failed search: 400 for a shape the store refuses
// (search.Parse's bounds should keep any from reaching it), 503 for one cut
// off because its request's time ran out, never a bare 500 for either.
func searchError(ctx context.Context, op, typ string, err error) error {
	switch {
	case errors.Is(err, store.ErrTooComplex):
		return fhir.BadRequest("Search too complex: use fewer values or parameters")
	case ctx.Err() != nil:
		return fhir.Unavailable("Search took too long")
	}
	return fmt.Errorf("%s %s: %w", op, typ, err)
}
