package bus

import (
	"encoding/json"
	"sort"
	"strings"
	"unicode/utf8"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Encoding and decoding a request's route parameters and principal with
// encoding/json was a seventh of a FHIR read's CPU (issue 39). Both are
// written and read faster here, to the same bytes and values: parameters
// that need no escapes by a plain scan, and principals, which repeat from
// one request of a caller to the next, from caches of those already done.

// decodeParams reads the route parameters EncodeRequest wrote.
func decodeParams(s string) (map[string]string, error) {
	if m, ok := plainParams(s); ok {
		return m, nil
	}
	var m map[string]string
	err := json.Unmarshal([]byte(s), &m)
	return m, err
}

// plainParams reads a JSON object of strings as json.Marshal writes it
// when no value needs an escape ({"id":"1","type":"Patient"}); ok is false
// for anything else (escapes, spaces, other types), which encoding/json
// then reads.
func plainParams(s string) (map[string]string, bool) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' || strings.IndexByte(s, '\\') >= 0 {
		return nil, false
	}
	m := make(map[string]string, 2)
	for rest := s[1 : len(s)-1]; rest != ""; {
		k, after, ok := plainString(rest)
		if !ok || after == "" || after[0] != ':' {
			return nil, false
		}
		v, after, ok := plainString(after[1:])
		if !ok {
			return nil, false
		}
		m[k] = v
		if after == "" {
			break
		}
		if after[0] != ',' || len(after) == 1 {
			return nil, false
		}
		rest = after[1:]
	}
	return m, true
}

// plainString reads a JSON string without escapes at the start of s.
// Control characters and invalid UTF-8, which encoding/json escapes or
// replaces, are refused.
func plainString(s string) (v, rest string, ok bool) {
	if s == "" || s[0] != '"' {
		return "", "", false
	}
	end := strings.IndexByte(s[1:], '"')
	if end < 0 {
		return "", "", false
	}
	v = s[1 : 1+end]
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 {
			return "", "", false
		}
	}
	if !utf8.ValidString(v) {
		return "", "", false
	}
	return v, s[2+end:], true
}

// principals holds decoded principals by their encoding; maxPrincipals
// bounds it (callers active at once, not callers ever).
var principals, _ = lru.New[string, Principal](maxPrincipals)

const maxPrincipals = 4096

// decodePrincipal reads the principal EncodeRequest wrote; each request
// gets its own copy.
func decodePrincipal(s string) (*Principal, error) {
	if p, ok := principals.Get(s); ok {
		return &p, nil
	}
	p := &Principal{}
	if err := json.Unmarshal([]byte(s), p); err != nil {
		return nil, err
	}
	principals.Add(s, *p)
	return p, nil
}

// encodeParams writes route parameters as json.Marshal does: keys sorted,
// no spaces. Keys and values of printable ASCII that JSON does not escape
// are written here; anything else by encoding/json.
func encodeParams(params map[string]string) string {
	n := 2
	for k, v := range params {
		if !plainASCII(k) || !plainASCII(v) {
			b, _ := json.Marshal(params)
			return string(b)
		}
		n += len(k) + len(v) + 6
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(k)
		b.WriteString(`":"`)
		b.WriteString(params[k])
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// plainASCII: printable ASCII that json.Marshal writes as is (it escapes
// quotes, backslashes and, for HTML, <, > and &).
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// encoded holds principals' encodings; a Principal is comparable, so it
// is its own key.
var encoded, _ = lru.New[Principal, string](maxPrincipals)

// encodePrincipal writes a principal as json.Marshal does.
func encodePrincipal(p *Principal) string {
	if s, ok := encoded.Get(*p); ok {
		return s
	}
	b, _ := json.Marshal(p)
	encoded.Add(*p, string(b))
	return string(b)
}
