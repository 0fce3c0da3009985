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
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Paging limits.
const (
	DefaultCount = 20   // _count when the query gives none
	MaxCount     = 1000 // the largest _count accepted
)

// Query is a parsed search: what to match, in which order, which page, and
// how to present it.
type Query struct {
	Filter    bson.D     // conditions on stored fields; the repository adds project and deleted scoping itself
	Sort      bson.D     // empty unless _sort was given; then ends with _id, so pages are stable
	Count     int        // _count, default 20, max 1000 (over → 400), 0 allowed
	Offset    int        // _offset, >= 0
	Total     string     // _total: "", "none", "estimate" or "accurate"
	Summary   string     // _summary: "", "count", "true", "data", "text", "false"
	Elements  []string   // _elements
	Canonical url.Values // the parameters as understood, for self/next links
}

// now is the clock the ap (approximately) date prefix measures from.
var now = time.Now

// ignored parameters change only the response's formatting.
var ignored = map[string]bool{"_format": true, "_pretty": true}

// unsupported are FHIR's other result and special parameters, named so the
// error says that they exist but are not implemented here.
var unsupported = map[string]bool{
	"_include": true, "_revinclude": true, "_has": true, "_filter": true, "_text": true,
	"_content": true, "_list": true, "_type": true, "_query": true, "_contained": true,
	"_containedType": true, "_compartment": true, "_deleted": true, "_security-label": true,
}

// Parse turns a query into a Query; an unknown or malformed parameter is a *fhir.Error 400 naming it in expression.
//
// Comma-separated values of one parameter are alternatives (OR); a repeated
// parameter must match every time (AND). A '\' escapes ',', '|', '$' and
// '\' in values.
func Parse(resourceType string, q url.Values) (*Query, error) {
	reg := loadRegistry()
	query := &Query{Count: DefaultCount, Canonical: url.Values{}}
	var f filter
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
			err = f.addEach(key, values, hasModifier, modifier, idCondition)
		case code == "_project":
			err = f.addEach(key, values, hasModifier, modifier, projectCondition)
		case code == "_lastUpdated":
			if hasModifier {
				return nil, badModifier(key, modifier)
			}
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
	query.Filter = f.done()
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
	for _, it := range items {
		if it == "" {
			return nil, fhir.BadRequest("Empty item in "+key, key)
		}
	}
	return items, nil
}

