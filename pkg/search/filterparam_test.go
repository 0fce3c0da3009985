package search

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
)

func filterQuery(expr string) url.Values { return url.Values{"_filter": {expr}} }

// TestFilterParse checks _filter's grammar and its translation into the
// conditions the ordinary parameters produce.
func TestFilterParse(t *testing.T) {
	tests := []struct {
		name, typ, expr, want string
	}{
		{"token eq", "Patient", "gender eq female", `s_gender="female"`},
		{"operators and keywords in any case", "Patient", "gender EQ female AND active Eq true", `(s_gender="female" and s_active="true")`},
		{"token ne is :not", "Patient", "gender ne male", `s_gender not in "male"`},
		{"string eq is exact", "Patient", `family eq "Smith"`, `(s_family="smith" and s_family_exact="Smith")`},
		{"string sw is the default prefix match", "Patient", "family sw smi", `s_family^="smi"`},
		{"quoted value with spaces and escapes", "Patient", `name eq "Mary \"Ann\" Lee"`, `(s_name="mary \"ann\" lee" and s_name_exact="Mary \"Ann\" Lee")`},
		{"a comma is part of the value", "Patient", `family eq "a,b"`, `(s_family="a,b" and s_family_exact="a,b")`},
		{"pr true", "Patient", "birthdate pr true", `s_birthdate_lo exists`},
		{"pr false", "Patient", "gender pr false", `s_gender missing`},
		{"date gt", "Patient", "birthdate gt 2000-01-01", `s_birthdate_hi>2000-01-01T23:59:59.999Z`},
		{"_id", "Patient", "_id eq p1 or _id eq p2", `(_id="p1" or _id="p2")`},
		{"_id ne", "Patient", "_id ne p1", `_id not in "p1"`},
		{"right grouping as Medplum", "Patient", "gender eq male and active eq true or gender eq female",
			`(s_gender="male" and (s_active="true" or s_gender="female"))`},
		{"parentheses", "Patient", "(gender eq male and active eq true) or gender eq female",
			`((s_gender="male" and s_active="true") or s_gender="female")`},
		{"or chains flatten", "Patient", "gender eq a or gender eq b or gender eq c",
			`(s_gender="a" or s_gender="b" or s_gender="c")`},
		{"not of an equality", "Patient", "not(gender eq male)", `s_gender not in "male"`},
		{"not with de Morgan", "Patient", "not (gender eq male or birthdate pr true)",
			`(s_gender not in "male" and s_birthdate_lo missing)`},
		{"reference", "Observation", "subject eq Patient/p1", `s_subject="Patient/p1"`},
		{"reference ne", "Observation", "subject ne Patient/p1", `s_subject not in "Patient/p1"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, err := Parse(tc.typ, filterQuery(tc.expr))
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.expr, err)
			}
			if got := render(q.Filter); got != tc.want {
				t.Errorf("_filter=%s\n got %s\nwant %s", tc.expr, got, tc.want)
			}
			if q.Canonical.Get("_filter") != tc.expr {
				t.Errorf("canonical _filter %q", q.Canonical.Get("_filter"))
			}
		})
	}
}

func TestFilterErrors(t *testing.T) {
	deep := strings.Repeat("(", MaxFilterDepth+1) + "gender eq male" + strings.Repeat(")", MaxFilterDepth+1)
	many := strings.TrimSuffix(strings.Repeat("_id eq a or ", MaxValuesPerQuery+1), " or ")
	tests := []struct {
		name, expr, msg string
	}{
		{"missing operator", "gender", `Invalid _filter at position 7: expected an operator after "gender", found the end`},
		{"unknown operator", "gender xx male", `Invalid _filter at position 8: unknown operator "xx"`},
		{"ew is refused", "name ew ith", `Invalid _filter at position 6: operator ew is not supported`},
		{"missing value", "gender eq", `Invalid _filter at position 10: expected a value after eq, found the end`},
		{"unbalanced", "(gender eq male", `Invalid _filter at position 16: expected ")", found the end`},
		{"stray close", "gender eq male)", `Invalid _filter at position 15: expected and, or or the end, found ")"`},
		{"dangling and", "gender eq male and", `Invalid _filter at position 19: expected a search parameter, found the end`},
		{"unterminated string", `name eq "abc`, `Invalid _filter at position 9: unterminated string`},
		{"unknown parameter", "foo eq 1", `Invalid _filter at position 1: Unknown search parameter: foo`},
		{"bad date", "birthdate gt yesterday", `Invalid _filter at position 1: Invalid date in search parameter birthdate: "gtyesterday"`},
		{"operator for another type", "gender co fem", `Invalid _filter at position 1: operator co is not supported for token parameter gender`},
		{"paths", "name.given eq x", `Invalid _filter at position 1: parameter paths, filters and modifiers are not supported: "name.given"`},
		{"not of a comparison", "not(birthdate gt 2000)", `Invalid _filter at position 4: not(...) is supported only around eq, ne and pr comparisons on tokens, references, URIs, ids and exact strings`},
		{"pr takes a boolean", "gender pr maybe", `Invalid _filter at position 1: pr takes true or false`},
		{"position counts characters", `name eq "é" and x`, `Invalid _filter at position 18: expected an operator after "x", found the end`},
		{"too deep", deep, `Invalid _filter at position 17: nested more than 16 deep`},
		{"too many comparisons", many, `Invalid _filter at position 3073: Too many values in one search: more than 256`},
		{"too long", strings.Repeat("x", MaxFilterBytes+1), `Invalid _filter: 4097 bytes, at most 4096`},
		{"empty", "", `Empty value for search parameter _filter`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("Patient", filterQuery(tc.expr))
			var fe *fhir.Error
			if !errors.As(err, &fe) || fe.Status != 400 {
				t.Fatalf("Parse(%q) = %v, want a 400 *fhir.Error", tc.expr, err)
			}
			if fe.Message() != tc.msg {
				t.Errorf("message %q\n         want %q", fe.Message(), tc.msg)
			}
			if ex := fe.Outcome.Issue[0].Expression; len(ex) != 1 || ex[0] != "_filter" {
				t.Errorf("expression %v, want [_filter]", ex)
			}
		})
	}
}

