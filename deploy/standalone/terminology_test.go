package standalone

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestValueSetExpand: the coded fields of Medplum's app ask
// ValueSet/$expand for their choices, over HTTP, as @medplum/core's
// valueSetExpand does.
func TestValueSetExpand(t *testing.T) {
	_, tok := project(t, "expand")
	const gender = "http://hl7.org/fhir/ValueSet/administrative-gender"
	codes := func(r *response) []string {
		t.Helper()
		b := r.json(t)
		if b["resourceType"] != "ValueSet" || b["url"] != gender {
			t.Fatalf("not the value set: %s", r.body)
		}
		var out []string
		exp := b["expansion"].(map[string]any)
		list, _ := exp["contains"].([]any)
		for _, c := range list {
			m := c.(map[string]any)
			if m["system"] != "http://hl7.org/fhir/administrative-gender" || m["display"] == "" {
				t.Fatalf("coding %v", m)
			}
			out = append(out, m["code"].(string))
		}
		return out
	}
	r := do(t, "GET", "fhir/R4/ValueSet/$expand?url="+url.QueryEscape(gender+"|4.0.1"), tok, "", nil)
	expect(t, r, 200)
	if got := codes(r); !slices.Equal(got, []string{"male", "female", "other", "unknown"}) {
		t.Fatalf("codes %v", got)
	}
	r = do(t, "GET", "fhir/R4/ValueSet/$expand?url="+url.QueryEscape(gender)+"&filter=FEM&count=5&offset=0", tok, "", nil)
	expect(t, r, 200)
	if got := codes(r); !slices.Equal(got, []string{"female"}) {
		t.Fatalf("filtered codes %v", got)
	}

	for _, tc := range []struct{ name, query, text string }{
		{"unknown url", "url=http://example.com/ValueSet/none", "ValueSet http://example.com/ValueSet/none not found"},
		{"no url", "filter=x", "Missing url"},
		{"count past the bound", "url=" + url.QueryEscape(gender) + "&count=5000", "Invalid count: must be an integer from 0 to 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, "GET", "fhir/R4/ValueSet/$expand?"+tc.query, tok, "", nil)
			expect(t, r, 400)
			if got := r.outcomeText(t); got != tc.text {
				t.Fatalf("outcome %q, want %q", got, tc.text)
			}
		})
	}
	// $validate-code, from the same table.
	r = do(t, "GET", "fhir/R4/ValueSet/$validate-code?url="+url.QueryEscape(gender)+
		"&system="+url.QueryEscape("http://hl7.org/fhir/administrative-gender")+"&code=other", tok, "", nil)
	expect(t, r, 200)
	if p := r.json(t)["parameter"].([]any); p[0].(map[string]any)["valueBoolean"] != true || p[1].(map[string]any)["valueString"] != "Other" {
		t.Fatalf("validate-code: %s", r.body)
	}
	if r := do(t, "GET", "fhir/R4/ValueSet/$expand?url="+url.QueryEscape(gender), "", "", nil); r.status != 401 {
		t.Fatalf("without a token: %d", r.status)
	}
}

// TestSearchFilterOverHTTP: Medplum's search control sends _filter.
func TestSearchFilterOverHTTP(t *testing.T) {
	_, tok := project(t, "filter")
	ids := map[string]string{}
	for _, p := range []struct{ family, gender string }{{"Filterone", "female"}, {"Filtertwo", "male"}, {"Filterthree", "female"}} {
		body := mustJSON(map[string]any{"resourceType": "Patient", "name": []any{map[string]any{"family": p.family}}, "gender": p.gender})
		r := do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", body)
		expect(t, r, 201)
		ids[r.json(t)["id"].(string)] = p.family
	}
	search := func(q string) []string {
		t.Helper()
		r := do(t, "GET", "fhir/R4/Patient?"+q, tok, "", nil)
		expect(t, r, 200)
		var out []string
		entries, _ := r.json(t)["entry"].([]any)
		for _, e := range entries {
			out = append(out, ids[e.(map[string]any)["resource"].(map[string]any)["id"].(string)])
		}
		slices.Sort(out)
		return out
	}
	f := func(expr string) string { return "_filter=" + url.QueryEscape(expr) }
	if got := search(f("gender eq female and family sw filter")); !slices.Equal(got, []string{"Filterone", "Filterthree"}) {
		t.Fatalf("and: %v", got)
	}
	if got := search(f(`family eq "Filtertwo" or (gender eq female and family co three)`)); !slices.Equal(got, []string{"Filterthree", "Filtertwo"}) {
		t.Fatalf("or: %v", got)
	}
	if got := search(f("not(gender eq female)") + "&_sort=family"); !slices.Equal(got, []string{"Filtertwo"}) {
		t.Fatalf("not: %v", got)
	}
	r := do(t, "GET", "fhir/R4/Patient?"+f("gender eq female and"), tok, "", nil)
	expect(t, r, 400)
	if got := r.outcomeText(t); !strings.HasPrefix(got, "Invalid _filter at position 21:") {
		t.Fatalf("malformed filter: %q", got)
	}
}
