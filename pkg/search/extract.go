package search

import (
	"encoding/json"
	"strconv"
	"strings"
)

// value is one element a path selected, with its FHIR type when known.
type value struct {
	v any
	t string
}

// eval runs a parameter's paths over a resource (decoded JSON) and appends
// what they select to out.
func (p *Param) eval(resource map[string]any, out []value) []value {
	var buf [2][]value
	for _, pa := range p.paths {
		cur := append(buf[0][:0], value{v: resource})
		next := buf[1][:0]
		for _, st := range pa {
			next = next[:0]
			switch st.op {
			case opField:
				for _, c := range cur {
					m, ok := c.v.(map[string]any)
					if !ok {
						continue
					}
					for i, k := range st.keys {
						switch x := m[k].(type) {
						case nil:
						case []any:
							for _, e := range x {
								if e != nil {
									next = append(next, value{e, st.types[i]})
								}
							}
						default:
							next = append(next, value{x, st.types[i]})
						}
					}
				}
			case opWhere:
				for _, c := range cur {
					if m, ok := c.v.(map[string]any); ok {
						if s, ok := m[st.arg].(string); ok && s == st.val {
							next = append(next, c)
						}
					}
				}
			case opWhereIs:
				for _, c := range cur {
					if refType(c.v) == st.arg {
						next = append(next, c)
					}
				}
			case opRefType:
				for _, c := range cur {
					if t := refType(c.v); t != "" {
						next = append(next, value{t, "code"})
					}
				}
			case opExists:
				next = append(next, value{len(cur) > 0, "boolean"})
			case opTruthy:
				truthy := false
				for _, c := range cur {
					if b, ok := c.v.(bool); !ok || b {
						truthy = true
					}
				}
				next = append(next, value{truthy, "boolean"})
			}
			cur, next = next, cur
		}
		out = append(out, cur...)
		buf[0], buf[1] = cur, next
	}
	return out
}

// refType is the resource type a Reference names, from its reference or
// else its type element; "" when neither says.
func refType(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	if s, ok := m["reference"].(string); ok {
		if t, _, ok := splitRef(s); ok {
			return t
		}
	}
	t, _ := m["type"].(string)
	return t
}

// splitRef splits a literal reference, relative ("Patient/1") or absolute
// ("https://host/fhir/R4/Patient/1", with or without /_history/n), into
// its type and id.
func splitRef(s string) (typ, id string, ok bool) {
	if i := strings.Index(s, "/_history/"); i >= 0 {
		s = s[:i]
	}
	i := strings.LastIndexByte(s, '/')
	if i <= 0 || i == len(s)-1 {
		return "", "", false
	}
	id, rest := s[i+1:], s[:i]
	typ = rest[strings.LastIndexByte(rest, '/')+1:]
	if !isTypeName(typ) {
		return "", "", false
	}
	return typ, id, true
}

// isTypeName reports whether s looks like a resource type: a capital
// letter, then letters and digits.
func isTypeName(s string) bool {
	if s == "" || s[0] < 'A' || s[0] > 'Z' || len(s) > 64 {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// str reads a string element.
func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

// each calls f for each string in a string or array-of-strings element.
func each(m map[string]any, k string, f func(string)) {
	switch x := m[k].(type) {
	case string:
		f(x)
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok {
				f(s)
			}
		}
	}
}

// objects calls f for each object in an object or array-of-objects element.
func objects(m map[string]any, k string, f func(map[string]any)) {
	switch x := m[k].(type) {
	case map[string]any:
		f(x)
	case []any:
		for _, e := range x {
			if o, ok := e.(map[string]any); ok {
				f(o)
			}
		}
	}
}

// number reads a JSON number however it was decoded.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	}
	return 0, false
}

// scalarString renders a primitive value as its FHIR string form.
func scalarString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case json.Number:
		return x.String(), true
	}
	if f, ok := number(v); ok {
		return strconv.FormatFloat(f, 'f', -1, 64), true
	}
	return "", false
}

// shape guesses the FHIR type of an object whose type the definitions did
// not give (elements of types without a StructureDefinition).
func shape(m map[string]any) string {
	switch {
	case m["coding"] != nil:
		return "CodeableConcept"
	case m["reference"] != nil:
		return "Reference"
	case m["family"] != nil || m["given"] != nil:
		return "HumanName"
	case m["line"] != nil || m["city"] != nil || m["postalCode"] != nil:
		return "Address"
	case m["start"] != nil || m["end"] != nil:
		return "Period"
	case m["event"] != nil || m["repeat"] != nil:
		return "Timing"
	case m["code"] != nil && m["value"] == nil:
		return "Coding"
	case m["value"] != nil:
		if _, ok := number(m["value"]); ok {
			return "Quantity"
		}
		return "Identifier"
	case m["text"] != nil:
		return "CodeableConcept"
	}
	return ""
}

func typeOf(v value, m map[string]any) string {
	if v.t != "" {
		return v.t
	}
	return shape(m)
}
