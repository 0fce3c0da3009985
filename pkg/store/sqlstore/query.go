package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/pinion-health/pinion/pkg/store"
)

// Search returns at most q.Limit records from q.Offset on (Limit 0: no
// limit), in q.Sort order, else in an order that stays the same from page
// to page. stream.go says how a page is found without gathering every
// match.
func (s *Store) Search(ctx context.Context, typ string, q *store.Query) ([]*store.Record, error) {
	if q == nil {
		q = &store.Query{}
	}
	if err := checkQuery(q); err != nil {
		return nil, err
	}
	ds := drivers(q)
	var text string
	var args []any
	switch {
	case len(q.Sort) == 0 && len(ds) > 0:
		text, args = streamSQL(typ, q, s.narrowest(ctx, typ, q, ds))
	case ordered(q) && s.walkPays(ctx, typ, q, s.fewest(ctx, typ, q, ds)):
		if q.Sort[0].Field != store.FieldTime {
			return s.sortedSearch(ctx, typ, q)
		}
		text, args = walkSQL(typ, q)
	default:
		text, args = generalSQL(typ, q, false)
	}
	return s.records(ctx, text, args)
}

// records runs a statement that selects recordColumns.
func (s *Store) records(ctx context.Context, text string, args []any) ([]*store.Record, error) {
	rows, err := s.query(ctx, text, args)
	if err != nil {
		return nil, searchError(err)
	}
	recs, err := collect(rows)
	return recs, searchError(err)
}

// searchError marks the errors SQLite gives for a statement's shape as
// store.ErrTooComplex, so they answer 400 rather than 500. A statement cut
// off by its context comes back as the context's error.
func searchError(err error) error {
	var e *sqlite.Error
	if err == nil || !errors.As(err, &e) {
		return err
	}
	switch e.Code() & 0xff {
	case sqlite3.SQLITE_TOOBIG:
		return fmt.Errorf("%w: %v", store.ErrTooComplex, err)
	case sqlite3.SQLITE_ERROR:
		msg := e.Error()
		for _, shape := range []string{"Expression tree is too large", "too many SQL variables",
			"LIKE or GLOB pattern too complex", "too many terms in compound SELECT", "at most 64 tables in a join",
			"too many arguments on function", "parser stack overflow"} {
			if strings.Contains(msg, shape) {
				return fmt.Errorf("%w: %v", store.ErrTooComplex, err)
			}
		}
	}
	return err
}

// query runs a statement built for this call, prepared once per shape.
func (s *Store) query(ctx context.Context, text string, args []any) (*sql.Rows, error) {
	if st := s.queries.get(ctx, text); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return s.rdb.QueryContext(ctx, text, args...)
}

// Count counts what Search would find without paging.
func (s *Store) Count(ctx context.Context, typ string, q *store.Query) (int, error) {
	if q == nil {
		q = &store.Query{}
	}
	if err := checkQuery(q); err != nil {
		return 0, err
	}
	text, args := generalSQL(typ, q, true)
	return s.count(ctx, text, args)
}

func (s *Store) count(ctx context.Context, text string, args []any) (int, error) {
	rows, err := s.query(ctx, text, args)
	if err != nil {
		return 0, searchError(err)
	}
	defer rows.Close()
	var n int
	if rows.Next() {
		err = rows.Scan(&n)
	}
	return n, searchError(errors.Join(err, rows.Err()))
}

// builder writes SQL with its arguments; every value is bound, never
// spliced in.
type builder struct {
	typ     string
	project string
	sb      strings.Builder
	args    []any
}

func (b *builder) w(s ...string) {
	for _, x := range s {
		b.sb.WriteString(x)
	}
}

func (b *builder) arg(v any) {
	b.sb.WriteByte('?')
	b.args = append(b.args, v)
}

// name binds a key or a project of the search table, which keeps them as
// their ids in names. SQLite runs the subquery once per statement, and a
// name never stored is NULL, which equals nothing.
func (b *builder) name(s string) {
	b.w("(SELECT id FROM names WHERE name = ")
	b.arg(s)
	b.w(")")
}

