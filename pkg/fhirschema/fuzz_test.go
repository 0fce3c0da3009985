package fhirschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
)

func FuzzValidate(f *testing.F) {
	for _, doc := range []string{
		patientJSON, observationJSON, bundleJSON, questionnaireJSON, projectMembershipJSON,
		accessPolicyJSON, botJSON, projectJSON, userJSON, clientApplicationJSON,
		`{"resourceType": "Patient", "name": [{"given": ["a", null], "_given": [null, {"id": "x"}]}], "_birthDate": {"id": "b"}}`,
		`{"resourceType": "Patient", "foo": 1, "gender": ["x"], "name": {}, "deceasedBoolean": true, "deceasedDateTime": "x"}`,
		`{"resourceType": "Condition", "clinicalStatus": {"coding": [{"code": "gone"}]}, "subject": {"reference": "Patient/1"}}`,
		`{"resourceType": "Bundle", "type": "batch", "entry": [{"resource": {"resourceType": "Foo"}}, {"resource": null}]}`,
		`{"resourceType": 1}`, `{}`, `{"resourceType": "Patient", "extension": [{"url": "x", "extension": [{}]}]}`,
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := json.NewDecoder(bytes.NewReader(data))
		d.UseNumber()
		var res map[string]any
		if d.Decode(&res) != nil {
			return
		}
		if Validate(res, Options{}) != nil && Validate(res, Options{Strict: true}) == nil {
			t.Fatal("strict mode accepts what default mode rejects")
		}
		for _, strict := range []bool{false, true} {
			err := Validate(res, Options{Strict: strict})
			if err == nil {
				continue
			}
			var fe *fhir.Error
			if !errors.As(err, &fe) || fe.Status != 400 {
				t.Fatalf("error %v is not a 400 *fhir.Error", err)
			}
			if n := len(fe.Outcome.Issue); n == 0 || n > MaxIssues {
				t.Fatalf("%d issues", n)
			}
			for _, is := range fe.Outcome.Issue {
				if len(is.Expression) != 1 || is.Expression[0] == "" || is.Details == nil || is.Details.Text == "" {
					t.Fatalf("malformed issue %+v", is)
				}
			}
			again := Validate(res, Options{Strict: strict})
			if again == nil || !bytes.Equal(again.(*fhir.Error).JSON(), fe.JSON()) {
				t.Fatalf("outcome not deterministic:\n%s\n%v", fe.JSON(), again)
			}
		}
	})
}
