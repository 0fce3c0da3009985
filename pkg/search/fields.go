package search

import (
	"math"
	"strings"
	"time"
)

// Fields computes the flat search fields to store beside a resource (keys s_<code>); resource is decoded JSON (numbers as json.Number or float64).
//
// For a parameter with code c (every '-' written '_'):
//
//	string     s_c []string (normalised: lower case, no accents), s_c_exact []string
//	token      s_c []string ("code", "system|code", "system|", or "|code" without a system), s_c_text []string, s_c_sort string
//	reference  s_c []string ("Type/id" and "id"; canonical URLs as written and without |version)
//	date       s_c_lo, s_c_hi time.Time (earliest start, latest end over all values)
//	number     s_c []float64
//	quantity   s_c []float64, s_c_unit []string (unit, code, "system|code")
//	uri        s_c []string
//
// A field is absent when the resource has no value for it, which is what
// :missing tests.
func Fields(resourceType string, resource map[string]any) map[string]any {
	if resource == nil {
		return map[string]any{}
	}
	out := make(map[string]any, 32)
	var vals []value
	for _, p := range loadRegistry().list(resourceType) {
		vals = p.eval(resource, vals[:0])
		if len(vals) == 0 {
			continue
		}
		switch p.Type {
		case "string":
			stringFields(p, vals, out)
		case "token":
			tokenFields(p, vals, out)
		case "reference":
			referenceFields(p, vals, out)
		case "date":
			dateFields(p, vals, out)
		case "number":
			numberFields(p, vals, out)
		case "quantity":
			quantityFields(p, vals, out)
		case "uri":
			uriFields(p, vals, out)
		}
	}
	return out
}

// set is a small ordered set of strings; parameters hold a handful of values.
type set []string

func (s *set) add(v string) {
	if v == "" {
		return
	}
	for _, x := range *s {
		if x == v {
			return
		}
	}
	*s = append(*s, v)
}

func stringFields(p *Param, vals []value, out map[string]any) {
	norm, exact := make(set, 0, 2*len(vals)), make(set, 0, 2*len(vals))
	add := func(s string) {
		if n := normalize(s); n != "" {
			norm.add(n)
			if len(s) <= maxStored {
				exact.add(s)
			}
		}
	}
	for _, v := range vals {
		stringsOf(v, add)
	}
	if len(norm) == 0 {
		return
	}
	out[p.field] = []string(norm)
	out[p.f.exact] = []string(exact)
	if gramsOwner(p) {
		if g := gramsOf(norm); len(g) > 0 {
			out[p.f.grams] = g
		}
	}
}

// stringsOf finds the text a string parameter matches in one value: a
// HumanName contributes the full name, text, family, each given, prefix and
// suffix; an Address its text and parts; a ContactPoint or Identifier its
// value; a CodeableConcept or Coding its text and displays.
func stringsOf(v value, add func(string)) {
	m, ok := v.v.(map[string]any)
	if !ok {
		if s, ok := scalarString(v.v); ok && v.t != "boolean" {
			add(s)
		}
		return
	}
	switch typeOf(v, m) {
	case "HumanName":
		var full []string
		each(m, "given", func(s string) { full = append(full, s) })
		if f := str(m, "family"); f != "" {
			full = append(full, f)
		}
		if len(full) > 1 {
			add(strings.Join(full, " "))
		}
		add(str(m, "text"))
		add(str(m, "family"))
		each(m, "given", add)
		each(m, "prefix", add)
		each(m, "suffix", add)
	case "Address":
		add(str(m, "text"))
		each(m, "line", add)
		for _, k := range []string{"city", "district", "state", "postalCode", "country"} {
			add(str(m, k))
		}
	case "ContactPoint", "Identifier":
		add(str(m, "value"))
	case "CodeableConcept":
		add(str(m, "text"))
		objects(m, "coding", func(c map[string]any) { add(str(c, "display")) })
	case "Coding":
		add(str(m, "display"))
	case "Annotation":
		add(str(m, "text"))
	}
}

func tokenFields(p *Param, vals []value, out map[string]any) {
	keys := make(set, 0, 3*len(vals))
	var text set
	first := ""
	addToken := func(system, code string) {
		if p.caseInsensitive {
			code = strings.ToLower(code)
		}
		if code != "" {
			if first == "" {
				first = code
			}
			keys.add(code)
			if system != "" || !p.scalar {
				keys.add(system + "|" + code) // "|code" when there is no system
			}
		}
		if system != "" {
			keys.add(system + "|")
		}
	}
	addText := func(s string) {
		if n := normalize(s); n != "" {
			text.add(n)
		}
	}
	for _, v := range vals {
		tokensOf(v, addToken, addText)
	}
	if len(keys) > 0 {
		out[p.field] = []string(keys)
		out[p.f.sort] = first
	}
	if len(text) > 0 {
		out[p.f.text] = []string(text)
	}
}

