// Package criteria reads the criteria of an AccessPolicy entry
// ("Observation?subject=%patient"): the resource type searched and its
// parameters, with the membership's values substituted for the variables.
// pkg/access compiles policies with it; pkg/writerules refuses, at write,
// a policy whose criteria it cannot read.
package criteria

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// Params are the values an access[] entry instantiates its policy with:
// its parameter[] list, then %profile and %patient from the membership.
// A reference parameter's value is its reference string ("Patient/123").
type Params map[string]string

// lookup resolves a variable: %name is the value, %name.id the id part of a
// reference (the value itself when it is not Type/id).
func (ps Params) lookup(name string, idPart bool) (string, bool) {
	v, ok := ps[name]
	if !ok {
		return "", false
	}
	if idPart {
		if _, id, ok := fhir.SplitReference(v); ok {
			return id, true
		}
	}
	return v, true
}

// Criteria are a policy entry's criteria parsed and instantiated.
type Criteria struct {
	// Type is the resource type searched, Query its parameters.
	Type  string
	Query url.Values
	// Unresolved names a %variable the entry's parameters do not give; such
	// an entry matches nothing, as in Medplum, where the text stays in the
	// query and matches no resource.
	Unresolved string
	// Text is the criteria with the values in ("Patient?_id=123"), its
	// parameters in their order: what Medplum's clients read.
	Text string
}

// Parse splits "Type?a=1&b=%patient" into its type and parameters
// and substitutes the variables in the parsed values, never in the text of
// the query: a parameter's value cannot add parameters, and its commas are
// escaped so that it cannot add alternatives either.
//
// A '%' starts a variable when a known parameter's name follows it;
// otherwise "%XX" with two hex digits is a percent-escape, and any other
// %name is an unresolved variable.
func Parse(s string, ps Params) (*Criteria, error) {
	typ, raw, _ := strings.Cut(s, "?")
	if typ == "" {
		return nil, fmt.Errorf("criteria %q: no resource type", s)
	}
	c := &Criteria{Type: typ, Query: url.Values{}}
	var text []string
	for _, pair := range strings.Split(raw, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		key, err := url.QueryUnescape(k)
		if err != nil || key == "" {
			return nil, fmt.Errorf("criteria %q: invalid parameter name %q", s, k)
		}
		val, unresolved, err := Substitute(v, ps)
		if err != nil {
			return nil, fmt.Errorf("criteria %q: %w", s, err)
		}
		if unresolved != "" && c.Unresolved == "" {
			c.Unresolved = unresolved
		}
		c.Query.Add(key, val)
		text = append(text, k+"="+textEscaper.Replace(val))
	}
	c.Text = typ
	if len(text) > 0 {
		c.Text += "?" + strings.Join(text, "&")
	}
	return c, nil
}

// textEscaper escapes what would change a value's meaning in the text of a
// query, and keeps the rest (a reference's '/') readable.
var textEscaper = strings.NewReplacer("%", "%25", "&", "%26", "#", "%23", "+", "%2B")

// Substitute decodes one raw query value, replacing its variables: the
// unresolved one first named, if any, is returned too.
func Substitute(raw string, ps Params) (value, unresolved string, err error) {
	var out, lit strings.Builder
	flush := func() error {
		if lit.Len() == 0 {
			return nil
		}
		s, err := url.QueryUnescape(lit.String())
		if err != nil {
			return fmt.Errorf("invalid escape in %q", raw)
		}
		out.WriteString(s)
		lit.Reset()
		return nil
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '%' {
			lit.WriteByte(raw[i])
			continue
		}
		name := identAt(raw[i+1:])
		rest := raw[i+1+len(name):]
		idPart := strings.HasPrefix(rest, ".id") && (len(rest) == 3 || !identChar(rest[3]))
		if v, ok := ps.lookup(name, idPart); ok && name != "" {
			if err := flush(); err != nil {
				return "", "", err
			}
			out.WriteString(escapeValue(v))
			i += len(name)
			if idPart {
				i += 3
			}
			continue
		}
		if i+2 < len(raw) && isHex(raw[i+1]) && isHex(raw[i+2]) {
			lit.WriteByte('%')
			continue
		}
		if name != "" {
			if unresolved == "" {
				unresolved = "%" + name
			}
			lit.WriteString(url.QueryEscape("%" + name))
			i += len(name)
			continue
		}
		return "", "", fmt.Errorf("invalid escape in %q", raw)
	}
	if err := flush(); err != nil {
		return "", "", err
	}
	return out.String(), unresolved, nil
}

// identAt is the parameter name at the start of s: a letter or '_', then
// letters, digits, '_' and '-'.
func identAt(s string) string {
	n := 0
	for n < len(s) && identChar(s[n]) && (n > 0 || !(s[n] >= '0' && s[n] <= '9' || s[n] == '-')) {
		n++
	}
	return s[:n]
}

func identChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// escapeValue keeps a substituted value one value of the search syntax:
// a comma would otherwise make alternatives.
func escapeValue(v string) string {
	v = strings.ReplaceAll(v, `\`, `\\`)
	return strings.ReplaceAll(v, ",", `\,`)
}