// list writes "(?, ?, ...)".
func (b *builder) list(vs []any) {
	b.w("(")
	for i, v := range vs {
		if i > 0 {
			b.w(", ")
		}
		b.arg(v)
	}
	b.w(")")
}

const recordColumns = "r.type, r.id, r.version, r.ts, r.project, r.deleted, r.json"

// checkQuery refuses a query no store could answer.
func checkQuery(q *store.Query) error {
	for _, c := range q.Filter {
		if err := store.Check(c); err != nil {
			return err
		}
	}
	for _, s := range q.Sort {
		if s.Field == "" {
			return errors.New("store: sort without a field")
		}
	}
	return nil
}

// searchSQL is the statement Search runs first for q when every driver
// matches many, for tests of its plan.
func searchSQL(typ string, q *store.Query, count bool) (string, []any, error) {
	if err := checkQuery(q); err != nil {
		return "", nil, err
	}
	switch ds := drivers(q); {
	case count:
	case len(q.Sort) == 0 && len(ds) > 0:
		text, args := streamSQL(typ, q, ds[0])
		return text, args, nil
	case ordered(q) && q.Sort[0].Field == store.FieldTime:
		text, args := walkSQL(typ, q)
		return text, args, nil
	case ordered(q):
		text, args := sortedSQL(typ, q, true, false)
		return text, args, nil
	}
	text, args := generalSQL(typ, q, count)
	return text, args, nil
}

// generalSQL translates any query: the scoping (type, not deleted,
// project) and each condition as a predicate with store.Matches' meaning.
// A condition an index range answers (selective) is a rid IN (...) list
// SQLite may drive the search from; any other is tested per resource
// (probe), as a walk of the project's resources meets it.
func generalSQL(typ string, q *store.Query, count bool) (string, []any) {
	b := &builder{typ: typ, project: q.Project}
	if count {
		b.w("SELECT count(*) FROM resources r WHERE ")
	} else {
		b.w("SELECT ", recordColumns, " FROM resources r WHERE ")
	}
	// When a condition finds its few rows through an index (the search
	// table's, or (type, id)), the unary + keeps SQLite from walking every
	// resource of the project instead, testing each against the condition,
	// which it would otherwise often prefer, to save sorting by ts.
	bySearch, byID := selective(q.Filter)
	hintType, hintScope := "", ""
	if bySearch && !byID {
		hintType = "+"
	}
	if bySearch || byID {
		hintScope = "+"
	}
	b.w(hintType, "r.type = ")
	b.arg(typ)
	b.w(" AND ", hintScope, "r.deleted = 0")
	if q.Project != "" {
		b.w(" AND ", hintScope, "r.project = ")
		b.arg(q.Project)
	}
	for _, c := range q.Filter {
		b.w(" AND ")
		if s, i := selectiveCond(c); s || i {
			b.cond(c)
		} else {
			b.probe(c)
		}
	}
	if count {
		return b.sb.String(), b.args
	}
	b.order(q.Sort, bySearch || byID)
	b.page(q)
	return b.sb.String(), b.args
}

// page writes LIMIT and OFFSET (a Limit below 1: none).
func (b *builder) page(q *store.Query) {
	limit := q.Limit
	if limit <= 0 {
		limit = -1
	}
	b.w(" LIMIT ")
	b.arg(limit)
	if q.Offset > 0 {
		b.w(" OFFSET ")
		b.arg(q.Offset)
	}
}

// selective reports whether the filter holds a condition answered by a
// range of an index: equality, prefix or comparison on a search field (or
// an Or made only of such), or equality or prefix on the id.
func selective(cs []store.Cond) (bySearch, byID bool) {
	for _, c := range cs {
		s, i := selectiveCond(c)
		bySearch, byID = bySearch || s, byID || i
	}
	return bySearch, byID
}

func selectiveCond(c store.Cond) (bySearch, byID bool) {
	switch c.Op {
	case store.OpAnd:
		return selective(c.Sub)
	case store.OpOr:
		// Every branch must find its rows through an index, each
		// through the search table's, or each through the id's.
		all, allID := true, true
		for _, s := range c.Sub {
			bs, bi := selectiveCond(s)
			all, allID = all && bs, allID && bi
		}
		return all, allID
	case store.OpEq, store.OpPrefix:
		if c.Field == store.FieldID {
			return false, true
		}
		return !recordField(c.Field) && !exactField(c.Field), false
	case store.OpLt, store.OpLe, store.OpGt, store.OpGe:
		return !recordField(c.Field) && !exactField(c.Field), false
	}
	return false, false
}

