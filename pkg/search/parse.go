package search

import (
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/store"
)

// Paging limits.
const (
	DefaultCount = 20   // _count when the query gives none
	MaxCount     = 1000 // the largest _count accepted
)

// Query is a parsed search: what to match, in which order, which page, and
// how to present it.
type Query struct {
	Filter    []store.Cond // conditions on stored fields, ANDed; the repository adds project and deleted scoping itself
	Sort      []store.Sort // empty unless _sort was given; the store breaks ties in an order stable from page to page
	Count     int          // _count, default 20, max 1000 (over → 400), 0 allowed
	Offset    int          // _offset, >= 0
	Total     string       // _total: "", "none", "estimate" or "accurate"
	Summary   string       // _summary: "", "count", "true", "data", "text", "false"
	Elements  []string     // _elements
	Canonical url.Values   // the parameters as understood, for self/next links
	// Reads are the codes of the search parameters Filter tests, sorted:
	// those named in the query and those inside _filter at any depth, so
	// that a check of what a search reveals (access.Policy.CheckSearch)
	// sees every one, however it was written.
	Reads []string
}

// now is the clock the ap (approximately) date prefix measures from.
var now = time.Now

// ignored parameters change only the response's formatting.
var ignored = map[string]bool{"_format": true, "_pretty": true}

// unsupported are FHIR's other result and special parameters, named so the
// error says that they exist but are not implemented here.
var unsupported = map[string]bool{
	"_include": true, "_revinclude": true, "_has": true, "_text": true,
	"_content": true, "_list": true, "_type": true, "_query": true, "_contained": true,
	"_containedType": true, "_compartment": true, "_deleted": true, "_security-label": true,
}

// Parse turns a query into a Query; an unknown or malformed parameter is a *fhir.Error 400 naming it in expression.
//
// Comma-separated values of one parameter are alternatives (OR); a repeated
// parameter must match every time (AND). A '\' escapes ',', '|', '$' and
// '\' in values.
func Parse(resourceType string, q url.Values) (*Query, error) {
	if err := checkQuerySize(q); err != nil {
		return nil, err
	}
	reg := loadRegistry()
	query := &Query{Count: DefaultCount, Canonical: url.Values{}}
	f := filter{grams: reg.grams[resourceType], reads: map[string]bool{}}
	var sortSpec []string
	countGiven := false

	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys) // a deterministic Filter for the same query

	for _, key := range keys {
		values := q[key]
		code, modifier, hasModifier := strings.Cut(key, ":")
		if ignored[code] {
			continue
		}
		switch code {
		case "_count", "_offset", "_total", "_summary":
			if hasModifier {
				return nil, badModifier(key, modifier)
			}
			v, err := single(key, values)
			if err != nil {
				return nil, err
			}
			if err := query.setResultParam(code, v); err != nil {
				return nil, err
			}
			countGiven = countGiven || code == "_count"
			query.Canonical.Set(code, v)
			continue
		case "_sort":
			if hasModifier {
				return nil, badModifier(key, modifier)
			}
			for _, v := range values {
				items, err := splitList(key, v)
				if err != nil {
					return nil, err
				}
				sortSpec = append(sortSpec, items...)
			}
			continue
		case "_elements", "_fields":
			if hasModifier {
				return nil, badModifier(key, modifier)
			}
			for _, v := range values {
				items, err := splitList(key, v)
				if err != nil {
					return nil, err
				}
				for _, e := range items {
					if !elementName.MatchString(e) {
						return nil, fhir.BadRequest(fmt.Sprintf("Invalid element name in %s: %q", key, clip(e)), key)
					}
					if !slices.Contains(query.Elements, e) {
						query.Elements = append(query.Elements, e)
					}
				}
			}
			continue
		}

		var err error
		switch {
		case code == "":
			return nil, fhir.BadRequest("Search parameter without a name", key)
		case strings.Contains(code, "."):
			return nil, fhir.BadRequest("Chained search is not supported: "+clip(key), key)
		case code == "_id":
			f.reads[code] = true
			err = f.addEach(key, values, hasModifier, modifier, idCondition)
		case code == "_project":
			f.reads[code] = true
			err = f.addEach(key, values, hasModifier, modifier, projectCondition)
		case code == "_filter":
			if hasModifier {
				return nil, badModifier(key, modifier)
			}
			for _, v := range values {
				if err = f.addFilterExpr(reg, resourceType, key, v); err != nil {
					break
				}
			}
		case code == "_lastUpdated":
			if hasModifier {
				return nil, badModifier(key, modifier)
			}
			f.reads[code] = true
			for _, v := range values {
				if err = f.addDates(key, v, "ts", "ts"); err != nil {
					break
				}
			}
		default:
			p := reg.lookup(resourceType, code)
			if p == nil {
				if unsupported[code] {
					return nil, fhir.BadRequest("Unsupported search parameter: "+clip(code), code)
				}
				return nil, fhir.BadRequest("Unknown search parameter: "+clip(code), code)
			}
			for _, v := range values {
				if err = f.addParam(p, key, modifier, hasModifier, v); err != nil {
					break
				}
			}
		}
		if err != nil {
			return nil, err
		}
		query.Canonical[key] = append([]string(nil), values...)
	}

	if query.Summary == "count" {
		// As Medplum: a count is the total alone.
		query.Count = 0
		query.Total = "accurate"
	}
	if len(sortSpec) > 0 {
		s, err := sortFor(reg, resourceType, sortSpec)
		if err != nil {
			return nil, err
		}
		query.Sort = s
		query.Canonical.Set("_sort", strings.Join(sortSpec, ","))
	}
	if len(query.Elements) > 0 {
		query.Canonical.Set("_elements", strings.Join(query.Elements, ","))
	}
	if !countGiven || query.Summary == "count" {
		query.Canonical.Set("_count", strconv.Itoa(query.Count))
	}
	if query.Offset == 0 {
		query.Canonical.Del("_offset")
	}
	query.Filter = f.conds
	for code := range f.reads {
		query.Reads = append(query.Reads, code)
	}
	slices.Sort(query.Reads)
	return query, nil
}