// TestSearchFilter runs _filter through both store adapters.
func TestSearchFilter(t *testing.T) {
	ctx := testContext(t)
	bs := load(t, ctx, "Patient", []fixture{
		{"p1", "2024-01-01T10:00:00Z", `{"name":[{"given":["John"],"family":"Smith"}],"birthDate":"1980-05-12","gender":"male","active":true}`},
		{"p2", "2024-02-01T10:00:00Z", `{"name":[{"given":["José"],"family":"Müller"}],"birthDate":"1990","gender":"female"}`},
		{"p3", "2024-03-01T10:00:00Z", `{"name":[{"given":["Jane"],"family":"Smithers"}],"birthDate":"2001-02-03","gender":"female"}`},
		{"p4", "2024-04-01T10:00:00Z", `{"active":false}`},
	})
	q := func(expr string) string { return "_filter=" + url.QueryEscape(expr) }
	runCases(t, ctx, bs, "Patient", []searchCase{
		{"eq on a token", q("gender eq female"), []string{"p2", "p3"}},
		{"ne includes the missing", q("gender ne female"), []string{"p1", "p4"}},
		{"string eq is exact", q("family eq Smith"), []string{"p1"}},
		{"string sw", q("family sw smi"), []string{"p1", "p3"}},
		{"string co", q("name co ither"), []string{"p3"}},
		{"string ne", q("family ne Smith"), []string{"p2", "p3", "p4"}},
		{"date ge", q("birthdate ge 1990"), []string{"p2", "p3"}},
		{"date lt", q("birthdate lt 1990"), []string{"p1"}},
		{"_lastUpdated", q("_lastUpdated gt 2024-02-15"), []string{"p3", "p4"}},
		{"pr", q("birthdate pr false"), []string{"p4"}},
		{"or", q("family eq Smith or birthdate pr false"), []string{"p1", "p4"}},
		{"and with parentheses", q("(gender eq female or gender eq male) and birthdate lt 2000"), []string{"p1", "p2"}},
		{"not", q("not(gender eq female or active eq true)"), []string{"p4"}},
		{"with another parameter, ANDed", q("gender eq female or active eq true") + "&birthdate=lt2000", []string{"p1", "p2"}},
	})
}