func recordField(f string) bool {
	return f == store.FieldID || f == store.FieldProject || f == store.FieldTime
}

// order writes ORDER BY: the sorts asked for, then rid, so equal keys keep
// one order from page to page. Without sorts, the order the driving index
// yields, so that a page needs no sort of everything found: rid when the
// rows come from the search table (the rid list is read in order),
// otherwise version time and rid, as the resources_list index holds them.
func (b *builder) order(sorts []store.Sort, byRid bool) {
	b.w(" ORDER BY ")
	if len(sorts) == 0 {
		if byRid {
			b.w("r.rid")
		} else {
			b.w("r.ts, r.rid")
		}
		return
	}
	dir := ""
	for i, s := range sorts {
		dir = ""
		if s.Desc {
			dir = " DESC"
		}
		switch s.Field {
		case store.FieldID:
			b.w("r.id", dir)
		case store.FieldTime:
			b.w("r.ts", dir)
		case store.FieldProject:
			b.w("r.project", dir)
		default:
			// Ascending by the smallest value, descending by the
			// largest; missing is NULL, which SQLite sorts first, but
			// store.Sort puts it last for the first sort.
			agg := "min"
			if s.Desc {
				agg = "max"
			}
			key := b.typ + "." + s.Field
			if i == 0 {
				b.w("(SELECT ", agg, "(x.value) FROM search x WHERE x.rid = r.rid AND x.key = ")
				b.name(key)
				b.w(") IS NULL, ")
			}
			b.w("(SELECT ", agg, "(x.value) FROM search x WHERE x.rid = r.rid AND x.key = ")
			b.name(key)
			b.w(")", dir)
		}
		b.w(", ")
	}
	// The tie-break follows the last direction, so an index walked
	// backwards can still deliver the order.
	b.w("r.rid", dir)
}

// junction writes an AND or OR of c's members, each by write, and reports
// whether c was one.
func (b *builder) junction(c store.Cond, write func(store.Cond)) bool {
	if c.Op != store.OpAnd && c.Op != store.OpOr {
		return false
	}
	sep := " AND "
	if c.Op == store.OpOr {
		sep = " OR "
	}
	b.w("(")
	for i, s := range c.Sub {
		if i > 0 {
			b.w(sep)
		}
		write(s)
	}
	b.w(")")
	return true
}

// cond writes one condition as a predicate.
func (b *builder) cond(c store.Cond) {
	if b.junction(c, b.cond) {
		return
	}
	switch c.Field {
	case store.FieldID:
		b.textColumn("r.id", c)
	case store.FieldProject:
		b.textColumn("r.project", c)
	case store.FieldTime:
		b.timeColumn("r.ts", c)
	default:
		b.searchField(c)
	}
}

// textColumn: a record field holding one string, always present.
func (b *builder) textColumn(col string, c store.Cond) {
	strs := only[string](c.Values)
	switch c.Op {
	case store.OpExists:
		b.boolean(c.Values[0] == true)
	case store.OpEq, store.OpNotIn:
		if len(strs) == 0 {
			b.boolean(c.Op == store.OpNotIn)
			return
		}
		b.w(col)
		if c.Op == store.OpNotIn {
			b.w(" NOT")
		}
		b.w(" IN ")
		b.list(strs)
	case store.OpPrefix, store.OpContains:
		b.w("(")
		for i, p := range strs {
			if i > 0 {
				b.w(" OR ")
			}
			if c.Op == store.OpPrefix {
				b.prefix(col, p.(string))
			} else {
				b.w("instr(", col, ", ")
				b.arg(p)
				b.w(") > 0")
			}
		}
		b.w(")")
	case store.OpLt, store.OpLe, store.OpGt, store.OpGe:
		// Only ids compare as strings (store.Check); SQLite's default
		// BINARY collation compares bytes, as Matches does.
		v, ok := c.Values[0].(string)
		if !ok {
			b.boolean(false)
			return
		}
		b.w(col, map[store.Op]string{store.OpLt: " < ", store.OpLe: " <= ", store.OpGt: " > ", store.OpGe: " >= "}[c.Op])
		b.arg(v)
	default:
		b.boolean(false)
	}
}