var elementName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)*(\[x\])?$`)

// setResultParam applies _count, _offset, _total or _summary.
func (q *Query) setResultParam(code, v string) error {
	switch code {
	case "_count":
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > MaxCount {
			return fhir.BadRequest(fmt.Sprintf("Invalid _count: must be an integer from 0 to %d", MaxCount), code)
		}
		q.Count = n
	case "_offset":
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fhir.BadRequest("Invalid _offset: must be a non-negative integer", code)
		}
		q.Offset = n
	case "_total":
		switch v {
		case "none", "estimate", "accurate":
			q.Total = v
		default:
			return fhir.BadRequest("Invalid _total: must be none, estimate or accurate", code)
		}
	case "_summary":
		switch v {
		case "count", "true", "data", "text", "false":
			q.Summary = v
		default:
			return fhir.BadRequest("Invalid _summary: must be true, false, text, data or count", code)
		}
	}
	return nil
}

// single returns the one value of a parameter that may be given once.
func single(key string, values []string) (string, error) {
	for _, v := range values[1:] {
		if v != values[0] {
			return "", fhir.BadRequest("Search parameter "+key+" is given more than once", key)
		}
	}
	if values[0] == "" {
		return "", fhir.BadRequest("Empty value for search parameter "+key, key)
	}
	return values[0], nil
}

func splitList(key, v string) ([]string, error) {
	items := strings.Split(v, ",")
	if len(items) > MaxValuesPerParam {
		return nil, tooManyValues(key, len(items))
	}
	for _, it := range items {
		if it == "" {
			return nil, fhir.BadRequest("Empty item in "+key, key)
		}
	}
	return items, nil
}

func sortFor(reg *registry, resourceType string, spec []string) ([]store.Sort, error) {
	var s []store.Sort
	for _, item := range spec {
		desc, code := false, item
		if strings.HasPrefix(item, "-") {
			desc, code = true, item[1:]
		}
		var field string
		switch code {
		case "_id":
			field = store.FieldID
		case "_lastUpdated":
			field = store.FieldTime
		default:
			p := reg.lookup(resourceType, code)
			if p == nil {
				return nil, fhir.BadRequest("Unknown sort parameter: "+clip(code), "_sort")
			}
			switch p.Type {
			case "token":
				// Not the smallest key: "system|code" forms sort by
				// system, so a token sorts by its first code.
				field = p.f.sort
			case "date":
				field = p.f.lo
			case "string", "number", "uri":
				// By the smallest value, descending by the largest, as
				// FHIR asks for repeating elements.
				field = p.field
			default:
				return nil, fhir.BadRequest(fmt.Sprintf("Cannot sort by %s parameter: %s", p.Type, code), "_sort")
			}
		}
		for _, e := range s {
			if e.Field == field {
				return nil, fhir.BadRequest("Sort parameter given twice: "+clip(code), "_sort")
			}
		}
		s = append(s, store.Sort{Field: field, Desc: desc})
	}
	return s, nil
}

func badModifier(key, modifier string) error {
	return fhir.BadRequest(fmt.Sprintf("Unsupported search modifier %q in %s", clip(modifier), clip(key)), key)
}

func badValue(key, kind, v string) error {
	return fhir.BadRequest(fmt.Sprintf("Invalid %s in search parameter %s: %q", kind, clip(key), clip(v)), key)
}

// clip keeps user input in error messages short.
func clip(s string) string {
	if len(s) > 100 {
		return truncateRunes(s, 100) + "..."
	}
	return s
}

func truncateRunes(s string, n int) string {
	for i := range s {
		if i >= n {
			return s[:i]
		}
	}
	return s
}

// filter collects the query's conditions, ANDed, and counts their
// alternatives against MaxValuesPerQuery.
type filter struct {
	conds  []store.Cond
	values int
	grams  map[string]string // code → trigram field answering its :contains
	reads  map[string]bool   // codes of the parameters conds test (Query.Reads)
}

// split is splitValues, counting the alternatives of the whole query.
func (f *filter) split(key, v string) ([]string, error) {
	vals, err := splitValues(key, v)
	if err != nil {
		return nil, err
	}
	if f.values += len(vals); f.values > MaxValuesPerQuery {
		return nil, fhir.BadRequest(fmt.Sprintf("Too many values in one search: more than %d", MaxValuesPerQuery), key)
	}
	return vals, nil
}

func (f *filter) add(c store.Cond) { f.conds = append(f.conds, c) }

func (f *filter) addEach(key string, values []string, hasModifier bool, modifier string,
	cond func(key string, vals []string) (store.Cond, error)) error {
	if hasModifier {
		return badModifier(key, modifier)
	}
	for _, v := range values {
		vals, err := f.split(key, v)
		if err != nil {
			return err
		}
		c, err := cond(key, vals)
		if err != nil {
			return err
		}
		f.add(c)
	}
	return nil
}

func idCondition(_ string, vals []string) (store.Cond, error) {
	return store.Strings(store.FieldID, vals), nil
}

func projectCondition(key string, vals []string) (store.Cond, error) {
	ids := make([]string, len(vals))
	for i, v := range vals {
		ids[i] = strings.TrimPrefix(v, "Project/")
		if ids[i] == "" || strings.Contains(ids[i], "/") {
			return store.Cond{}, badValue(key, "project", v)
		}
	}
	return store.Strings(store.FieldProject, ids), nil
}

// splitValues splits a value on unescaped commas and removes the escapes
// of ',' and '$' (an escaped '|' stays escaped for tokens to see).
func splitValues(key, v string) ([]string, error) {
	var out []string
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\' && i+1 < len(v) && (v[i+1] == ',' || v[i+1] == '$' || v[i+1] == '\\'):
			if v[i+1] == '\\' {
				b.WriteString(`\\`)
			} else {
				b.WriteByte(v[i+1])
			}
			i++
		case c == ',':
			out = append(out, b.String())
			b.Reset()
		default:
			b.WriteByte(c)
		}
	}
	out = append(out, b.String())
	if len(out) > MaxValuesPerParam {
		return nil, tooManyValues(key, len(out))
	}
	for _, s := range out {
		if s == "" {
			return nil, fhir.BadRequest("Empty value in search parameter "+clip(key), key)
		}
		if err := checkValue(key, s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// unescapeValue removes the remaining backslash escapes.
func unescapeValue(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cutPipe splits a token value at its first unescaped '|'.
func cutPipe(s string) (system, code string, found bool) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '|':
			return unescapeValue(s[:i]), unescapeValue(s[i+1:]), true
		}
	}
	return "", unescapeValue(s), false
}

func (f *filter) addParam(p *Param, key, modifier string, hasModifier bool, v string) error {
	f.reads[p.Code] = true
	if hasModifier && modifier == "missing" {
		var missing bool
		switch v {
		case "true":
			missing = true
		case "false":
		default:
			return fhir.BadRequest("Search modifier :missing must be true or false", key)
		}
		field := p.field
		if p.Type == "date" {
			field = p.f.lo
		}
		f.add(store.Exists(field, !missing))
		return nil
	}
	vals, err := f.split(key, v)
	if err != nil {
		return err
	}
	switch p.Type {
	case "string":
		return f.addString(p, key, modifier, hasModifier, vals)
	case "token":
		return f.addToken(p, key, modifier, hasModifier, vals)
	case "reference":
		return f.addReference(p, key, modifier, hasModifier, vals)
	case "uri":
		return f.addURI(p, key, modifier, hasModifier, vals)
	}
	if hasModifier {
		return badModifier(key, modifier)
	}
	switch p.Type {
	case "date":
		return f.addDateValues(key, vals, p.f.lo, p.f.hi)
	case "number", "quantity":
		var conds []store.Cond
		for _, x := range vals {
			c, err := numberCondition(p, key, x)
			if err != nil {
				return err
			}
			conds = append(conds, c)
		}
		f.add(store.Or(conds...))
		return nil
	}
	return badModifier(key, modifier)
}

func (f *filter) addString(p *Param, key, modifier string, hasModifier bool, vals []string) error {
	switch {
	case !hasModifier, modifier == "contains":
		// Starts-with, or contains, on the normalised values.
		norm := make([]any, len(vals))
		for i, v := range vals {
			if err := checkTextValue(key, unescapeValue(v)); err != nil {
				return err
			}
			n := normalize(unescapeValue(v))
			if n == "" {
				return badValue(key, "string", v)
			}
			norm[i] = n
		}
		op := store.OpPrefix
		if hasModifier {
			op = store.OpContains
			if g := f.grams[p.Code]; g != "" && len(norm) == 1 {
				// An index to walk (grams.go); with several values, an OR
				// of them would be, which the store does not walk.
				v := norm[0].(string)
				for _, c := range gramConds(g, v) {
					f.add(c)
				}
				if g == p.f.grams && isGram(v) {
					// The parameter's own trigrams, and v is one: having it
					// is containing it, and there is nothing left to test.
					return nil
				}
			}
		}
		f.add(store.Cond{Op: op, Field: p.field, Values: norm})
	case modifier == "exact":
		exact, norm := make([]string, len(vals)), make([]string, len(vals))
		for i, v := range vals {
			exact[i] = unescapeValue(v)
			if err := checkTextValue(key, exact[i]); err != nil {
				return err
			}
			norm[i] = normalize(exact[i])
		}
		// A value as written is stored only beside its normalised form
		// (stringFields): stating that one too gives the store an index
		// to find the resources by, and the values as written are then
		// only tested (store.ExactSuffix).
		f.add(store.And(store.Strings(p.field, norm), store.Strings(p.f.exact, exact)))
	default:
		return badModifier(key, modifier)
	}
	return nil
}

func (f *filter) addToken(p *Param, key, modifier string, hasModifier bool, vals []string) error {
	if hasModifier && modifier == "text" {
		norm := make([]any, len(vals))
		for i, v := range vals {
			if err := checkTextValue(key, unescapeValue(v)); err != nil {
				return err
			}
			n := normalize(unescapeValue(v))
			if n == "" {
				return badValue(key, "text", v)
			}
			norm[i] = n
		}
		f.add(store.Cond{Op: store.OpPrefix, Field: p.f.text, Values: norm})
		return nil
	}
	if hasModifier && modifier != "not" {
		return badModifier(key, modifier)
	}
	keys := make([]string, len(vals))
	for i, v := range vals {
		system, code, pipe := cutPipe(v)
		if p.caseInsensitive {
			code = strings.ToLower(code)
		}
		switch {
		case !pipe:
			keys[i] = code
		case system == "" && code == "":
			return badValue(key, "token", v)
		case system == "" && p.scalar:
			keys[i] = code // stored without the "|" (Param.scalar)
		default:
			keys[i] = system + "|" + code
		}
		if p.boolean && code != "true" && code != "false" {
			return badValue(key, "boolean", v)
		}
	}
	if modifier == "not" {
		// $nin also matches resources without the field, as :not should.
		c := store.Strings(p.field, keys)
		c.Op = store.OpNotIn
		f.add(c)
		return nil
	}
	f.add(store.Strings(p.field, keys))
	return nil
}

func (f *filter) addReference(p *Param, key, modifier string, hasModifier bool, vals []string) error {
	var keys []string
	if hasModifier {
		// The :Type modifier: values are ids of that type.
		if !isTypeName(modifier) {
			return badModifier(key, modifier)
		}
		if len(p.Targets) > 0 && !slices.Contains(p.Targets, modifier) {
			return fhir.BadRequest(fmt.Sprintf("Search parameter %s cannot refer to %s", p.Code, clip(modifier)), key)
		}
		for _, v := range vals {
			v = unescapeValue(v)
			if typ, id, ok := splitRef(v); ok && typ == modifier {
				v = id
			}
			if strings.Contains(v, "/") {
				return badValue(key, "reference", v)
			}
			keys = append(keys, modifier+"/"+v)
		}
		f.add(store.Strings(p.field, keys))
		return nil
	}
	for _, v := range vals {
		v = unescapeValue(v)
		switch {
		case strings.Contains(v, "://"), strings.HasPrefix(v, "urn:"):
			// Absolute: a canonical URL as stored, or a reference to strip
			// to Type/id as Fields does.
			keys = append(keys, v)
			if typ, id, ok := splitRef(v); ok && !strings.HasPrefix(v, "urn:") {
				keys = append(keys, typ+"/"+id)
			}
		case strings.Contains(v, "/"):
			typ, id, ok := splitRef(v)
			if !ok || strings.Count(v, "/") != 1 {
				return badValue(key, "reference", v)
			}
			if len(p.Targets) > 0 && !slices.Contains(p.Targets, typ) {
				return fhir.BadRequest(fmt.Sprintf("Search parameter %s cannot refer to %s", p.Code, clip(typ)), key)
			}
			keys = append(keys, typ+"/"+id)
		default:
			// A bare id: Fields stores every reference's id too, so one
			// equality finds it whatever the target type.
			keys = append(keys, v)
		}
	}
	f.add(store.Strings(p.field, keys))
	return nil
}

func (f *filter) addURI(p *Param, key, modifier string, hasModifier bool, vals []string) error {
	for i, v := range vals {
		vals[i] = unescapeValue(v)
	}
	switch {
	case !hasModifier:
		f.add(store.Strings(p.field, vals))
	case modifier == "below":
		c := store.Strings(p.field, vals)
		c.Op = store.OpPrefix
		f.add(c)
	default:
		return badModifier(key, modifier)
	}
	return nil
}

// prefixed splits a FHIR comparison prefix off a date, number or quantity.
func prefixed(v string) (prefix, rest string) {
	if len(v) > 2 {
		switch p := v[:2]; p {
		case "eq", "ne", "gt", "lt", "ge", "le", "sa", "eb", "ap":
			return p, v[2:]
		}
	}
	return "eq", v
}

// addDates adds the conditions of one date parameter value: comma
// alternatives ORed. lo and hi are the fields holding the ends of the
// stored range; they are the same field for an instant such as ts.
//
// With the stored range [lo, hi] and the range the value covers [pl, ph]
// (2000-01 covers the month), FHIR R4's rules are:
//
//	eq  lo >= pl and hi <= ph        ne  not eq
//	gt  hi > ph                      lt  lo < pl
//	ge  gt or eq                     le  lt or eq
//	sa  lo > ph                      eb  hi < pl
//	ap  the ranges overlap, the value's widened by 10% of its distance from now
func (f *filter) addDates(key, v, lo, hi string) error {
	vals, err := f.split(key, v)
	if err != nil {
		return err
	}
	return f.addDateValues(key, vals, lo, hi)
}

// addDateValues is addDates with the alternatives already split.
func (f *filter) addDateValues(key string, vals []string, lo, hi string) error {
	conds := make([]store.Cond, len(vals))
	for i, x := range vals {
		prefix, rest := prefixed(x)
		pl, ph, err := parseDate(rest)
		if err != nil {
			return badValue(key, "date", x)
		}
		conds[i] = dateCondition(prefix, lo, hi, pl, ph)
	}
	f.add(store.Or(conds...))
	return nil
}

func dateCondition(prefix, lo, hi string, pl, ph time.Time) store.Cond {
	cmp := func(field string, op store.Op, t time.Time) store.Cond { return store.Compare(field, op, t) }
	if lo == hi { // an instant
		switch prefix {
		case "ne":
			return store.Or(cmp(lo, store.OpLt, pl), cmp(lo, store.OpGt, ph))
		case "gt", "sa":
			return cmp(lo, store.OpGt, ph)
		case "lt", "eb":
			return cmp(lo, store.OpLt, pl)
		case "ge":
			return cmp(lo, store.OpGe, pl)
		case "le":
			return cmp(lo, store.OpLe, ph)
		case "ap":
			pl, ph = widen(pl, ph)
		}
		return store.And(cmp(lo, store.OpGe, pl), cmp(lo, store.OpLe, ph))
	}
	// A stored range has lo <= hi, so eq, ge and le each imply a bound on
	// one field; stated beside the exact test, it gives a store one index
	// range to walk (eq: lo within [pl, ph]; ge: hi >= pl; le: lo <= ph).
	eq := store.And(cmp(lo, store.OpGe, pl), cmp(lo, store.OpLe, ph), cmp(hi, store.OpLe, ph))
	switch prefix {
	case "ne":
		return store.Or(cmp(lo, store.OpLt, pl), cmp(hi, store.OpGt, ph))
	case "gt":
		return cmp(hi, store.OpGt, ph)
	case "lt":
		return cmp(lo, store.OpLt, pl)
	case "ge":
		return store.And(cmp(hi, store.OpGe, pl), store.Or(cmp(hi, store.OpGt, ph), eq))
	case "le":
		return store.And(cmp(lo, store.OpLe, ph), store.Or(cmp(lo, store.OpLt, pl), eq))
	case "sa":
		return cmp(lo, store.OpGt, ph)
	case "eb":
		return cmp(hi, store.OpLt, pl)
	case "ap":
		pl, ph = widen(pl, ph)
		return store.And(cmp(lo, store.OpLe, ph), cmp(hi, store.OpGe, pl))
	}
	return eq
}

// widen stretches a range by 10% of its distance from now on each side,
// FHIR's suggestion for ap.
func widen(pl, ph time.Time) (time.Time, time.Time) {
	d := now().Sub(pl)
	if d < 0 {
		d = -d
	}
	d /= 10
	return pl.Add(-d), ph.Add(d)
}

// numberCondition is the condition of one number or quantity value. A
// number's precision sets the range eq accepts, as FHIR says: 100 matches
// [99.5, 100.5). A quantity may add |system|code, matched on s_c_unit.
func numberCondition(p *Param, key, v string) (store.Cond, error) {
	prefix, rest := prefixed(v)
	var unit string
	if p.Type == "quantity" {
		num, sysCode, found := strings.Cut(rest, "|")
		if found {
			system, code, ok := strings.Cut(sysCode, "|")
			if !ok || code == "" {
				return store.Cond{}, badValue(key, "quantity", v)
			}
			unit = code
			if system != "" {
				unit = system + "|" + code
			}
		}
		rest = num
	}
	x, err := strconv.ParseFloat(rest, 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) || strings.ContainsAny(rest, "xXpP_") {
		return store.Cond{}, badValue(key, "number", v)
	}
	half := 0.5 * precision(rest)
	cmp := func(op store.Op, y float64) store.Cond { return store.Compare(p.field, op, y) }
	var c store.Cond
	switch prefix {
	case "eq":
		c = store.And(cmp(store.OpGe, x-half), cmp(store.OpLt, x+half))
	case "ne":
		c = store.Or(cmp(store.OpLt, x-half), cmp(store.OpGe, x+half))
	case "gt":
		c = cmp(store.OpGt, x)
	case "lt":
		c = cmp(store.OpLt, x)
	case "ge":
		c = cmp(store.OpGe, x)
	case "le":
		c = cmp(store.OpLe, x)
	case "ap":
		d := math.Abs(x) * 0.1
		c = store.And(cmp(store.OpGe, x-d), cmp(store.OpLe, x+d))
	default:
		return store.Cond{}, badValue(key, "number prefix", v)
	}
	if unit != "" {
		c = store.And(c, store.Eq(p.f.unit, unit))
	}
	return c, nil
}

// precision is the unit of the last digit written: 1 for "100", 0.01 for
// "1.00", 100 for "1e2".
func precision(s string) float64 {
	exp := 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(s[i+1:])
		if err == nil {
			exp = e
		}
		s = s[:i]
	}
	if i := strings.IndexByte(s, '.'); i >= 0 {
		exp -= len(s) - i - 1
	}
	return math.Pow(10, float64(exp))
}
