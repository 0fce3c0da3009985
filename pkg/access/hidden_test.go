package access

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/search"
)

// hiding compiles a practitioner's policy of the given resource[] entries.
func hiding(t *testing.T, entries ...map[string]any) *Policy {
	t.Helper()
	res := make([]any, len(entries))
	for i, e := range entries {
		res[i] = e
	}
	return compile(t, member("Practitioner/doc"), map[string]any{"accessPolicy": ref("AccessPolicy/h")},
		map[string]any{"AccessPolicy/h": map[string]any{"resource": res}})
}

func hide(typ string, fields ...string) map[string]any {
	return map[string]any{"resourceType": typ, "hiddenFields": fields}
}

// checkSearch parses a query as the fhir service does and checks it; a
// query that does not parse fails the test.
func checkSearch(t *testing.T, p *Policy, typ, query string) error {
	t.Helper()
	v, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	q, err := search.Parse(typ, v)
	if err != nil {
		t.Fatalf("%s?%s: %v", typ, query, err)
	}
	return p.CheckSearch(typ, q)
}

func TestCheckSearchRefusesHiddenFields(t *testing.T) {
	birth := hiding(t, hide("Patient", "birthDate", "identifier"), map[string]any{"resourceType": "Observation"})
	family := hiding(t, hide("Patient", "name.family"))
	name := hiding(t, hide("Patient", "name"))
	quantity := hiding(t, hide("Observation", "valueQuantity"))
	choice := hiding(t, hide("Observation", "value[x]", "component.value"))
	meta := hiding(t, hide("*", "meta.lastUpdated", "id"))
	telecom := hiding(t, hide("Patient", "telecom.system"))

	cases := []struct {
		name  string
		pol   *Policy
		typ   string
		query string
		expr  string // the expression of the 400; "" when accepted
	}{
		{"date comparator", birth, "Patient", "birthdate=lt1990-01-01", "birthdate"},
		{"date equality", birth, "Patient", "birthdate=1990", "birthdate"},
		{"several values", birth, "Patient", "birthdate=lt1990,gt2000", "birthdate"},
		{"repeated parameter", birth, "Patient", "birthdate=ge1980&birthdate=lt1990", "birthdate"},
		{":missing", birth, "Patient", "birthdate:missing=true", "birthdate"},
		{"_sort", birth, "Patient", "_sort=birthdate", "_sort"},
		{"_sort descending", birth, "Patient", "_sort=-birthdate", "_sort"},
		{"_sort second key", birth, "Patient", "_sort=gender,-birthdate", "_sort"},
		{"filter named before the sort", birth, "Patient", "identifier=x&_sort=birthdate", "identifier"},
		{"token", birth, "Patient", "identifier=x", "identifier"},
		{"token system|code", birth, "Patient", "identifier=http://a|x", "identifier"},
		{"token :not", birth, "Patient", "identifier:not=x", "identifier"},
		{"token :text", birth, "Patient", "identifier:text=mrn", "identifier"},
		{"smallest code named", birth, "Patient", "identifier=x&birthdate=1990", "birthdate"},
		{"other parameters pass", birth, "Patient", "name=x&gender=female&_sort=-name,_lastUpdated&_id=a&_lastUpdated=gt2020", ""},
		{"result parameters pass", birth, "Patient", "_count=5&_offset=10&_total=accurate&_summary=true&_elements=birthDate,name", ""},
		{"_filter comparison", birth, "Patient", "_filter=" + url.QueryEscape("birthdate gt 1980-01-01"), "birthdate"},
		{"_filter token", birth, "Patient", "_filter=" + url.QueryEscape(`identifier eq "http://ssn|123"`), "identifier"},
		{"_filter nested in not and parentheses", birth, "Patient", "_filter=" + url.QueryEscape("name eq x and (gender eq female or not(identifier eq y))"), "identifier"},
		{"_filter pr", birth, "Patient", "_filter=" + url.QueryEscape("birthdate pr true"), "birthdate"},
		{"_filter beside a plain parameter", birth, "Patient", "name=x&_filter=" + url.QueryEscape("birthdate lt 1990"), "birthdate"},
		{"_filter of other parameters passes", birth, "Patient", "_filter=" + url.QueryEscape("name co smi and gender eq female"), ""},
		{"_filter on a hidden meta.lastUpdated", meta, "Patient", "_filter=" + url.QueryEscape("_lastUpdated gt 2020-01-01"), "_lastUpdated"},
		{"_filter on a hidden id", meta, "Patient", "_filter=" + url.QueryEscape("_id eq abc"), "_id"},
		{"other type unaffected", birth, "Observation", "identifier=x&_sort=date", ""},
		{"type the policy does not name", birth, "Practitioner", "identifier=x&_sort=family", ""},

		{"hidden sub-element: the parameter on it", family, "Patient", "family=x", "family"},
		{"hidden sub-element: the parameter above it", family, "Patient", "name=x", "name"},
		{"hidden sub-element: :exact", family, "Patient", "name:exact=X", "name"},
		{"hidden sub-element: sort", family, "Patient", "_sort=family", "_sort"},
		{"hidden sub-element: sibling passes", family, "Patient", "given=x&_sort=given", ""},
		{"hidden element: family", name, "Patient", "family=x", "family"},
		{"hidden element: given", name, "Patient", "given=x", "given"},
		{"hidden element: name", name, "Patient", "name:contains=x", "name"},
		{"hidden element: others pass", name, "Patient", "birthdate=1990&address-city=x", ""},
		{"where(): tested element", telecom, "Patient", "email=a@b", "email"},
		{"where(): whole element", telecom, "Patient", "telecom=x", "telecom"},

		{"choice property", quantity, "Observation", "value-quantity=gt5", "value-quantity"},
		{"choice property in a union", quantity, "Observation", "combo-value-quantity=5", "combo-value-quantity"},
		{"choice property: other types pass", quantity, "Observation", "value-concept=x&component-value-quantity=5&code=c", ""},
		{"value[x]: quantity", choice, "Observation", "value-quantity=5", "value-quantity"},
		{"value[x]: concept", choice, "Observation", "value-concept=x", "value-concept"},
		{"value[x]: date", choice, "Observation", "value-date=2020", "value-date"},
		{"bare choice name", choice, "Observation", "component-value-quantity=5", "component-value-quantity"},
		{"choice names: others pass", choice, "Observation", "code=x&component-code=y&_sort=date", ""},

		{"'*': _lastUpdated", meta, "Patient", "_lastUpdated=gt2020-01-01", "_lastUpdated"},
		{"'*': _sort=_lastUpdated", meta, "Observation", "_sort=-_lastUpdated", "_sort"},
		{"'*': _id", meta, "Observation", "_id=a", "_id"},
		{"'*': type without parameters of its own", meta, "Binary", "_lastUpdated=gt2020", "_lastUpdated"},
		{"'*': other meta passes", meta, "Patient", "_tag=t&_profile=http://p&_project=p1", ""},
		{"'*' never covers project-admin types", meta, "ProjectMembership", "_id=a", ""},
	}
	for _, tc := range cases {
		err := checkSearch(t, tc.pol, tc.typ, tc.query)
		if tc.expr == "" {
			if err != nil {
				t.Errorf("%s: %s?%s refused: %v", tc.name, tc.typ, tc.query, err)
			}
			continue
		}
		var fe *fhir.Error
		if !errors.As(err, &fe) || fe.Status != 400 || !slices.Equal(fe.Outcome.Issue[0].Expression, []string{tc.expr}) {
			t.Errorf("%s: %s?%s: %v, want 400 at %s", tc.name, tc.typ, tc.query, err, tc.expr)
		}
	}
}