// timeColumn: a record field holding one instant, always present.
func (b *builder) timeColumn(col string, c store.Cond) {
	switch c.Op {
	case store.OpExists:
		b.boolean(c.Values[0] == true)
	case store.OpEq, store.OpNotIn:
		ms := exactMillis(c.Values)
		if len(ms) == 0 {
			b.boolean(c.Op == store.OpNotIn)
			return
		}
		b.w(col)
		if c.Op == store.OpNotIn {
			b.w(" NOT")
		}
		b.w(" IN ")
		b.list(ms)
	case store.OpLt, store.OpLe, store.OpGt, store.OpGe:
		t, ok := c.Values[0].(time.Time)
		if !ok {
			b.boolean(false)
			return
		}
		op, bound := timeBound(c.Op, t)
		b.w(col, op)
		b.arg(bound)
	default: // text matching needs a string
		b.boolean(false)
	}
}

// searchField: the values in the search table under type.field, as a
// list of the rids that have one (for a selective condition, which SQLite
// may drive the search from).
func (b *builder) searchField(c store.Cond) {
	if exactField(c.Field) {
		// Not in a value index: tested per resource, beside the
		// condition that finds them (store.ExactSuffix).
		b.probeField(c)
		return
	}
	key := b.typ + "." + c.Field
	switch c.Op {
	case store.OpExists:
		b.probeField(c)
		return
	case store.OpEq, store.OpNotIn:
		if !canEqual(c) {
			b.boolean(c.Op == store.OpNotIn)
			return
		}
		if c.Op == store.OpNotIn {
			b.w("r.rid NOT IN ")
		} else {
			b.w("r.rid IN ")
		}
	default:
		b.w("r.rid IN ")
	}
	b.w("(SELECT rid FROM search WHERE key = ")
	b.name(key)
	if b.project != "" {
		b.w(" AND project = ")
		b.name(b.project)
	}
	b.w(" AND ")
	b.values("value", c)
	b.w(")")
}

// canEqual reports whether any of an equality's values can equal a stored
// one.
func canEqual(c store.Cond) bool {
	return len(only[string](c.Values))+len(only[float64](c.Values))+len(exactMillis(c.Values)) > 0
}

// probe writes c as a test of the one resource r: record fields as its
// columns, search fields as a lookup of r's own rows (search_rid). A walk
// of resources in some order meets probes at a cost per resource, however
// many other resources match.
func (b *builder) probe(c store.Cond) {
	if b.junction(c, b.probe) {
		return
	}
	if recordField(c.Field) {
		b.cond(c)
		return
	}
	b.probeField(c)
}

func (b *builder) probeField(c store.Cond) {
	table, key := "search", b.name
	if exactField(c.Field) {
		table, key = "search_exact", func(k string) { b.arg(k) } // keys kept as text
	}
	switch c.Op {
	case store.OpExists:
		if c.Values[0] != true {
			b.w("NOT ")
		}
		b.w("EXISTS (SELECT 1 FROM ", table, " x WHERE x.rid = r.rid AND x.key = ")
		key(b.typ + "." + c.Field)
		b.w(")")
		return
	case store.OpEq, store.OpNotIn:
		if !canEqual(c) {
			b.boolean(c.Op == store.OpNotIn)
			return
		}
		if c.Op == store.OpNotIn {
			b.w("NOT ")
		}
	}
	b.w("EXISTS (SELECT 1 FROM ", table, " x WHERE x.rid = r.rid AND x.key = ")
	key(b.typ + "." + c.Field)
	b.w(" AND ")
	b.values("x.value", c)
	b.w(")")
}

