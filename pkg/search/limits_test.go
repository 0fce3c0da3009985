package search

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// alts is n distinct comma-separated alternatives.
func alts(prefix string, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return strings.Join(parts, ",")
}

// params is n different values of a parameter, each its own (ANDed) term.
func params(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("v%d", i)
	}
	return out
}

// Each bound on a query's shape holds at its limit and refuses one past it
// with a 400 that names the limit and, where there is one, the parameter.
func TestParseLimits(t *testing.T) {
	long := func(n int) string { return strings.Repeat("é", n) }              // characters, not bytes
	sorts := "name,-birthdate,family,-given,gender,address,-_lastUpdated,_id" // 8 items
	tests := []struct {
		name    string
		typ     string
		at      url.Values // accepted
		over    url.Values // refused
		message string     // of over
		expr    string
	}{
		{"alternatives of one parameter", "Patient",
			url.Values{"name:contains": {alts("a", MaxValuesPerParam)}},
			url.Values{"name:contains": {alts("a", 495)}},
			"Too many values for name:contains: 495, at most 100", "name:contains"},
		{"alternatives just over", "Patient",
			url.Values{"_id": {alts("id", MaxValuesPerParam)}},
			url.Values{"_id": {alts("id", MaxValuesPerParam+1)}},
			"Too many values for _id: 101, at most 100", "_id"},
		{"date alternatives", "Patient",
			url.Values{"birthdate": {strings.Repeat("2000,", MaxValuesPerParam-1) + "2000"}},
			url.Values{"birthdate": {strings.Repeat("2000,", MaxValuesPerParam) + "2000"}},
			"Too many values for birthdate: 101, at most 100", "birthdate"},
		{"alternatives of the whole query", "Patient",
			url.Values{"name": {alts("a", 100), alts("b", 100)}, "family": {alts("c", MaxValuesPerQuery-200)}},
			url.Values{"name": {alts("a", 100), alts("b", 100)}, "family": {alts("c", MaxValuesPerQuery-199)}},
			"Too many values in one search: more than 256", "name"},
		{"terms of one query", "Patient",
			url.Values{"name": params(MaxParams)},
			url.Values{"name": params(MaxParams + 1)},
			"Too many search parameters: 65, at most 64", ""},
		{"sort items count as terms", "Patient",
			url.Values{"name": params(MaxParams - 8), "_sort": {sorts}, "_count": {"5"}},
			url.Values{"name": params(MaxParams - 7), "_sort": {sorts}, "_count": {"5"}},
			"Too many search parameters: 65, at most 64", ""},
		{"elements", "Patient",
			url.Values{"_elements": {alts("e", MaxValuesPerParam)}},
			url.Values{"_elements": {alts("e", MaxValuesPerParam+1)}},
			"Too many values for _elements: 101, at most 100", "_elements"},
		{":contains value length", "Patient",
			url.Values{"name:contains": {long(MaxTextValueChars)}},
			url.Values{"name:contains": {long(MaxTextValueChars + 1)}},
			"Value too long for name:contains: 257 characters, at most 256", "name:contains"},
		{"string value length", "Patient",
			url.Values{"name": {long(MaxTextValueChars)}},
			url.Values{"name": {long(MaxTextValueChars + 1)}},
			"Value too long for name: 257 characters, at most 256", "name"},
		{":exact value length", "Patient",
			url.Values{"family:exact": {long(MaxTextValueChars)}},
			url.Values{"family:exact": {long(MaxTextValueChars + 1)}},
			"Value too long for family:exact: 257 characters, at most 256", "family:exact"},
		{":text value length", "Observation",
			url.Values{"code:text": {long(MaxTextValueChars)}},
			url.Values{"code:text": {long(MaxTextValueChars + 1)}},
			"Value too long for code:text: 257 characters, at most 256", "code:text"},
		{"token value length", "Patient",
			url.Values{"identifier": {"http://x|" + strings.Repeat("x", MaxValueBytes-9)}},
			url.Values{"identifier": {"http://x|" + strings.Repeat("x", MaxValueBytes-8)}},
			"Value too long for identifier: 1025 bytes, at most 1024", "identifier"},
		{"query size", "Patient",
			url.Values{"_elements": {strings.Repeat("a", MaxQueryBytes-len("_elements")-2)}},
			url.Values{"_elements": {strings.Repeat("a", MaxQueryBytes-len("_elements")-1)}},
			"Search query too large: 32769 bytes, at most 32768", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.typ, tc.at); err != nil {
				t.Fatalf("at the limit: %v", err)
			}
			_, err := Parse(tc.typ, tc.over)
			var fe *fhir.Error
			if !errors.As(err, &fe) || fe.Status != 400 {
				t.Fatalf("over the limit: %v, want 400", err)
			}
			if fe.Message() != tc.message {
				t.Fatalf("message %q, want %q", fe.Message(), tc.message)
			}
			var expr []string
			if len(fe.Outcome.Issue) > 0 {
				expr = fe.Outcome.Issue[0].Expression
			}
			if tc.expr == "" && len(expr) != 0 || tc.expr != "" && (len(expr) != 1 || expr[0] != tc.expr) {
				t.Fatalf("expression %q, want %q", expr, tc.expr)
			}
		})
	}
}
