package fhirschema

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// MaxIssues caps the issues one validation reports; a document that is
// wrong everywhere gets the first MaxIssues, in schema order.
const MaxIssues = 20

// maxDepth bounds object nesting. encoding/json stops at 10,000 levels;
// real resources stay far below this, and a map built in code could even
// contain itself.
const maxDepth = 128

// IsResourceType reports whether t is a resource type Pinion stores (R4 + Medplum's own).
func IsResourceType(t string) bool {
	_, ok := tables().resources[t]
	return ok
}

// ResourceTypes lists them, sorted.
func ResourceTypes() []string {
	return slices.Clone(tables().names)
}

// Options: Strict turns on the checks Medplum runs for projects with strictMode (cardinality of max, required value-set bindings).
type Options struct{ Strict bool }

// Validate checks a decoded resource; it returns nil or a *fhir.Error (400) with one issue per problem.
func Validate(resource map[string]any, opts Options) error {
	s := tables()
	v := pool.Get().(*validator)
	defer v.release()
	// A first pass walks maps in Go's random order and stops at the first
	// problem: that is all a valid resource, the common case, costs. Only an
	// invalid resource is walked again, in schema order, to report its
	// issues deterministically.
	v.reset(s, opts, false)
	v.root(resource)
	if !v.bad {
		return nil
	}
	v.reset(s, opts, true)
	v.root(resource)
	if len(v.issues) == 0 { // cannot happen: both passes check the same rules
		return fhir.Invalid(fhir.FieldIssue("", "Invalid resource"))
	}
	return fhir.Invalid(slices.Clone(v.issues)...)
}

var pool = sync.Pool{New: func() any { return new(validator) }}

// seg is one step of the path to the value being checked: a property name,
// or an array index when key is empty.
type seg struct {
	key   string
	index int
}

// seen records which elements of a type an object holds, by element index.
type seen [maxElements / 64]uint64

func (s *seen) has(i int) bool { return s[i>>6]&(1<<(i&63)) != 0 }
func (s *seen) set(i int)      { s[i>>6] |= 1 << (i & 63) }

type validator struct {
	s       *schema
	strict  bool
	collect bool // second pass: report every issue, in schema order
	bad     bool // an issue was found
	stop    bool // no more issues wanted
	depth   int
	path    []seg
	issues  []fhir.Issue
}

func (v *validator) reset(s *schema, opts Options, collect bool) {
	*v = validator{s: s, strict: opts.Strict, collect: collect, path: v.path[:0], issues: v.issues[:0]}
}

func (v *validator) release() {
	if cap(v.path) > 256 || cap(v.issues) > 2*MaxIssues {
		v.path, v.issues = nil, nil
	}
	clear(v.issues[:cap(v.issues)])
	clear(v.path[:cap(v.path)])
	v.s = nil
	pool.Put(v)
}

func (v *validator) push(key string) { v.path = append(v.path, seg{key: key}) }
func (v *validator) pushIndex(i int) { v.path = append(v.path, seg{index: i}) }
func (v *validator) pop()            { v.path = v.path[:len(v.path)-1] }

// expression renders the current path, FHIRPath style:
// Patient.name[0].given[1].
func (v *validator) expression(extra string) string {
	var b strings.Builder
	for i, sg := range v.path {
		switch {
		case sg.key == "":
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(sg.index))
			b.WriteByte(']')
		case i > 0:
			b.WriteByte('.')
			b.WriteString(sg.key)
		default:
			b.WriteString(sg.key)
		}
	}
	if extra != "" {
		if len(v.path) > 0 {
			b.WriteByte('.')
		}
		b.WriteString(extra)
	}
	return b.String()
}

// report records an issue at the current path.
func (v *validator) report(msg string) { v.reportAt("", msg) }

// reportAt records an issue at the current path plus key.
func (v *validator) reportAt(key, msg string) {
	v.bad = true
	if !v.collect {
		v.stop = true
		return
	}
	v.issues = append(v.issues, fhir.FieldIssue(v.expression(key), msg))
	if len(v.issues) >= MaxIssues {
		v.stop = true
	}
}

func (v *validator) root(resource map[string]any) {
	if resource == nil {
		v.reportAt("resourceType", "Missing resource type")
		return
	}
	t := v.resourceType(resource, nil)
	if t == nil {
		return
	}
	v.push(t.name)
	v.object(resource, t)
	v.pop()
}

