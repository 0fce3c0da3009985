package repo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

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
	if typ == "AuditEvent" {
		return r.searchAudit(ctx, sc, q, extra)
	}
	return r.searchStore(ctx, sc, typ, q, extra)
}

// searchStore is Search of the resources the store holds.
func (r *Repo) searchStore(ctx context.Context, sc Scope, typ string, q *search.Query, extra []store.Cond) (*Page, error) {
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

// searchAudit is Search of AuditEvents: the trail's events (trail.go)
// and the AuditEvents stored as resources, one result. The trail's come
// first, newest first, then the others in the query's order; sorted by
// id (an export's walk), the two are merged in id order.
func (r *Repo) searchAudit(ctx context.Context, sc Scope, q *search.Query, extra []store.Cond) (*Page, error) {
	filter := append(append(make([]store.Cond, 0, len(q.Filter)+len(extra)), q.Filter...), extra...)
	// An estimate does not read the whole trail: it is given only when
	// the page read to the trail's end anyway.
	wantTotal := q.Total == "accurate" || q.Count == 0 || q.Summary == "count"
	if len(q.Sort) > 0 && q.Sort[0].Field == store.FieldID && !q.Sort[0].Desc {
		return r.searchAuditByID(ctx, sc, q, extra, filter, wantTotal)
	}
	limit := q.Count + 1 // one more tells whether a next page exists
	if wantTotal {
		limit = -1 // every match is counted
	}
	trail, met, err := r.trailMatches(ctx, sc, filter, false, q.Offset, limit)
	if err != nil {
		return nil, err
	}
	page := &Page{Total: -1}
	if met < 0 {
		// The page is the trail's, and more follow.
		page.Resources, page.More = trail[:q.Count], true
		return page, nil
	}
	if len(trail) > q.Count {
		trail, page.More = trail[:q.Count], true
	}
	// The trail was read to its end: the stored ones follow it, the
	// first of them at the offset past the trail's matches.
	rest := *q
	rest.Offset = max(0, q.Offset-met)
	need := q.Count - len(trail)
	rest.Count = max(need, 1) // at least one, to tell whether any follows
	stored, err := r.searchStore(ctx, sc, "AuditEvent", &rest, extra)
	if err != nil {
		return nil, err
	}
	switch {
	case need == 0:
		page.More = page.More || len(stored.Resources) > 0 || stored.More
	default:
		page.More = page.More || stored.More
		page.Resources = append(trail, stored.Resources...)
	}
	if need == 0 {
		page.Resources = trail
	}
	if stored.Total >= 0 {
		page.Total = met + stored.Total
	}
	if q.Count == 0 || q.Summary == "count" {
		page.Resources, page.More = nil, false
	}
	return page, nil
}

// searchAuditByID merges the trail's matches and the stored ones in id
// order, for a walk that pages with _id greater than the last it saw.
func (r *Repo) searchAuditByID(ctx context.Context, sc Scope, q *search.Query, extra, filter []store.Cond, wantTotal bool) (*Page, error) {
	need := q.Offset + q.Count + 1
	if wantTotal {
		need = -1
	}
	trail, met, err := r.trailMatches(ctx, sc, filter, true, 0, need)
	if err != nil {
		return nil, err
	}
	all := *q
	all.Offset, all.Count = 0, q.Offset+q.Count+1
	if wantTotal {
		all.Total = "accurate"
	}
	stored, err := r.searchStore(ctx, sc, "AuditEvent", &all, extra)
	if err != nil {
		return nil, err
	}
	merged := append(trail, stored.Resources...)
	slices.SortFunc(merged, func(a, b *Resource) int { return strings.Compare(a.ID, b.ID) })
	page := &Page{Total: -1}
	if stored.Total >= 0 && met >= 0 {
		page.Total = met + stored.Total
	}
	if q.Offset < len(merged) {
		merged = merged[q.Offset:]
	} else {
		merged = nil
	}
	if len(merged) > q.Count {
		merged, page.More = merged[:q.Count], true
	}
	page.More = page.More || stored.More || met < 0
	page.Resources = merged
	return page, nil
}
