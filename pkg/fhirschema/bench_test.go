package fhirschema

import (
	"encoding/json"
	"strings"
	"testing"
)

const benchPatient = `{
  "resourceType": "Patient",
  "id": "0b5a7a1c-4b9e-4a7e-9a43-3c2f0d0c2f11",
  "meta": {"versionId": "3", "lastUpdated": "2024-05-01T10:20:30.123Z", "project": "5d2a0c3e-1b2f-4c5d-8e9f-0a1b2c3d4e5f",
           "author": {"reference": "Practitioner/123", "display": "Dr. Who"}},
  "identifier": [{"system": "http://hospital.example.org/mrn", "value": "MRN-0012345"}],
  "active": true,
  "name": [{"use": "official", "family": "Chalmers", "given": ["Peter", "James"]}],
  "telecom": [{"system": "phone", "value": "(03) 5555 6473", "use": "work", "rank": 1},
              {"system": "email", "value": "peter@example.org"}],
  "gender": "male",
  "birthDate": "1974-12-25",
  "address": [{"use": "home", "line": ["534 Erewhon St"], "city": "PleasantVille", "state": "Vic", "postalCode": "3999", "country": "AU"}],
  "maritalStatus": {"coding": [{"system": "http://terminology.hl7.org/CodeSystem/v3-MaritalStatus", "code": "M"}], "text": "Married"},
  "managingOrganization": {"reference": "Organization/1"}
}`

func decode(tb testing.TB, doc string) map[string]any {
	tb.Helper()
	d := json.NewDecoder(strings.NewReader(doc))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		tb.Fatal(err)
	}
	return m
}

func BenchmarkValidatePatient(b *testing.B) {
	p := decode(b, benchPatient)
	for _, strict := range []bool{false, true} {
		name := "default"
		if strict {
			name = "strict"
		}
		b.Run(name, func(b *testing.B) {
			if err := Validate(p, Options{Strict: strict}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = Validate(p, Options{Strict: strict})
			}
		})
	}
}

func BenchmarkValidateBundle(b *testing.B) {
	res := decode(b, bundleJSON)
	b.ReportAllocs()
	for b.Loop() {
		if err := Validate(res, Options{Strict: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidateInvalidPatient measures the reporting pass a rejected
// write pays for.
func BenchmarkValidateInvalidPatient(b *testing.B) {
	res := decode(b, benchPatient)
	res["gender"] = "enby"
	res["foo"] = true
	b.ReportAllocs()
	for b.Loop() {
		if Validate(res, Options{Strict: true}) == nil {
			b.Fatal("accepted")
		}
	}
}
