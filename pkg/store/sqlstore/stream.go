package sqlstore

import (
	"context"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
)

// Searches that stop at the page.
//
// A page of 20 must cost the same whether 200 or 200,000 resources match,
// and whatever other projects hold. Gathering every match and then sorting
// them (what a rid IN (...) list does) costs what the matches number; so
// where it can, a search walks one index in an order it may return, tests
// each resource it meets, and stops when the page is full:
//
//   - unsorted, with a condition an index range answers (a driver: one
//     field equal to a text, starting with one, or between bounds): the
//     search table's rows of that range, in their order (key, project,
//     value, rid). With several drivers, the narrowest by a capped count.
//   - sorted by one search field: that field's rows in value order, then
//     the resources without the field (missing sorts last either way).
//   - sorted by _lastUpdated: the resources_list index.
//
// Every other condition is then a probe of the resource's own rows
// (search_rid). A search with no driver (:missing, :not, a :contains with
// no trigrams to look up: see search.gramConds) walks
// resources_list the same way (generalSQL). A walk is the wrong plan when
// few resources match: it meets many that fail. So a sorted search whose
// narrowest driver matches fewer than manyMatches gathers and sorts those
// few instead, unless they are most of what the walk would meet
// (walkPays).
//
// A search within a project walks that project's rows only: the search
// table's key starts with (key, project), and resources_list with (type,
// project). A search in every project (the memberships of a person at
// sign-in) walks a key's rows in every project: see docs/decisions/api.md.

// manyMatches is where a walk in order beats gathering and sorting: below
// it, sorting the matches costs under a few milliseconds.
const manyMatches = 1000

// A driver is the index range a stream walks: one search field's values
// equal to a text, starting with one, beyond a number, or within an
// instant's bounds, taken from the filter's top-level conditions, which
// the walk then answers.
type driver struct {
	field   string
	conds   []int // in flatten(q.Filter)
	rank    int   // equal 0, prefix 1, range 2: the likelier narrow first
	instant bool  // one value to a resource, so no resource meets twice
}

// flatten lifts the members of top-level ANDs to the top level.
func flatten(cs []store.Cond) []store.Cond {
	var out []store.Cond
	for _, c := range cs {
		if c.Op == store.OpAnd {
			out = append(out, flatten(c.Sub)...)
		} else {
			out = append(out, c)
		}
	}
	return out
}