// values writes the test on one search row's value. The value column keeps
// SQLite's storage classes apart — text TEXT, numbers REAL, instants
// INTEGER — and typeof keeps a number from equalling or comparing with an
// instant, as store.Matches never does. SQLite orders every number before
// every text, which bounds the ranges to one class.
func (b *builder) values(col string, c store.Cond) {
	switch c.Op {
	case store.OpEq, store.OpNotIn:
		var parts int
		part := func() {
			if parts > 0 {
				b.w(" OR ")
			}
			parts++
		}
		b.w("(")
		if strs := only[string](c.Values); len(strs) > 0 {
			part()
			b.w(col, " IN ")
			b.list(strs)
		}
		if nums := only[float64](c.Values); len(nums) > 0 {
			part()
			b.w("(", col, " IN ")
			b.list(nums)
			b.w(" AND typeof(", col, ") = 'real')")
		}
		if ms := exactMillis(c.Values); len(ms) > 0 {
			part()
			b.w("(", col, " IN ")
			b.list(ms)
			b.w(" AND typeof(", col, ") = 'integer')")
		}
		b.w(")")
	case store.OpPrefix:
		b.w("(")
		for i, p := range c.Values {
			if i > 0 {
				b.w(" OR ")
			}
			b.prefix(col, p.(string))
		}
		b.w(")")
	case store.OpContains:
		// value >= '' confines the walk to the text values.
		b.w(col, " >= '' AND (")
		for i, p := range c.Values {
			if i > 0 {
				b.w(" OR ")
			}
			b.w("instr(", col, ", ")
			b.arg(p)
			b.w(") > 0")
		}
		b.w(")")
	default: // comparisons
		var op string
		var bound any
		class := "real"
		switch v := c.Values[0].(type) {
		case float64:
			op, bound = cmpOps[c.Op], v
		case time.Time:
			op, bound = timeBound(c.Op, v)
			class = "integer"
		}
		b.w(col, op)
		b.arg(bound)
		if c.Op == store.OpGt || c.Op == store.OpGe {
			b.w(" AND ", col, " < ''") // numbers only: stop before the text
		}
		b.w(" AND typeof(", col, ") = '", class, "'")
	}
}

var cmpOps = map[store.Op]string{store.OpLt: " < ", store.OpLe: " <= ", store.OpGt: " > ", store.OpGe: " >= "}

// prefix writes col >= p AND col < p+"\xff": byte 0xFF occurs in no UTF-8
// text, so under BINARY collation the range holds exactly the texts that
// start with p (a number is below any text, so none falls in it).
func (b *builder) prefix(col, p string) {
	b.w("(", col, " >= ")
	b.arg(p)
	b.w(" AND ", col, " < ")
	b.arg(p + "\xff")
	b.w(")")
}

func (b *builder) boolean(v bool) {
	if v {
		b.w("1")
	} else {
		b.w("0")
	}
}

// timeBound turns a comparison with an instant into one with the stored
// milliseconds, exact even when t has a finer fraction: stored values are
// whole milliseconds, so v < t is v < ceil(t), v <= t is v <= floor(t).
func timeBound(op store.Op, t time.Time) (string, int64) {
	floor := t.UnixMilli() // rounds down, before the epoch too
	ceil := floor
	if t.Nanosecond()%int(time.Millisecond) != 0 {
		ceil++
	}
	switch op {
	case store.OpLt:
		return " < ", ceil
	case store.OpLe:
		return " <= ", floor
	case store.OpGt:
		return " > ", floor
	}
	return " >= ", ceil
}

// exactMillis lists the instants among vs as stored milliseconds, leaving
// out those with a finer fraction: no stored value can equal them.
func exactMillis(vs []any) []any {
	var out []any
	for _, v := range vs {
		if t, ok := v.(time.Time); ok && t.Nanosecond()%int(time.Millisecond) == 0 {
			out = append(out, t.UnixMilli())
		}
	}
	return out
}

// only lists the values of vs of type T; NaN, which equals nothing, is
// left out.
func only[T any](vs []any) []any {
	var out []any
	for _, v := range vs {
		if x, ok := v.(T); ok {
			if f, isF := v.(float64); isF && f != f {
				continue
			}
			out = append(out, x)
		}
	}
	return out
}
