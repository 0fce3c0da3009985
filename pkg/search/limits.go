package search

import (
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// Limits on the shape of one search. Each alternative becomes a term of
// the SQL the store runs (an OR, an instr, a bound variable): unbounded,
// one parameter with 500 alternatives blew SQLite's expression tree (a
// 500) and 495 :contains alternatives cost 6 s of CPU over 20,000
// Patients. A query past one is refused at parse time with a 400 naming
// the limit; the stores still map their own "too complex" errors to a 400
// (repo.Search) in case a shape slips through.
const (
	// MaxValuesPerParam bounds the comma-separated alternatives of one
	// parameter value (name=a,b,c), and the items of _sort and _elements.
	MaxValuesPerParam = 100
	// MaxValuesPerQuery bounds the alternatives of the whole query.
	MaxValuesPerQuery = 256
	// MaxParams bounds the terms of one query: each value of each search
	// parameter (a repeated parameter counts each time) and each _sort
	// item, each of which costs the store a condition or a subquery.
	// Chains, _has, _include and _revinclude are refused outright; each
	// _filter counts once here, and each of its comparisons as a value.
	MaxParams = 64
	// MaxTextValueChars bounds a value matched as text (string parameters,
	// :contains, :exact, :text): :contains costs its length times each
	// stored value's.
	MaxTextValueChars = 256
	// MaxValueBytes bounds any other single value (tokens, references,
	// URIs, ids, dates, numbers).
	MaxValueBytes = 1024
	// MaxQueryBytes bounds the query as a whole (names and values), for
	// POST _search bodies that the header limit does not cover.
	MaxQueryBytes = 32 << 10
)

// checkQuerySize refuses a query larger than MaxQueryBytes or with more
// terms than MaxParams, before any of it is parsed.
func checkQuerySize(q url.Values) error {
	size, terms := 0, 0
	for k, vs := range q {
		for _, v := range vs {
			size += len(k) + len(v) + 2 // with its '=' and '&'
		}
		code, _, _ := strings.Cut(k, ":")
		switch {
		case ignored[code], resultParams[code]:
		case code == "_sort":
			for _, v := range vs {
				terms += countItems(v)
			}
		default:
			terms += len(vs)
		}
	}
	if size > MaxQueryBytes {
		return fhir.BadRequest(fmt.Sprintf("Search query too large: %d bytes, at most %d", size, MaxQueryBytes))
	}
	if terms > MaxParams {
		return fhir.BadRequest(fmt.Sprintf("Too many search parameters: %d, at most %d", terms, MaxParams))
	}
	return nil
}

// resultParams shape the answer rather than add conditions.
var resultParams = map[string]bool{"_count": true, "_offset": true, "_total": true, "_summary": true, "_elements": true, "_fields": true}

// countItems counts the comma-separated items of a list value.
func countItems(v string) int {
	n := 1
	for i := 0; i < len(v); i++ {
		if v[i] == ',' {
			n++
		}
	}
	return n
}

// tooManyValues refuses a parameter with more than MaxValuesPerParam
// alternatives.
func tooManyValues(key string, n int) error {
	return fhir.BadRequest(fmt.Sprintf("Too many values for %s: %d, at most %d", clip(key), n, MaxValuesPerParam), key)
}

// checkTextValue refuses a text-matched value longer than MaxTextValueChars.
func checkTextValue(key, v string) error {
	if n := utf8.RuneCountInString(v); n > MaxTextValueChars {
		return fhir.BadRequest(fmt.Sprintf("Value too long for %s: %d characters, at most %d", clip(key), n, MaxTextValueChars), key)
	}
	return nil
}

// checkValue refuses any value longer than MaxValueBytes.
func checkValue(key, v string) error {
	if len(v) > MaxValueBytes {
		return fhir.BadRequest(fmt.Sprintf("Value too long for %s: %d bytes, at most %d", clip(key), len(v), MaxValueBytes), key)
	}
	return nil
}
