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

// TestCodeSystemLookup: CodeSystem/$lookup, GET and POST, of a system of
// the table and of a project's own CodeSystem, by url and by id, answered
// as Medplum answers: name, display, properties; an unknown system 400,
// an unknown code 404, a missing parameter 400.
func TestCodeSystemLookup(t *testing.T) {
	_, tok := project(t, "lookup")
	const gender = "http://hl7.org/fhir/administrative-gender"
	params := func(r *response) []any {
		t.Helper()
		expect(t, r, 200)
		b := r.json(t)
		if b["resourceType"] != "Parameters" {
			t.Fatalf("not Parameters: %s", r.body)
		}
		return b["parameter"].([]any)
	}
	got := params(do(t, "GET", "fhir/R4/CodeSystem/$lookup?system="+url.QueryEscape(gender)+"&code=female", tok, "", nil))
	if want := mustJSON([]any{
		map[string]any{"name": "name", "valueString": gender},
		map[string]any{"name": "display", "valueString": "Female"},
	}); string(mustJSON(got)) != string(want) {
		t.Fatalf("table lookup %s, want %s", mustJSON(got), want)
	}

	cs := "http://example.com/lookup-" + strings.ReplaceAll(t.Name(), "/", "-")
	r := do(t, "POST", "fhir/R4/CodeSystem", tok, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "CodeSystem", "url": cs, "name": "lookupSystem", "title": "Lookup System", "status": "active", "content": "complete",
		"property": []any{
			map[string]any{"code": "parent", "uri": "http://hl7.org/fhir/concept-properties#parent", "type": "code"},
			map[string]any{"code": "abstract", "description": "Code is not a real thing", "type": "boolean"},
		},
		"concept": []any{map[string]any{"code": "head", "display": "Procedure on head", "concept": []any{
			map[string]any{"code": "biopsy", "display": "Biopsy of head", "property": []any{map[string]any{"code": "abstract", "valueBoolean": true}}},
		}}},
	}))
	expect(t, r, 201)
	id := r.json(t)["id"].(string)
	want := string(mustJSON([]any{
		map[string]any{"name": "name", "valueString": "Lookup System"},
		map[string]any{"name": "display", "valueString": "Biopsy of head"},
		map[string]any{"name": "property", "part": []any{
			map[string]any{"name": "code", "valueCode": "parent"},
			map[string]any{"name": "value", "valueCode": "head"},
			map[string]any{"name": "description", "valueString": "Procedure on head"},
		}},
		map[string]any{"name": "property", "part": []any{
			map[string]any{"name": "code", "valueCode": "abstract"},
			map[string]any{"name": "value", "valueBoolean": true},
			map[string]any{"name": "description", "valueString": "Code is not a real thing"},
		}},
	}))
	body := func(p ...any) []byte { return mustJSON(map[string]any{"resourceType": "Parameters", "parameter": p}) }
	for name, r := range map[string]*response{
		"POST by url": do(t, "POST", "fhir/R4/CodeSystem/$lookup", tok, "application/fhir+json", body(
			map[string]any{"name": "system", "valueUri": cs}, map[string]any{"name": "code", "valueCode": "biopsy"})),
		"POST a coding": do(t, "POST", "fhir/R4/CodeSystem/$lookup", tok, "application/fhir+json", body(
			map[string]any{"name": "coding", "valueCoding": map[string]any{"system": cs, "code": "biopsy"}})),
		"GET by id":  do(t, "GET", "fhir/R4/CodeSystem/"+id+"/$lookup?code=biopsy", tok, "", nil),
		"POST by id": do(t, "POST", "fhir/R4/CodeSystem/"+id+"/$lookup", tok, "application/fhir+json", body(map[string]any{"name": "code", "valueCode": "biopsy"})),
	} {
		if got := string(mustJSON(params(r))); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}

	// Another project does not see this one's code system.
	_, other := project(t, "lookup elsewhere")
	expectOutcome(t, do(t, "GET", "fhir/R4/CodeSystem/$lookup?system="+url.QueryEscape(cs)+"&code=biopsy", other, "", nil), 400, "CodeSystem "+cs+" not found")
	for _, tc := range []struct {
		name, path string
		status     int
		text       string
	}{
		{"unknown system", "CodeSystem/$lookup?system=http://example.com/none&code=x", 400, "CodeSystem http://example.com/none not found"},
		{"unknown code", "CodeSystem/$lookup?system=" + url.QueryEscape(gender) + "&code=nope", 404, "Not found"},
		{"unknown code by id", "CodeSystem/" + id + "/$lookup?code=nope", 404, "Not found"},
		{"another system than the id's", "CodeSystem/" + id + "/$lookup?system=" + url.QueryEscape(gender) + "&code=female", 404, "Not found"},
		{"no system", "CodeSystem/$lookup?code=female", 400, "No code system specified"},
		{"no code", "CodeSystem/$lookup?system=" + url.QueryEscape(gender), 400, "No coding specified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectOutcome(t, do(t, "GET", "fhir/R4/"+tc.path, tok, "", nil), tc.status, tc.text)
		})
	}
	expectOutcome(t, do(t, "POST", "fhir/R4/CodeSystem/$lookup", tok, "application/fhir+json", []byte(`{"resourceType":"Patient"}`)),
		400, "The body of $lookup must be a Parameters resource")
	if r := do(t, "GET", "fhir/R4/CodeSystem/$lookup?system="+url.QueryEscape(gender)+"&code=female", "", "", nil); r.status != 401 {
		t.Fatalf("without a token: %d", r.status)
	}
}
