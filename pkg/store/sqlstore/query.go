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
// limit), in q.Sort order, else by version time and insertion.
func (s *Store) Search(ctx context.Context, typ string, q *store.Query) ([]*store.Record, error) {
	text, args, err := searchSQL(typ, q, false)
	if err != nil {
		return nil, err
	}
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
	text, args, err := searchSQL(typ, q, true)
	if err != nil {
		return 0, err
	}
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

// searchSQL translates a query. The scoping (type, not deleted, project) is
// always applied; the filter's conditions each become an SQL predicate with
// store.Matches' meaning.
func searchSQL(typ string, q *store.Query, count bool) (string, []any, error) {
	if q == nil {
		q = &store.Query{}
	}
	for _, c := range q.Filter {
		if err := store.Check(c); err != nil {
			return "", nil, err
		}
	}
	for _, s := range q.Sort {
		if s.Field == "" {
			return "", nil, errors.New("store: sort without a field")
		}
	}
	if !count {
		if text, args, ok := streamSQL(typ, q); ok {
			return text, args, nil
		}
	}
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
		b.cond(c)
	}
	if count {
		return b.sb.String(), b.args, nil
	}
	b.order(q.Sort, bySearch || byID)
	b.page(q)
	return b.sb.String(), b.args, nil
}

// streamSQL is searchSQL for the commonest search: unsorted, driven by one
// string equal to, or a prefix of, a search field's values (name=smi,
// profile-type=Patient). It walks the search index from that value and
// stops at the end of the page, in the index's order (value, project,
// rid); the general form first gathers every match to order them by rid,
// which for a prefix a thousand resources share cost 1.8 ms at 100,000
// Patients. A resource with several matching values is taken at its
// smallest. ok is false for any other shape.
func streamSQL(typ string, q *store.Query) (string, []any, bool) {
	if len(q.Sort) > 0 {
		return "", nil, false
	}
	drive := -1
	for i, c := range q.Filter {
		if (c.Op == store.OpEq || c.Op == store.OpPrefix) && !recordField(c.Field) && len(c.Values) == 1 {
			if _, ok := c.Values[0].(string); ok {
				drive = i
				break
			}
		}
	}
	if drive < 0 {
		return "", nil, false
	}
	c := q.Filter[drive]
	v := c.Values[0].(string)
	b := &builder{typ: typ, project: q.Project}
	b.w("SELECT ", recordColumns, " FROM search s JOIN resources r ON r.rid = s.rid WHERE s.key = ")
	b.arg(typ + "." + c.Field)
	if c.Op == store.OpEq {
		b.w(" AND s.value = ")
		b.arg(v)
	} else {
		b.w(" AND ")
		b.prefix("s.value", v)
		// Only a resource's smallest matching value, so it comes once.
		b.w(" AND NOT EXISTS (SELECT 1 FROM search d WHERE d.rid = s.rid AND d.key = s.key AND d.value >= ")
		b.arg(v)
		b.w(" AND d.value < s.value)")
	}
	if q.Project != "" {
		b.w(" AND s.project = ")
		b.arg(q.Project)
		b.w(" AND +r.project = ")
		b.arg(q.Project)
	}
	b.w(" AND +r.type = ")
	b.arg(typ)
	b.w(" AND +r.deleted = 0")
	for i, other := range q.Filter {
		if i != drive {
			b.w(" AND ")
			b.cond(other)
		}
	}
	// The index order. With the project fixed SQLite still sorts each
	// value's few rows ("LAST TERM OF ORDER BY"), which streams.
	b.w(" ORDER BY s.value, s.project, s.rid")
	b.page(q)
	return b.sb.String(), b.args, true
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
		return !recordField(c.Field), false
	case store.OpLt, store.OpLe, store.OpGt, store.OpGe:
		return !recordField(c.Field), false
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
	for _, s := range sorts {
		dir = ""
		if s.Desc {
			dir = " DESC"
		}
		switch s.Field {
		case store.FieldID:
			b.w("r.id")
		case store.FieldTime:
			b.w("r.ts")
		case store.FieldProject:
			b.w("r.project")
		default:
			// Ascending by the smallest value, descending by the
			// largest; a missing field is NULL, first ascending and
			// last descending.
			agg := "min"
			if s.Desc {
				agg = "max"
			}
			b.w("(SELECT ", agg, "(s.value) FROM search s WHERE s.rid = r.rid AND s.key = ")
			b.arg(b.typ + "." + s.Field)
			b.w(")")
		}
		b.w(dir, ", ")
	}
	// The tie-break follows the last direction, so an index walked
	// backwards can still deliver the order.
	b.w("r.rid", dir)
}