// The refusal says which parameter and which hidden field, in the
// OperationOutcome the edge sends.
func TestCheckSearchOutcome(t *testing.T) {
	pol := hiding(t, hide("Patient", "birthDate"))
	err := checkSearch(t, pol, "Patient", "birthdate:missing=true")
	var fe *fhir.Error
	if !errors.As(err, &fe) {
		t.Fatalf("not a *fhir.Error: %v", err)
	}
	body := string(fe.JSON())
	for _, want := range []string{`"expression":["birthdate"]`, `"code":"invalid"`,
		"Search parameter birthdate reads a field hidden by your access policy (birthDate)"} {
		if !strings.Contains(body, want) {
			t.Errorf("outcome lacks %s: %s", want, body)
		}
	}
	err = checkSearch(t, pol, "Patient", "_sort=-birthdate")
	if !errors.As(err, &fe) || !strings.Contains(string(fe.JSON()), `"expression":["_sort"]`) ||
		!strings.Contains(fe.Message(), "birthdate") || !strings.Contains(fe.Message(), "(birthDate)") {
		t.Errorf("sort outcome: %v", err)
	}
}

// Which entry's field rules apply depends on the resource: a field hidden
// by any entry that can govern a resource of the type counts, and one
// hidden only by an entry that never governs does not.
func TestCheckSearchEntries(t *testing.T) {
	criteria := func(typ, crit string, fields ...string) map[string]any {
		e := hide(typ, fields...)
		e["criteria"] = crit
		return e
	}
	cases := []struct {
		name    string
		pol     *Policy
		query   string
		refused bool
	}{
		{"first entry, with criteria", hiding(t, criteria("Patient", "Patient?gender=female", "birthDate"), hide("Patient", "gender")),
			"birthdate=1990", true},
		{"later entry", hiding(t, criteria("Patient", "Patient?gender=female", "birthDate"), hide("Patient", "gender")),
			"gender=male", true},
		{"entry granting no search", hiding(t, map[string]any{"resourceType": "Patient", "criteria": "Patient?active=true",
			"interaction": []any{"create"}, "hiddenFields": []any{"birthDate"}}, map[string]any{"resourceType": "Patient"}),
			"birthdate=1990", true},
		{"'*' before the type's entry", hiding(t, criteria("*", "Patient?active=true", "birthDate"), hide("Patient")),
			"birthdate=1990", true},
		{"after an entry without criteria", hiding(t, map[string]any{"resourceType": "Patient"}, criteria("Patient", "Patient?gender=female", "birthDate")),
			"birthdate=1990", false},
		{"unresolved variable: matches nothing", hiding(t, criteria("Patient", "Patient?organization=%org", "birthDate"), hide("Patient")),
			"birthdate=1990", false},
	}
	for _, tc := range cases {
		if err := checkSearch(t, tc.pol, "Patient", tc.query); (err != nil) != tc.refused {
			t.Errorf("%s: %s: %v, refused want %v", tc.name, tc.query, err, tc.refused)
		}
	}
	// The entry that never governs really never hides: a read shows the field.
	pol := cases[4].pol
	red, err := pol.Redact(stored("Patient", "a", `{"resourceType":"Patient","gender":"female","birthDate":"1990-01-01"}`))
	if err != nil || !strings.Contains(string(red.JSON), "birthDate") {
		t.Errorf("redacted: %s %v", red.JSON, err)
	}
}