// resourceType finds the type of a resource object by its resourceType,
// reporting a missing or unknown one. want, when set, is the only type the
// element admits.
func (v *validator) resourceType(obj map[string]any, want *typeDef) *typeDef {
	raw, ok := obj["resourceType"]
	if !ok {
		v.reportAt("resourceType", "Missing resource type")
		return nil
	}
	name, ok := raw.(string)
	if !ok {
		v.reportAt("resourceType", "Invalid JSON type: expected string, but got "+jsType(raw))
		return nil
	}
	t := v.s.resources[name]
	if t == nil {
		v.reportAt("resourceType", "Unknown resource type")
		return nil
	}
	if want != nil && t != want {
		v.reportAt("resourceType", "Invalid resource type: expected "+want.name+", but got "+name)
		return nil
	}
	return t
}

// object checks a JSON object against a complex, backbone or resource type
// (or a primitive's id/extension companion object).
func (v *validator) object(obj map[string]any, t *typeDef) {
	if len(obj) == 0 {
		v.report("Invalid empty value")
		return
	}
	if v.depth >= maxDepth {
		v.report("Maximum nesting depth exceeded")
		return
	}
	v.depth++
	defer func() { v.depth-- }()

	var present, extPresent seen
	if v.collect {
		for _, k := range orderedKeys(obj, t) {
			v.property(obj, t, k, obj[k], &present, &extPresent)
			if v.stop {
				return
			}
		}
	} else {
		for k, val := range obj {
			v.property(obj, t, k, val, &present, &extPresent)
			if v.stop {
				return
			}
		}
	}
	for _, el := range t.required {
		if !present.has(el.index) && !extPresent.has(el.index) {
			v.reportAt(el.name, "Missing required property")
			if v.stop {
				return
			}
		}
	}
	if v.strict && t == v.s.extension {
		v.checkExtension(&present, &extPresent)
	}
}

// property checks one key of an object.
func (v *validator) property(obj map[string]any, t *typeDef, k string, val any, present, extPresent *seen) {
	if k == "resourceType" && t.kind == kindResource {
		return // the discriminator, checked by whoever picked t
	}
	if p := t.props[k]; p != nil {
		el := p.el
		if el.choice {
			if present.has(el.index) {
				v.reportAt(el.name, `Duplicate choice of type property "`+el.name+`"`)
				return
			}
			if extPresent.has(el.index) {
				if _, ok := obj["_"+k]; !ok {
					v.reportAt(el.name, `Type of primitive extension does not match the type of property "`+el.name+`"`)
					return
				}
			}
		}
		present.set(el.index)
		v.push(k)
		v.value(obj, k, p, val)
		v.pop()
		return
	}
	if len(k) > 1 && k[0] == '_' {
		if p := t.props[k[1:]]; p != nil && p.typ != nil && p.typ.kind == kindPrimitive {
			el := p.el
			if el.choice {
				if extPresent.has(el.index) {
					v.reportAt(el.name, `Duplicate choice of type property "`+el.name+`"`)
					return
				}
				if present.has(el.index) {
					if _, ok := obj[k[1:]]; !ok {
						v.reportAt(el.name, `Type of primitive extension does not match the type of property "`+el.name+`"`)
						return
					}
				}
			}
			extPresent.set(el.index)
			v.push(k)
			v.primitiveExtension(obj, k[1:], p, val)
			v.pop()
			return
		}
	}
	v.reportAt(k, `Invalid additional property "`+k+`"`)
}

// value checks the value of one property: its cardinality, then each item.
func (v *validator) value(obj map[string]any, k string, p *prop, val any) {
	el := p.el
	if val == nil {
		v.report("Invalid null value")
		return
	}
	if !el.array {
		if _, ok := val.([]any); ok {
			v.report("Expected single value for property")
			return
		}
		if v.strict && el.max == 0 {
			v.report(cardinality(el, 1))
		}
		v.item(p, val)
		return
	}
	arr, ok := val.([]any)
	if !ok {
		v.report("Expected array of values for property")
		return
	}
	if len(arr) == 0 {
		v.report("Invalid empty value")
		return
	}
	if v.strict && el.max >= 0 && len(arr) > el.max {
		v.report(cardinality(el, len(arr)))
	}
	for i, item := range arr {
		v.pushIndex(i)
		if item == nil {
			// The one place FHIR JSON allows null: a primitive array whose
			// extension array has an entry at this index.
			if p.typ == nil || p.typ.kind != kindPrimitive || !hasItem(obj["_"+k], i) {
				v.report("Invalid null value")
			}
		} else {
			v.item(p, item)
		}
		v.pop()
		if v.stop {
			return
		}
	}
}