// tokensOf finds the (system, code) pairs and the texts of one value.
func tokensOf(v value, addToken func(system, code string), addText func(string)) {
	m, ok := v.v.(map[string]any)
	if !ok {
		if s, ok := scalarString(v.v); ok {
			addToken("", s)
		}
		return
	}
	coding := func(c map[string]any) {
		addToken(str(c, "system"), str(c, "code"))
		addText(str(c, "display"))
	}
	switch typeOf(v, m) {
	case "CodeableConcept":
		objects(m, "coding", coding)
		addText(str(m, "text"))
	case "Coding":
		coding(m)
	case "Identifier":
		addToken(str(m, "system"), str(m, "value"))
		if t, ok := m["type"].(map[string]any); ok {
			addText(str(t, "text"))
		}
	case "ContactPoint":
		addToken(str(m, "system"), str(m, "value"))
	}
}

func referenceFields(p *Param, vals []value, out map[string]any) {
	var keys set
	for _, v := range vals {
		switch x := v.v.(type) {
		case map[string]any:
			s := str(x, "reference")
			switch {
			case s == "" || s[0] == '#': // none, or a contained resource
			default:
				if typ, id, ok := splitRef(s); ok {
					keys.add(typ + "/" + id)
					keys.add(id)
				} else {
					keys.add(s) // urn:uuid:..., or not a literal reference
				}
			}
		case string: // canonical, uri
			keys.add(x)
			if i := strings.LastIndexByte(x, '|'); i > 0 {
				keys.add(x[:i])
			}
		}
	}
	if len(keys) > 0 {
		out[p.field] = []string(keys)
	}
}

func dateFields(p *Param, vals []value, out map[string]any) {
	var lo, hi time.Time
	found := false
	add := func(l, h time.Time) {
		if !found || l.Before(lo) {
			lo = l
		}
		if !found || h.After(hi) {
			hi = h
		}
		found = true
	}
	for _, v := range vals {
		dateRanges(v, add)
	}
	if found {
		out[p.f.lo] = lo
		out[p.f.hi] = hi
	}
}

// dateRanges finds the time ranges one value covers: a date, dateTime or
// instant; a Period (open ends reach minTime and maxTime); a Timing's
// events and bounds.
func dateRanges(v value, add func(lo, hi time.Time)) {
	switch x := v.v.(type) {
	case string:
		if lo, hi, err := parseDate(x); err == nil {
			add(lo, hi)
		}
	case map[string]any:
		switch typeOf(v, x) {
		case "Period":
			period(x, add)
		case "Timing":
			each(x, "event", func(s string) {
				if lo, hi, err := parseDate(s); err == nil {
					add(lo, hi)
				}
			})
			if r, ok := x["repeat"].(map[string]any); ok {
				if b, ok := r["boundsPeriod"].(map[string]any); ok {
					period(b, add)
				}
			}
		}
	}
}

func period(m map[string]any, add func(lo, hi time.Time)) {
	lo, hi := minTime, maxTime
	okStart, okEnd := false, false
	if l, _, err := parseDate(str(m, "start")); err == nil {
		lo, okStart = l, true
	}
	if _, h, err := parseDate(str(m, "end")); err == nil {
		hi, okEnd = h, true
	}
	if okStart || okEnd {
		add(lo, hi)
	}
}

func numberFields(p *Param, vals []value, out map[string]any) {
	var nums []float64
	for _, v := range vals {
		if f, ok := number(v.v); ok && !math.IsNaN(f) && !math.IsInf(f, 0) {
			nums = append(nums, f)
		}
	}
	if len(nums) > 0 {
		out[p.field] = nums
	}
}

func quantityFields(p *Param, vals []value, out map[string]any) {
	var nums []float64
	var units set
	for _, v := range vals {
		m, ok := v.v.(map[string]any)
		if !ok {
			continue
		}
		f, ok := number(m["value"])
		if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		nums = append(nums, f)
		system, code := str(m, "system"), str(m, "code")
		units.add(str(m, "unit"))
		units.add(code)
		units.add(str(m, "currency")) // Money
		if system != "" && code != "" {
			units.add(system + "|" + code)
		}
	}
	if len(nums) > 0 {
		out[p.field] = nums
	}
	if len(units) > 0 {
		out[p.f.unit] = []string(units)
	}
}

func uriFields(p *Param, vals []value, out map[string]any) {
	var uris set
	for _, v := range vals {
		if s, ok := v.v.(string); ok && len(s) <= maxStored {
			uris.add(s)
		}
	}
	if len(uris) > 0 {
		out[p.field] = []string(uris)
	}
}