// A policy hiding nothing accepts every query it accepted before, at the
// cost of one comparison.
func TestCheckSearchNothingHidden(t *testing.T) {
	admin := member("Practitioner/doc")
	admin.Admin = true
	pols := map[string]*Policy{
		"no policy":   compile(t, member("Practitioner/doc"), nil, nil),
		"super admin": compile(t, &bus.Principal{SuperAdmin: true, Project: "sp"}, nil, nil),
		"portal": compile(t, member("Patient/me"), map[string]any{"profile": ref("Patient/me"), "accessPolicy": ref("AccessPolicy/portal")},
			map[string]any{"AccessPolicy/portal": portal}),
		"read-only fields only": hiding(t, map[string]any{"resourceType": "Patient", "readonlyFields": []any{"birthDate"}}),
	}
	queries := []struct{ typ, query string }{
		{"Patient", "birthdate=lt1990-01-01&birthdate:missing=false&_sort=-birthdate,family"},
		{"Patient", "identifier=x&name:exact=X&email=a@b&_id=a&_lastUpdated=gt2020&_tag=t"},
		{"Observation", "value-quantity=gt5&combo-value-quantity=5&_sort=-_lastUpdated&_count=0&_total=accurate"},
		{"Binary", "_lastUpdated=gt2020&_id=a"},
	}
	for name, pol := range pols {
		if pol.blocked != nil {
			t.Errorf("%s: blocked parameters computed", name)
		}
		for _, q := range queries {
			if err := checkSearch(t, pol, q.typ, q.query); err != nil {
				t.Errorf("%s: %s?%s: %v", name, q.typ, q.query, err)
			}
		}
	}
	// A policy hiding a field of Patient costs a map lookup on any other
	// type: only Patient is listed.
	pol := hiding(t, hide("Patient", "birthDate"), map[string]any{"resourceType": "Observation"})
	if len(pol.blocked.byType) != 1 || pol.blocked.byType["Patient"]["birthdate"] != "birthDate" || pol.blocked.other != nil {
		t.Errorf("blocked: %+v", pol.blocked)
	}
}