func sortFor(reg *registry, resourceType string, spec []string) (bson.D, error) {
	var s bson.D
	hasID := false
	for _, item := range spec {
		dir, code := 1, item
		if strings.HasPrefix(item, "-") {
			dir, code = -1, item[1:]
		}
		var field string
		switch code {
		case "_id":
			field, hasID = "_id", true
		case "_lastUpdated":
			field = "ts"
		default:
			p := reg.lookup(resourceType, code)
			if p == nil {
				return nil, fhir.BadRequest("Unknown sort parameter: "+clip(code), "_sort")
			}
			switch p.Type {
			case "string", "token":
				field = p.f.sort
			case "date":
				field = p.f.lo
			case "number", "uri":
				field = p.field
			default:
				return nil, fhir.BadRequest(fmt.Sprintf("Cannot sort by %s parameter: %s", p.Type, code), "_sort")
			}
		}
		for _, e := range s {
			if e.Key == field {
				return nil, fhir.BadRequest("Sort parameter given twice: "+clip(code), "_sort")
			}
		}
		s = append(s, bson.E{Key: field, Value: dir})
	}
	if !hasID {
		s = append(s, bson.E{Key: "_id", Value: 1})
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

// filter collects conditions. Each field appears once at the top level,
// where MongoDB indexes and FerretDB's PostgreSQL backend can use it; a
// second condition on the same field goes into a trailing $and.
type filter struct {
	top  bson.D
	more bson.A
}

func (f *filter) add(key string, val any) {
	for _, e := range f.top {
		if e.Key == key {
			f.more = append(f.more, bson.D{{Key: key, Value: val}})
			return
		}
	}
	f.top = append(f.top, bson.E{Key: key, Value: val})
}

// addAll adds every element of a condition document.
func (f *filter) addAll(d bson.D) {
	for _, e := range d {
		f.add(e.Key, e.Value)
	}
}

func (f *filter) done() bson.D {
	d := append(bson.D{}, f.top...)
	if len(f.more) > 0 {
		d = append(d, bson.E{Key: "$and", Value: f.more})
	}
	return d
}

// Scoped returns the filter with the repository's own conditions (project, deleted) first, each field still once at the top level.
//
// A condition on a field the query also constrains, such as project when
// _project was given, joins the trailing $and rather than repeating a key,
// which MongoDB would not read as AND.
func (q *Query) Scoped(conds ...bson.E) bson.D {
	var f filter
	for _, c := range conds {
		f.add(c.Key, c.Value)
	}
	for _, e := range q.Filter {
		if more, ok := e.Value.(bson.A); ok && e.Key == "$and" {
			f.more = append(f.more, more...)
			continue
		}
		f.add(e.Key, e.Value)
	}
	return f.done()
}

// oneOf is an equality on field with any of values.
func oneOf(field string, values []string) bson.D {
	if len(values) == 1 {
		return bson.D{{Key: field, Value: values[0]}}
	}
	return bson.D{{Key: field, Value: bson.D{{Key: "$in", Value: values}}}}
}

// anyOf ORs condition documents, flattening a single one.
func anyOf(conds []bson.D) bson.D {
	if len(conds) == 1 {
		return conds[0]
	}
	a := make(bson.A, len(conds))
	for i, c := range conds {
		a[i] = c
	}
	return bson.D{{Key: "$or", Value: a}}
}

func (f *filter) addEach(key string, values []string, hasModifier bool, modifier string,
	cond func(key string, vals []string) (bson.D, error)) error {
	if hasModifier {
		return badModifier(key, modifier)
	}
	for _, v := range values {
		vals, err := splitValues(key, v)
		if err != nil {
			return err
		}
		d, err := cond(key, vals)
		if err != nil {
			return err
		}
		f.addAll(d)
	}
	return nil
}

func idCondition(_ string, vals []string) (bson.D, error) {
	return oneOf("_id", vals), nil
}

func projectCondition(key string, vals []string) (bson.D, error) {
	ids := make([]string, len(vals))
	for i, v := range vals {
		ids[i] = strings.TrimPrefix(v, "Project/")
		if ids[i] == "" || strings.Contains(ids[i], "/") {
			return nil, badValue(key, "project", v)
		}
	}
	return oneOf("project", ids), nil
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
	for _, s := range out {
		if s == "" {
			return nil, fhir.BadRequest("Empty value in search parameter "+clip(key), key)
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
		f.add(field, bson.D{{Key: "$exists", Value: !missing}})
		return nil
	}
	vals, err := splitValues(key, v)
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
		return f.addDates(key, v, p.f.lo, p.f.hi)
	case "number", "quantity":
		var conds []bson.D
		for _, x := range vals {
			c, err := numberCondition(p, key, x)
			if err != nil {
				return err
			}
			conds = append(conds, c)
		}
		f.addAll(anyOf(conds))
		return nil
	}
	return badModifier(key, modifier)
}

func (f *filter) addString(p *Param, key, modifier string, hasModifier bool, vals []string) error {
	switch {
	case !hasModifier:
		// Starts-with: an equality on the stored prefixes, plus the regular
		// expression only for a value longer than the stored prefixes.
		var pfx, patterns []string
		for _, v := range vals {
			n := normalize(unescapeValue(v))
			if n == "" {
				return badValue(key, "string", v)
			}
			r := []rune(n)
			if len(r) > maxPrefix {
				patterns = append(patterns, "^"+quoteRegex(n))
				n = string(r[:maxPrefix])
			}
			pfx = append(pfx, n)
		}
		if len(vals) == 1 || len(patterns) == 0 {
			f.addAll(oneOf(p.f.prefix, pfx))
			if len(patterns) > 0 {
				f.add(p.field, regexCondition(patterns))
			}
			return nil
		}
		// Several values, some long: OR of per-value conditions.
		conds := make([]bson.D, len(vals))
		for i, v := range vals {
			n := normalize(unescapeValue(v))
			if r := []rune(n); len(r) > maxPrefix {
				conds[i] = bson.D{{Key: p.f.prefix, Value: string(r[:maxPrefix])}, {Key: p.field, Value: bson.D{{Key: "$regex", Value: "^" + quoteRegex(n)}}}}
			} else {
				conds[i] = bson.D{{Key: p.f.prefix, Value: n}}
			}
		}
		f.addAll(anyOf(conds))
	case modifier == "contains":
		anchor := ""
		patterns := make([]string, len(vals))
		for i, v := range vals {
			n := normalize(unescapeValue(v))
			if n == "" {
				return badValue(key, "string", v)
			}
			patterns[i] = anchor + quoteRegex(n)
		}
		f.add(p.field, regexCondition(patterns))
	case modifier == "exact":
		exact := make([]string, len(vals))
		for i, v := range vals {
			exact[i] = unescapeValue(v)
		}
		f.addAll(oneOf(p.f.exact, exact))
	default:
		return badModifier(key, modifier)
	}
	return nil
}

// quoteRegex escapes s for a regular expression. A NUL byte is written as
// \x00 because BSON stores a pattern NUL-terminated.
func quoteRegex(s string) string {
	return strings.ReplaceAll(regexp.QuoteMeta(s), "\x00", `\x00`)
}

// regexCondition matches any of the patterns.
func regexCondition(patterns []string) bson.D {
	if len(patterns) == 1 {
		return bson.D{{Key: "$regex", Value: patterns[0]}}
	}
	rs := make(bson.A, len(patterns))
	for i, p := range patterns {
		rs[i] = bson.Regex{Pattern: p}
	}
	return bson.D{{Key: "$in", Value: rs}}
}

func (f *filter) addToken(p *Param, key, modifier string, hasModifier bool, vals []string) error {
	if hasModifier && modifier == "text" {
		patterns := make([]string, len(vals))
		for i, v := range vals {
			n := normalize(unescapeValue(v))
			if n == "" {
				return badValue(key, "text", v)
			}
			patterns[i] = "^" + quoteRegex(n)
		}
		f.add(p.f.text, regexCondition(patterns))
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
		default:
			keys[i] = system + "|" + code
		}
		if p.boolean && code != "true" && code != "false" {
			return badValue(key, "boolean", v)
		}
	}
	if modifier == "not" {
		// $nin also matches resources without the field, as :not should.
		f.add(p.field, bson.D{{Key: "$nin", Value: keys}})
		return nil
	}
	f.addAll(oneOf(p.field, keys))
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
		f.addAll(oneOf(p.field, keys))
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
	f.addAll(oneOf(p.field, keys))
	return nil
}

func (f *filter) addURI(p *Param, key, modifier string, hasModifier bool, vals []string) error {
	for i, v := range vals {
		vals[i] = unescapeValue(v)
	}
	switch {
	case !hasModifier:
		f.addAll(oneOf(p.field, vals))
	case modifier == "below":
		patterns := make([]string, len(vals))
		for i, v := range vals {
			patterns[i] = "^" + quoteRegex(v)
		}
		f.add(p.field, regexCondition(patterns))
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
	vals, err := splitValues(key, v)
	if err != nil {
		return err
	}
	conds := make([]bson.D, len(vals))
	for i, x := range vals {
		prefix, rest := prefixed(x)
		pl, ph, err := parseDate(rest)
		if err != nil {
			return badValue(key, "date", x)
		}
		conds[i] = dateCondition(prefix, lo, hi, pl, ph)
	}
	f.addAll(anyOf(conds))
	return nil
}

func dateCondition(prefix, lo, hi string, pl, ph time.Time) bson.D {
	cmp := func(field, op string, t time.Time) bson.D {
		return bson.D{{Key: field, Value: bson.D{{Key: op, Value: t}}}}
	}
	or := func(a, b bson.D) bson.D { return bson.D{{Key: "$or", Value: bson.A{a, b}}} }
	if lo == hi { // an instant
		switch prefix {
		case "ne":
			return or(cmp(lo, "$lt", pl), cmp(lo, "$gt", ph))
		case "gt", "sa":
			return cmp(lo, "$gt", ph)
		case "lt", "eb":
			return cmp(lo, "$lt", pl)
		case "ge":
			return cmp(lo, "$gte", pl)
		case "le":
			return cmp(lo, "$lte", ph)
		case "ap":
			pl, ph = widen(pl, ph)
		}
		return bson.D{{Key: lo, Value: bson.D{{Key: "$gte", Value: pl}, {Key: "$lte", Value: ph}}}}
	}
	eq := bson.D{{Key: lo, Value: bson.D{{Key: "$gte", Value: pl}}}, {Key: hi, Value: bson.D{{Key: "$lte", Value: ph}}}}
	switch prefix {
	case "ne":
		return or(cmp(lo, "$lt", pl), cmp(hi, "$gt", ph))
	case "gt":
		return cmp(hi, "$gt", ph)
	case "lt":
		return cmp(lo, "$lt", pl)
	case "ge":
		return or(cmp(hi, "$gt", ph), eq)
	case "le":
		return or(cmp(lo, "$lt", pl), eq)
	case "sa":
		return cmp(lo, "$gt", ph)
	case "eb":
		return cmp(hi, "$lt", pl)
	case "ap":
		pl, ph = widen(pl, ph)
		return bson.D{{Key: lo, Value: bson.D{{Key: "$lte", Value: ph}}}, {Key: hi, Value: bson.D{{Key: "$gte", Value: pl}}}}
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
func numberCondition(p *Param, key, v string) (bson.D, error) {
	prefix, rest := prefixed(v)
	var unit string
	if p.Type == "quantity" {
		num, sysCode, found := strings.Cut(rest, "|")
		if found {
			system, code, ok := strings.Cut(sysCode, "|")
			if !ok || code == "" {
				return nil, badValue(key, "quantity", v)
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
		return nil, badValue(key, "number", v)
	}
	half := 0.5 * precision(rest)
	field := p.field
	cmp := func(op string, y float64) bson.D { return bson.D{{Key: field, Value: bson.D{{Key: op, Value: y}}}} }
	var c bson.D
	switch prefix {
	case "eq":
		c = bson.D{{Key: field, Value: bson.D{{Key: "$gte", Value: x - half}, {Key: "$lt", Value: x + half}}}}
	case "ne":
		c = bson.D{{Key: "$or", Value: bson.A{cmp("$lt", x-half), cmp("$gte", x+half)}}}
	case "gt":
		c = cmp("$gt", x)
	case "lt":
		c = cmp("$lt", x)
	case "ge":
		c = cmp("$gte", x)
	case "le":
		c = cmp("$lte", x)
	case "ap":
		d := math.Abs(x) * 0.1
		c = bson.D{{Key: field, Value: bson.D{{Key: "$gte", Value: x - d}, {Key: "$lte", Value: x + d}}}}
	default:
		return nil, badValue(key, "number prefix", v)
	}
	if unit != "" {
		c = append(c, bson.E{Key: p.f.unit, Value: unit})
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
