package terminology

import (
	"encoding/json"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
)

func TestLookup(t *testing.T) {
	stored := func(t *testing.T, doc string) *CodeSystem {
		t.Helper()
		cs, err := StoredCodeSystem([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	cases := []struct {
		name string
		cs   func(t *testing.T) *CodeSystem
		code string
		// want is the answer's parameters as JSON, or status the refusal.
		want   string
		status int
	}{
		{name: "a code of the table", cs: func(*testing.T) *CodeSystem {
			return BuiltinCodeSystem("http://hl7.org/fhir/administrative-gender|4.0.1")
		},
			code: "other", want: `[{"name":"name","valueString":"http://hl7.org/fhir/administrative-gender"},{"name":"display","valueString":"Other"}]`},
		{name: "a code the table's system lacks", cs: func(*testing.T) *CodeSystem { return BuiltinCodeSystem("http://hl7.org/fhir/administrative-gender") },
			code: "nope", status: 404},
		{name: "named by title, else name, else url", cs: func(t *testing.T) *CodeSystem {
			return stored(t, `{"url":"u","name":"n","concept":[{"code":"a"}]}`)
		}, code: "a", want: `[{"name":"name","valueString":"n"},{"name":"display"}]`},
		{name: "properties of each kind, a Coding's left out", cs: func(t *testing.T) *CodeSystem {
			return stored(t, `{"url":"u","property":[{"code":"rank","description":"Rank"}],"concept":[{"code":"a","display":"A","property":[
				{"code":"rank","valueInteger":3},{"code":"on","valueDateTime":"2024-01-01"},{"code":"w","valueDecimal":1.5},
				{"code":"s","valueString":"x"},{"code":"f","valueBoolean":false},{"code":"c","valueCoding":{"code":"z"}}]}]}`)
		}, code: "a", want: `[{"name":"name","valueString":"u"},{"name":"display","valueString":"A"},` +
			`{"name":"property","part":[{"name":"code","valueCode":"rank"},{"name":"value","valueInteger":3},{"name":"description","valueString":"Rank"}]},` +
			`{"name":"property","part":[{"name":"code","valueCode":"on"},{"name":"value","valueDateTime":"2024-01-01"}]},` +
			`{"name":"property","part":[{"name":"code","valueCode":"w"},{"name":"value","valueDecimal":1.5}]},` +
			`{"name":"property","part":[{"name":"code","valueCode":"s"},{"name":"value","valueString":"x"}]},` +
			`{"name":"property","part":[{"name":"code","valueCode":"f"},{"name":"value","valueBoolean":false}]}]`},
		{name: "no parent property without its declaration", cs: func(t *testing.T) *CodeSystem {
			return stored(t, `{"url":"u","title":"T","concept":[{"code":"a","concept":[{"code":"b","display":"B"}]}]}`)
		}, code: "b", want: `[{"name":"name","valueString":"T"},{"name":"display","valueString":"B"}]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.cs(t).Lookup(tc.code)
			if tc.status != 0 {
				if e := fhir.AsError(err); err == nil || e.Status != tc.status {
					t.Fatalf("err %v, want status %d", err, tc.status)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(p.Parameter)
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
	if BuiltinCodeSystem("http://example.com/none") != nil {
		t.Fatal("an unknown system found")
	}
}