// The fixed entries hide User.passwordHash and mfaSecret, and Project's
// superAdmin, systemSecret and strictMode. No search parameter reads them
// today; should one appear, it is refused like any other.
func TestCheckSearchFixedEntries(t *testing.T) {
	admin := member("Practitioner/doc")
	admin.Admin = true
	adm := compile(t, admin, nil, nil)
	if adm.blocked != nil {
		t.Errorf("fixed entries block %+v", adm.blocked)
	}
	for _, typ := range []string{"User", "Project"} {
		for _, p := range search.Params(typ) {
			for _, path := range search.ParamPaths(typ, p.Code) {
				for _, f := range []string{"passwordHash", "mfaSecret", "superAdmin", "systemSecret", "strictMode"} {
					if strings.HasPrefix(path, f) {
						t.Errorf("%s %s reads %s but is not refused", typ, p.Code, f)
					}
				}
			}
		}
	}
	if err := checkSearch(t, adm, "User", "email=a@b&identifier=x&_sort=email"); err != nil {
		t.Error(err)
	}
	// The same mechanism serves the fixed entries' types: a super admin's
	// policy may hide a User field that a parameter reads.
	super := compile(t, &bus.Principal{SuperAdmin: true, Project: "sp"},
		map[string]any{"accessPolicy": ref("AccessPolicy/s")},
		map[string]any{"AccessPolicy/s": map[string]any{"resource": []any{hide("User", "email")}}})
	if err := checkSearch(t, super, "User", "email=a@b"); status(err) != 400 {
		t.Errorf("super admin's hidden User.email: %v", err)
	}
}

func TestNamesProperty(t *testing.T) {
	cases := []struct {
		field, property string
		want            bool
	}{
		{"valueQuantity", "valueQuantity", true},
		{"value", "valueQuantity", true},
		{"value[x]", "valueDateTime", true},
		{"value[x]", "valueCodeableConcept", true},
		{"valueQuantity", "valueString", false},
		{"value", "valueSet", false}, // not a choice: Set is no data type
		{"deceased", "deceasedBoolean", true},
		{"name", "name", true},
		{"name", "names", false},
		{"birth", "birthDate", true}, // over-matches, which only refuses more
	}
	for _, tc := range cases {
		if got := namesProperty(tc.field, tc.property); got != tc.want {
			t.Errorf("namesProperty(%q, %q) = %v", tc.field, tc.property, got)
		}
	}
}

func BenchmarkCheckSearch(b *testing.B) {
	q, err := search.Parse("Patient", url.Values{"name": {"x"}, "gender": {"female"}, "_sort": {"-_lastUpdated"}})
	if err != nil {
		b.Fatal(err)
	}
	compileB := func(policy map[string]any) *Policy {
		pol, err := Compile(member("Practitioner/doc"), js(map[string]any{"accessPolicy": ref("AccessPolicy/h")}),
			map[string][]byte{"AccessPolicy/h": js(policy)})
		if err != nil {
			b.Fatal(err)
		}
		return pol
	}
	pols := []struct {
		name string
		pol  *Policy
	}{
		{"nothing hidden", compileB(map[string]any{"resource": []any{map[string]any{"resourceType": "Patient"}}})},
		{"hidden on another type", compileB(map[string]any{"resource": []any{map[string]any{"resourceType": "Patient"}, hide("Observation", "valueQuantity")}})},
		{"hidden on the type", compileB(map[string]any{"resource": []any{hide("Patient", "birthDate")}})},
	}
	for _, p := range pols {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if err := p.pol.CheckSearch("Patient", q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