func cardinality(el *element, n int) string {
	hi := "*"
	if el.max >= 0 {
		hi = strconv.Itoa(el.max)
	}
	return "Invalid number of values: expected " + strconv.Itoa(el.min) + ".." + hi + ", but found " + strconv.Itoa(n)
}

// hasItem reports whether a partner array has a non-null entry at i.
func hasItem(partner any, i int) bool {
	arr, ok := partner.([]any)
	return ok && i < len(arr) && arr[i] != nil
}

// item checks one value against the property's type.
func (v *validator) item(p *prop, val any) {
	t := p.typ
	if t != nil && t.kind == kindPrimitive {
		if v.primitive(t, val) && v.strict && p.el.binding != nil {
			if s, ok := val.(string); ok && !p.el.binding.codes[s] {
				v.report(bindingMessage(p.el, strconv.Quote(s)))
			}
		}
		return
	}
	obj, ok := val.(map[string]any)
	if !ok {
		v.report("Invalid JSON type: expected object, but got " + jsType(val))
		return
	}
	if t == nil || t.kind == kindResource {
		if t = v.resourceType(obj, t); t == nil {
			return
		}
	}
	v.object(obj, t)
	if v.strict && p.el.binding != nil && !v.stop {
		v.checkCoded(p.el, t, obj)
	}
}

// primitive checks a JSON primitive against a FHIR primitive type and
// reports whether it passed.
func (v *validator) primitive(t *typeDef, val any) bool {
	switch t.json {
	case jsonString:
		s, ok := val.(string)
		if !ok {
			v.report("Invalid JSON type: expected string, but got " + jsType(val))
			return false
		}
		switch {
		case s == "":
			v.report("Invalid empty value")
		case isBlank(s):
			v.report("String must contain non-whitespace content")
		case t.format != nil && !t.format.match(s):
			v.report("Invalid " + t.name + " format")
		default:
			return true
		}
		return false
	case jsonBoolean:
		if _, ok := val.(bool); !ok {
			v.report("Invalid JSON type: expected boolean, but got " + jsType(val))
			return false
		}
		return true
	}
	return v.number(t, val)
}

// number checks decimals and the integer types. A json.Number keeps its
// literal, which must match the type's regex (so an integer is written
// without a fraction or exponent); a float64 has lost its literal and is
// checked by value only.
func (v *validator) number(t *typeDef, val any) bool {
	var (
		lit string
		f   float64
	)
	switch n := val.(type) {
	case json.Number:
		lit = string(n)
		var err error
		if f, err = strconv.ParseFloat(lit, 64); err != nil {
			v.report("Invalid numeric value")
			return false
		}
	case float64:
		f = n
	case int:
		f = float64(n)
	case int64:
		f = float64(n)
	case int32:
		f = float64(n)
	case float32:
		f = float64(n)
	default:
		v.report("Invalid JSON type: expected number, but got " + jsType(val))
		return false
	}
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		v.report("Invalid numeric value")
		return false
	case t.number == numDecimal:
	case f != math.Trunc(f):
		v.report("Expected number to be an integer")
		return false
	case t.number == numPositiveInt && f <= 0:
		v.report("Expected number to be positive")
		return false
	case t.number == numUnsignedInt && f < 0:
		v.report("Expected number to be non-negative")
		return false
	case f < math.MinInt32 || f > math.MaxInt32:
		v.report("Expected number to be a 32-bit integer")
		return false
	}
	if lit != "" && t.format != nil && !t.format.match(lit) {
		v.report("Invalid " + t.name + " format")
		return false
	}
	return true
}