// cond writes one condition as a predicate.
func (b *builder) cond(c store.Cond) {
	switch c.Op {
	case store.OpAnd, store.OpOr:
		sep := " AND "
		if c.Op == store.OpOr {
			sep = " OR "
		}
		b.w("(")
		for i, s := range c.Sub {
			if i > 0 {
				b.w(sep)
			}
			b.cond(s)
		}
		b.w(")")
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

// searchField: the values in the search table under type.field.
func (b *builder) searchField(c store.Cond) {
	key := b.typ + "." + c.Field
	switch c.Op {
	case store.OpExists:
		if c.Values[0] != true {
			b.w("NOT ")
		}
		b.w("EXISTS (SELECT 1 FROM search s WHERE s.rid = r.rid AND s.key = ")
		b.arg(key)
		b.w(")")
		return
	case store.OpEq, store.OpNotIn:
		if len(only[string](c.Values))+len(only[float64](c.Values))+len(exactMillis(c.Values)) == 0 {
			b.boolean(c.Op == store.OpNotIn) // nothing can be equal
			return
		}
		if c.Op == store.OpNotIn {
			b.w("r.rid NOT IN ")
		} else {
			b.w("r.rid IN ")
		}
	case store.OpLt, store.OpLe, store.OpGt, store.OpGe:
		b.w("r.rid IN ")
	default: // prefix, contains
		b.w("r.rid IN ")
	}
	b.w("(SELECT rid FROM search WHERE key = ")
	b.arg(key)
	if b.project != "" {
		b.w(" AND project = ")
		b.arg(b.project)
	}
	b.w(" AND ")
	b.values(c)
	b.w(")")
}

// values writes the test on one search row's value. The value column keeps
// SQLite's storage classes apart — text TEXT, numbers REAL, instants
// INTEGER — and typeof keeps a number from equalling or comparing with an
// instant, as store.Matches never does. SQLite orders every number before
// every text, which bounds the ranges to one class.
func (b *builder) values(c store.Cond) {
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
			b.w("value IN ")
			b.list(strs)
		}
		if nums := only[float64](c.Values); len(nums) > 0 {
			part()
			b.w("(value IN ")
			b.list(nums)
			b.w(" AND typeof(value) = 'real')")
		}
		if ms := exactMillis(c.Values); len(ms) > 0 {
			part()
			b.w("(value IN ")
			b.list(ms)
			b.w(" AND typeof(value) = 'integer')")
		}
		b.w(")")
	case store.OpPrefix:
		b.w("(")
		for i, p := range c.Values {
			if i > 0 {
				b.w(" OR ")
			}
			b.prefix("value", p.(string))
		}
		b.w(")")
	case store.OpContains:
		// value >= '' confines the walk to the text values.
		b.w("value >= '' AND (")
		for i, p := range c.Values {
			if i > 0 {
				b.w(" OR ")
			}
			b.w("instr(value, ")
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
		b.w("value", op)
		b.arg(bound)
		if c.Op == store.OpGt || c.Op == store.OpGe {
			b.w(" AND value < ''") // numbers only: stop before the text
		}
		b.w(" AND typeof(value) = '", class, "'")
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
