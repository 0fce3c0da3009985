package access

import (
	"net/url"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/store"
)

// TestMatcherShapes runs criteria through search.Parse and the matcher
// against search.Fields of sample resources: each row is one shape the
// parser builds.
func TestMatcherShapes(t *testing.T) {
	patient := `{"resourceType":"Patient","id":"p1","gender":"female","birthDate":"1990-04-01","active":true,
		"name":[{"family":"Smith-Jones","given":["Alice","Beth"]}],
		"identifier":[{"system":"http://mrn","value":"123"}],
		"telecom":[{"system":"email","value":"Alice@Example.com"}],
		"generalPractitioner":[{"reference":"Practitioner/doc"}]}`
	obs := `{"resourceType":"Observation","id":"o1","status":"final","code":{"coding":[{"system":"http://loinc.org","code":"8867-4","display":"Heart rate"}]},
		"subject":{"reference":"Patient/p1"},"effectiveDateTime":"2024-03-10T10:00:00Z",
		"valueQuantity":{"value":72,"unit":"/min","system":"http://unitsofmeasure.org","code":"/min"}}`
	q := `{"resourceType":"Questionnaire","id":"q1","status":"active","url":"http://example.com/q/intake"}`
	cases := []struct {
		typ, body, query string
		want             bool
	}{
		{"Patient", patient, "gender=female", true},
		{"Patient", patient, "gender=male", false},
		{"Patient", patient, "gender=male,female", true},                       // $in
		{"Patient", patient, "gender:not=male", true},                          // $nin
		{"Patient", patient, "gender:not=female", false},                       // $nin
		{"Patient", patient, "address:missing=true", true},                     // $exists false
		{"Patient", patient, "gender:missing=true", false},                     // $exists false
		{"Patient", patient, "family=smi", true},                               // prefix equality
		{"Patient", patient, "family=smith-jones-the-third", false},            // prefix + $regex
		{"Patient", patient, "name=alice", true},                               // array of names
		{"Patient", patient, "name=bob,beth", true},                            // $in on prefixes
		{"Patient", patient, "family:contains=JONES", true},                    // $regex
		{"Patient", patient, "family:exact=Smith-Jones", true},                 // exact
		{"Patient", patient, "family:exact=smith-jones", false},                // exact is case-sensitive
		{"Patient", patient, "identifier=http://mrn|123", true},                // token system|code
		{"Patient", patient, "identifier=http://other|123", false},             //
		{"Patient", patient, "email=alice@example.com", true},                  // lower-cased ContactPoint
		{"Patient", patient, "general-practitioner=Practitioner/doc", true},    // reference
		{"Patient", patient, "general-practitioner=doc", true},                 // bare id
		{"Patient", patient, "general-practitioner=Practitioner/nurse", false}, //
		{"Patient", patient, "birthdate=1990", true},                           // date eq ($gte/$lte)
		{"Patient", patient, "birthdate=lt1990-04-01", false},                  // $lt
		{"Patient", patient, "birthdate=ge1990-04-01", true},                   // $or of gt and eq
		{"Patient", patient, "birthdate=ne1990-04-01", false},                  // $or of lt and gt
		{"Patient", patient, "birthdate=1980,1990", true},                      // $or of ranges
		{"Patient", patient, "birthdate=ge1980&birthdate=le1985", false},       // $and
		{"Patient", patient, "_id=p1", true},
		{"Patient", patient, "_id=p2,p3", false},
		{"Patient", patient, "_project=proj", true},
		{"Patient", patient, "_project=other", false},
		{"Patient", patient, "_lastUpdated=ge2024-01-01", true},
		{"Patient", patient, "_lastUpdated=lt2024-01-01", false},
		{"Patient", patient, "active=true", true},
		{"Observation", obs, "subject=Patient/p1&status=final", true},
		{"Observation", obs, "code=http://loinc.org|8867-4", true},
		{"Observation", obs, "code:text=heart", true},           // $regex on text
		{"Observation", obs, "code:text=blood,heart", true},     // $in of regexes
		{"Observation", obs, "code:text=blood,pressure", false}, //
		{"Observation", obs, "value-quantity=72", true},         // number range
		{"Observation", obs, "value-quantity=gt100", false},     // $gt
		{"Observation", obs, "value-quantity=ne72", false},      // $or
		{"Observation", obs, "value-quantity=72|http://unitsofmeasure.org|/min", true},
		{"Observation", obs, "value-quantity=72||kg", false},
		{"Observation", obs, "date=ap2024-03-10", true},
		{"Observation", obs, "date=sa2024-03-10", false},
		{"Questionnaire", q, "url=http://example.com/q/intake", true},
		{"Questionnaire", q, "url:below=http://example.com/q/", true},
		{"Questionnaire", q, "url:below=http://example.com/r/", false},
	}
	for _, tc := range cases {
		vals, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := search.Parse(tc.typ, vals)
		if err != nil {
			t.Errorf("%s?%s: %v", tc.typ, tc.query, err)
			continue
		}
		f := store.And(parsed.Filter...)
		if err := store.Check(f); err != nil {
			t.Errorf("%s?%s: %v: %v", tc.typ, tc.query, f, err)
			continue
		}
		res, err := fhir.Decode([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		id, _ := res["id"].(string)
		d := search.ContentDoc(tc.typ, id, "proj", time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC), res)
		if got := store.Matches(f, d.Field); got != tc.want {
			t.Errorf("%s?%s: %v, want %v (filter %v)", tc.typ, tc.query, got, tc.want, f)
		}
	}
}

func TestCheckRefuses(t *testing.T) {
	for _, c := range []store.Cond{
		{Op: store.OpAnd},
		{Op: store.OpEq, Field: "s_x"},
		{Op: store.OpPrefix, Field: "s_x", Values: []any{1.0}},
		{Op: store.OpEq, Field: "s_x", Values: []any{map[string]any{"a": 1}}},
		{Op: store.OpLt, Field: "s_x", Values: []any{"a"}},
		{Op: store.OpExists, Field: "s_x", Values: []any{"yes"}},
		{Op: 99, Field: "s_x", Values: []any{"a"}},
	} {
		if store.Check(c) == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