// primitiveExtension checks _name, the id and extensions of a primitive
// (FHIR JSON, json.html#primitive): an object, or for a repeating element
// an array of objects and nulls aligned with the values.
func (v *validator) primitiveExtension(obj map[string]any, base string, p *prop, val any) {
	if val == nil {
		v.report("Invalid null value")
		return
	}
	if !p.el.array {
		if _, ok := val.([]any); ok {
			v.report("Expected single value for property")
			return
		}
		v.elementObject(p.typ, val)
		return
	}
	arr, ok := val.([]any)
	if !ok {
		v.report("Expected array of values for property")
		return
	}
	if len(arr) == 0 {
		v.report("Invalid empty value")
		return
	}
	values, hasValues := obj[base].([]any)
	if hasValues && len(values) != len(arr) {
		v.report(`Expected ` + strconv.Itoa(len(values)) + ` values to match property "` + base + `"`)
	}
	for i, item := range arr {
		v.pushIndex(i)
		if item == nil {
			if !hasValues || i >= len(values) || values[i] == nil {
				v.report("Invalid null value")
			}
		} else {
			v.elementObject(p.typ, item)
		}
		v.pop()
		if v.stop {
			return
		}
	}
}

// elementObject checks the companion object of one primitive value against
// the primitive type's own elements (id, extension).
func (v *validator) elementObject(t *typeDef, val any) {
	obj, ok := val.(map[string]any)
	if !ok {
		v.report("Invalid JSON type: expected object, but got " + jsType(val))
		return
	}
	v.object(obj, t)
}

// checkExtension applies invariant ext-1, which Medplum enforces in strict
// mode: an extension has either nested extensions or a value, not both.
func (v *validator) checkExtension(present, extPresent *seen) {
	hasExt := present.has(v.s.extExtension)
	hasVal := present.has(v.s.extValue) || extPresent.has(v.s.extValue)
	if hasExt == hasVal {
		v.report("Constraint ext-1 not met: Must have either extensions or value[x], not both")
	}
}

// checkCoded applies a required binding to a Coding or CodeableConcept:
// a Coding's code (and system, when given) must be in the value set; a
// CodeableConcept needs one such Coding unless it has only text.
func (v *validator) checkCoded(el *element, t *typeDef, obj map[string]any) {
	switch t.name {
	case "Coding":
		if ok, coded := codingIn(el.binding, obj); coded && !ok {
			v.report(bindingMessage(el, jsonText(obj)))
		}
	case "CodeableConcept":
		codings, _ := obj["coding"].([]any)
		anyCoded := false
		for _, c := range codings {
			m, _ := c.(map[string]any)
			ok, coded := codingIn(el.binding, m)
			if ok {
				return
			}
			anyCoded = anyCoded || coded
		}
		if anyCoded {
			v.report(bindingMessage(el, jsonText(obj)))
		}
	}
}

// codingIn reports whether a Coding is in the value set, and whether it
// has a code at all.
func codingIn(vs *valueSet, coding map[string]any) (ok, coded bool) {
	code, _ := coding["code"].(string)
	if code == "" {
		return false, false
	}
	if system, _ := coding["system"].(string); system != "" {
		return vs.pairs[system+"|"+code], true
	}
	return vs.codes[code], true
}

// bindingMessage is Medplum's wording for a value outside a required value set.
func bindingMessage(el *element, value string) string {
	return "Value " + value + " did not satisfy terminology binding " + el.bindingURL
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "(unprintable)"
	}
	return string(b)
}

// jsType names a decoded JSON value the way JavaScript's typeof does, as
// Medplum's messages do, except that an array is called one.
func jsType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number, float64, float32, int, int64, int32:
		return "number"
	case []any:
		return "array"
	}
	return "object"
}

func isBlank(s string) bool { return strings.TrimSpace(s) == "" }

// orderedKeys sorts an object's keys for the reporting pass: by element
// order in the type, each _name right after its name, unknown keys last.
func orderedKeys(obj map[string]any, t *typeDef) []string {
	type ranked struct {
		rank int
		key  string
	}
	keys := make([]ranked, 0, len(obj))
	for k := range obj {
		r := math.MaxInt
		if p := t.props[k]; p != nil {
			r = 2 * p.el.index
		} else if len(k) > 1 && k[0] == '_' && t.props[k[1:]] != nil {
			r = 2*t.props[k[1:]].el.index + 1
		} else if k == "resourceType" {
			r = -1
		}
		keys = append(keys, ranked{r, k})
	}
	slices.SortFunc(keys, func(a, b ranked) int {
		if a.rank != b.rank {
			if a.rank < b.rank {
				return -1
			}
			return 1
		}
		return strings.Compare(a.key, b.key)
	})
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.key
	}
	return out
}