// drivers lists q's candidate drivers, none when an id condition (the
// narrowest of all, through (type, id)) is among them.
func drivers(q *store.Query) []driver {
	flat := flatten(q.Filter)
	var out []driver
	ranges := map[string]int{} // instant field → index in out
	for i, c := range flat {
		if exactField(c.Field) {
			continue // kept by resource, not by value: never walked
		}
		if recordField(c.Field) {
			if c.Field == store.FieldID && (c.Op == store.OpEq || c.Op == store.OpPrefix) {
				return nil
			}
			continue
		}
		switch c.Op {
		case store.OpEq, store.OpPrefix:
			if len(c.Values) != 1 {
				continue
			}
			if _, ok := c.Values[0].(string); !ok {
				continue
			}
			rank := 0
			if c.Op == store.OpPrefix {
				rank = 1
			}
			out = append(out, driver{field: c.Field, conds: []int{i}, rank: rank})
		case store.OpLt, store.OpLe, store.OpGt, store.OpGe:
			switch c.Values[0].(type) {
			case float64:
				// Numbers may be several to a resource, and each
				// comparison may be met by another of them: one
				// comparison a range.
				out = append(out, driver{field: c.Field, conds: []int{i}, rank: 2})
			case time.Time:
				// An instant is one to a resource (store.Write): its
				// bounds make one range, [pl, ph] for a date's eq.
				if j, ok := ranges[c.Field]; ok {
					out[j].conds = append(out[j].conds, i)
					continue
				}
				ranges[c.Field] = len(out)
				out = append(out, driver{field: c.Field, conds: []int{i}, rank: 2, instant: true})
			}
		}
	}
	// The likelier narrow first: searchSQL's plan tests take the first.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].rank < out[j-1].rank; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// narrowest picks the driver whose range holds the fewest rows, counted up
// to manyMatches each.
func (s *Store) narrowest(ctx context.Context, typ string, q *store.Query, ds []driver) driver {
	if len(ds) == 1 {
		return ds[0]
	}
	best, least := ds[0], manyMatches+1
	for _, d := range ds {
		if n := s.estimate(ctx, typ, q, d); n < least {
			best, least = d, n
		}
	}
	return best
}

// fewest is the smallest estimate among ds (manyMatches when there is no
// driver or the count fails: a walk is then as good as any plan).
func (s *Store) fewest(ctx context.Context, typ string, q *store.Query, ds []driver) int {
	least := manyMatches
	for _, d := range ds {
		least = min(least, s.estimate(ctx, typ, q, d))
	}
	return least
}

// estimate counts d's rows in q's project, at most manyMatches.
func (s *Store) estimate(ctx context.Context, typ string, q *store.Query, d driver) int {
	b := &builder{typ: typ, project: q.Project}
	b.w("SELECT count(*) FROM (SELECT 1 FROM search s WHERE ")
	b.driverRange(d, flatten(q.Filter))
	b.w(" LIMIT ")
	b.arg(manyMatches)
	b.w(")")
	n, err := s.count(ctx, b.sb.String(), b.args)
	if err != nil {
		return manyMatches
	}
	return n
}

// driverRange writes d's range of the search table s, in the project.
func (b *builder) driverRange(d driver, flat []store.Cond) {
	b.w("s.key = ")
	b.name(b.typ + "." + d.field)
	if b.project != "" {
		b.w(" AND s.project = ")
		b.name(b.project)
	}
	if d.instant {
		b.w(" AND ")
		b.instants("s.value", d, flat)
		return
	}
	b.w(" AND ")
	b.values("s.value", flat[d.conds[0]])
}

// instants writes the tightest bounds of an instant driver's comparisons,
// so that SQLite walks [lower, upper] rather than one side of it.
func (b *builder) instants(col string, d driver, flat []store.Cond) {
	var lo, hi *int64
	var loOp, hiOp string
	for _, i := range d.conds {
		c := flat[i]
		op, bound := timeBound(c.Op, c.Values[0].(time.Time))
		switch c.Op {
		case store.OpGt, store.OpGe:
			if lo == nil || bound > *lo || bound == *lo && c.Op == store.OpGt {
				lo, loOp = &bound, op
			}
		default:
			if hi == nil || bound < *hi || bound == *hi && c.Op == store.OpLt {
				hi, hiOp = &bound, op
			}
		}
	}
	if lo != nil {
		b.w(col, loOp)
		b.arg(*lo)
		b.w(" AND ")
	}
	if hi != nil {
		b.w(col, hiOp)
		b.arg(*hi)
	} else {
		b.w(col, " < ''") // numbers only: stop before the text
	}
	b.w(" AND typeof(", col, ") = 'integer'")
}

// streamSQL is an unsorted search walking d's range: each resource once,
// at its smallest value in the range, in the index's order.
func streamSQL(typ string, q *store.Query, d driver) (string, []any) {
	flat := flatten(q.Filter)
	b := &builder{typ: typ, project: q.Project}
	b.w("SELECT ", recordColumns, " FROM search s JOIN resources r ON r.rid = s.rid WHERE ")
	b.driverRange(d, flat)
	if d.rank > 0 && !d.instant {
		// A resource may have several values in a range (a text equals
		// a value once: the key holds the value).
		b.w(" AND NOT EXISTS (SELECT 1 FROM search d WHERE d.rid = s.rid AND d.key = s.key AND ")
		b.values("d.value", flat[d.conds[0]])
		b.w(" AND d.value < s.value)")
	}
	b.scope(typ, q.Project)
	b.probes(flat, d.conds)
	if q.Project != "" {
		b.w(" ORDER BY s.value, s.rid")
	} else {
		b.w(" ORDER BY s.project, s.value, s.rid")
	}
	b.page(q)
	return b.sb.String(), b.args
}

// scope tests the joined resource r: its type, not deleted, the project.
// The unary + keeps SQLite on the walk rather than on resources_list.
func (b *builder) scope(typ, project string) {
	b.w(" AND +r.type = ")
	b.arg(typ)
	b.w(" AND +r.deleted = 0")
	if project != "" {
		b.w(" AND +r.project = ")
		b.arg(project)
	}
}

// probes writes every condition of flat but those a walk answers.
func (b *builder) probes(flat []store.Cond, answered []int) {
	for i, c := range flat {
		skip := false
		for _, a := range answered {
			skip = skip || a == i
		}
		if !skip {
			b.w(" AND ")
			b.probe(c)
		}
	}
}

// ordered reports whether q's page is the start of a walk in its sort
// order: one sort, by a search field or by time, within a project.
func ordered(q *store.Query) bool {
	if q.Project == "" || len(q.Sort) != 1 {
		return false
	}
	f := q.Sort[0].Field
	return f == store.FieldTime || !recordField(f)
}

// walkSQL is a search sorted by time that walks resources_list, testing
// each resource.
func walkSQL(typ string, q *store.Query) (string, []any) {
	b := &builder{typ: typ, project: q.Project}
	b.w("SELECT ", recordColumns, " FROM resources r WHERE r.type = ")
	b.arg(typ)
	b.w(" AND r.deleted = 0 AND r.project = ")
	b.arg(q.Project)
	b.probes(flatten(q.Filter), nil)
	b.order(q.Sort, false)
	b.page(q)
	return b.sb.String(), b.args
}

// walkShare is the share of the sort's index rows (one in walkShare) that
// the matches must be for a walk to beat gathering and sorting them.
const walkShare = 5

// walkPays reports whether a sorted search should walk the sort's index,
// testing each resource, rather than gather its least matches (the
// narrowest driver's capped count) and sort them. Many matches, a walk.
// Fewer: the walk meets about walkShare resources per one it returns when
// the matches are one in walkShare of the sort's rows in the project
// (gender=female in a small project: some forty met for a page, against
// five hundred gathered and sorted). The choice depends on the query and
// the data, not the page asked for, so that every page of a query comes
// from one plan, in one order.
func (s *Store) walkPays(ctx context.Context, typ string, q *store.Query, least int) bool {
	if least >= manyMatches {
		return true
	}
	if least == 0 {
		return false
	}
	limit := walkShare * least
	b := &builder{typ: typ, project: q.Project}
	if f := q.Sort[0].Field; f == store.FieldTime {
		b.w("SELECT count(*) FROM (SELECT 1 FROM resources r WHERE r.type = ")
		b.arg(typ)
		b.w(" AND r.project = ")
		b.arg(q.Project)
		b.w(" AND r.deleted = 0")
	} else {
		b.w("SELECT count(*) FROM (SELECT 1 FROM search s WHERE s.key = ")
		b.name(typ + "." + f)
		b.w(" AND s.project = ")
		b.name(q.Project)
	}
	b.w(" LIMIT ")
	b.arg(limit)
	b.w(")")
	rows, err := s.count(ctx, b.sb.String(), b.args)
	return err == nil && rows < limit
}

// sortedSQL is one part of a search sorted by one search field: the
// resources with the field (present), each at its smallest value (largest,
// descending), in value order; or those without it, in resources_list
// order. count counts the part instead.
func sortedSQL(typ string, q *store.Query, present, count bool) (string, []any) {
	sort := q.Sort[0]
	key := typ + "." + sort.Field
	b := &builder{typ: typ, project: q.Project}
	cols := recordColumns
	if count {
		cols = "count(*)"
	}
	if !present {
		b.w("SELECT ", cols, " FROM resources r WHERE r.type = ")
		b.arg(typ)
		b.w(" AND r.deleted = 0 AND r.project = ")
		b.arg(q.Project)
		b.w(" AND NOT EXISTS (SELECT 1 FROM search x WHERE x.rid = r.rid AND x.key = ")
		b.name(key)
		b.w(")")
		b.probes(flatten(q.Filter), nil)
		if !count {
			b.w(" ORDER BY r.ts, r.rid")
			b.page(q)
		}
		return b.sb.String(), b.args
	}
	cmp, dir := " < ", ""
	if sort.Desc {
		cmp, dir = " > ", " DESC"
	}
	b.w("SELECT ", cols, " FROM search s JOIN resources r ON r.rid = s.rid WHERE s.key = ")
	b.name(key)
	b.w(" AND s.project = ")
	b.name(q.Project)
	b.w(" AND NOT EXISTS (SELECT 1 FROM search d WHERE d.rid = s.rid AND d.key = s.key AND d.value", cmp, "s.value)")
	b.scope(typ, q.Project)
	b.probes(flatten(q.Filter), nil)
	if !count {
		b.w(" ORDER BY s.value", dir, ", s.rid", dir)
		b.page(q)
	}
	return b.sb.String(), b.args
}

// sortedSearch pages through the present part, then the missing part.
func (s *Store) sortedSearch(ctx context.Context, typ string, q *store.Query) ([]*store.Record, error) {
	text, args := sortedSQL(typ, q, true, false)
	recs, err := s.records(ctx, text, args)
	if err != nil || q.Limit > 0 && len(recs) >= q.Limit {
		return recs, err
	}
	// The page reaches past the resources with the field.
	rest := *q
	rest.Offset = 0
	if len(recs) == 0 && q.Offset > 0 {
		text, args := sortedSQL(typ, q, true, true)
		n, err := s.count(ctx, text, args)
		if err != nil {
			return nil, err
		}
		rest.Offset = max(0, q.Offset-n)
	}
	if q.Limit > 0 {
		rest.Limit = q.Limit - len(recs)
	}
	text, args = sortedSQL(typ, &rest, false, false)
	more, err := s.records(ctx, text, args)
	return append(recs, more...), err
}
