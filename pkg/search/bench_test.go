package search

import (
	"testing"
)

const benchPatient = `{"resourceType":"Patient","id":"0f9a3c1e-5d1b-4b7a-9d0e-2c4a6b8e1f00",
	"meta":{"versionId":"3","lastUpdated":"2024-05-06T07:08:09.123Z","profile":["http://hl7.org/fhir/us/core/StructureDefinition/us-core-patient"]},
	"identifier":[{"system":"http://hospital.example/mrn","value":"000123456","type":{"text":"MRN"}},{"system":"http://hl7.org/fhir/sid/us-ssn","value":"999-99-9999"}],
	"active":true,
	"name":[{"use":"official","family":"Müller","given":["Anna","Maria"],"prefix":["Dr."]},{"use":"nickname","given":["Annie"]}],
	"telecom":[{"system":"email","value":"Anna.Mueller@Example.com"},{"system":"phone","value":"+41 44 123 45 67","use":"mobile"}],
	"gender":"female","birthDate":"1984-07-21",
	"address":[{"line":["Bahnhofstrasse 1"],"city":"Zürich","postalCode":"8001","country":"CH"}],
	"communication":[{"language":{"coding":[{"system":"urn:ietf:bcp:47","code":"de-CH","display":"German (Switzerland)"}]}}],
	"generalPractitioner":[{"reference":"Practitioner/7c1d2e3f"}],
	"managingOrganization":{"reference":"Organization/42"}}`

func BenchmarkFieldsPatient(b *testing.B) {
	res := decode(b, benchPatient)
	loadRegistry()
	b.ReportAllocs()
	for b.Loop() {
		Fields("Patient", res)
	}
}

func BenchmarkParse(b *testing.B) {
	q := mustQuery(b, "name=ann&birthdate=ge1980-01-01&identifier=http://hospital.example/mrn|000123456&_sort=-_lastUpdated&_count=20")
	loadRegistry()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("Patient", q); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseMembershipProfileType(b *testing.B) {
	q := mustQuery(b, "profile-type:not=ClientApplication,Bot&_count=20")
	loadRegistry()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("ProjectMembership", q); err != nil {
			b.Fatal(err)
		}
	}
}
