package search

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/store"
)

// FuzzParse feeds arbitrary query strings to Parse: it must never panic,
// must fail only with a 400 *fhir.Error, and must build conditions every
// store can run.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		"name=smi&_count=5&_sort=-_lastUpdated",
		"profile-type:not=ClientApplication,Bot&_total=accurate",
		"identifier=http://h|123,|abc&birthdate=ge2000-01-01T10:00:00+02:00",
		"_lastUpdated=ap2020&_summary=count&_elements=id,name",
		"value-quantity=gt5.4|http://unitsofmeasure.org|mg&date=sa2021-05",
		`name:exact=a\,b&user:User=u1&_id=x,y&_offset=3`,
		"profile=https://h/fhir/R4/Patient/1/_history/2&active:missing=true",
		"birthdate=2000-02-30&_count=1001",
		`_filter=not(gender eq male or (name co "a\"b" and birthdate ge 2000)) and _id ne x&_filter=subject pr true`,
		"_filter=((((gender eq f)))) or _lastUpdated sa 2020 and probability lt 0.5&name=x",
	} {
		f.Add(s)
	}
	types := []string{"Patient", "ProjectMembership", "Observation", "Bot", "NoSuchType"}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := url.ParseQuery(s)
		if err != nil {
			return
		}
		for _, typ := range types {
			query, err := Parse(typ, q)
			if err != nil {
				var fe *fhir.Error
				if !errors.As(err, &fe) || fe.Status != 400 {
					t.Fatalf("Parse(%s, %q): %v, want a 400 *fhir.Error", typ, s, err)
				}
				continue
			}
			if query.Count < 0 || query.Count > MaxCount || query.Offset < 0 {
				t.Fatalf("Parse(%s, %q): count %d offset %d", typ, s, query.Count, query.Offset)
			}
			for _, c := range query.Filter {
				if err := store.Check(c); err != nil {
					t.Fatalf("Parse(%s, %q): a condition no store can run: %v", typ, s, err)
				}
			}
		}
	})
}

// FuzzFields feeds arbitrary JSON to Fields: it must never panic, and what
// it returns must be of the kinds every store takes.
func FuzzFields(f *testing.F) {
	for _, s := range []string{
		`{}`,
		benchPatient,
		`{"profile":{"reference":"https://h/Patient/1/_history/2"},"access":[{"policy":{"reference":"/"}}]}`,
		`{"name":[{"given":"notalist","family":7}],"birthDate":"2000-02-30","telecom":[null,{"value":true}]}`,
		`{"effectivePeriod":{"start":"2020","end":"2019"},"valueQuantity":{"value":"x"},"subject":{"reference":"#a"}}`,
	} {
		f.Add(s)
	}
	types := []string{"Patient", "ProjectMembership", "Observation", "Bot"}
	f.Fuzz(func(t *testing.T, s string) {
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var res map[string]any
		if d.Decode(&res) != nil {
			return
		}
		for _, typ := range types {
			for k, v := range Fields(typ, res) {
				switch v.(type) {
				case string, []string, []float64, time.Time:
				default:
					t.Fatalf("Fields(%s, %s): %s is a %T", typ, s, k, v)
				}
			}
		}
	})
}
