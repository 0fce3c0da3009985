package search

import (
	"slices"
	"testing"
)

func TestParamPaths(t *testing.T) {
	cases := []struct {
		name, typ, code string
		want            []string
	}{
		{"ordinary", "Patient", "birthdate", []string{"birthDate"}},
		{"nested", "Patient", "family", []string{"name.family"}},
		{"whole complex element", "Patient", "name", []string{"name"}},
		{"common parameter", "Patient", "_tag", []string{"meta.tag"}},
		{"union", "Observation", "combo-value-quantity", []string{"component.valueQuantity", "valueQuantity"}},
		{"union of two references", "AuditEvent", "patient", []string{"agent.who", "entity.what"}},
		{"as(Type)", "Observation", "value-quantity", []string{"valueQuantity"}},
		{"as(Type) in a function call", "Condition", "abatement-age", []string{"abatementAge"}},
		{"choice without as: every property", "Patient", "deceased", []string{"deceasedBoolean", "deceasedDateTime"}},
		{"where() reads the element it tests", "Patient", "email", []string{"telecom", "telecom.system"}},
		{"where() in the middle", "Library", "composed-of", []string{"relatedArtifact.resource", "relatedArtifact.type"}},
		{"resolve() is T", "Appointment", "location", []string{"participant.actor"}},
		{"Medplum resource", "ProjectMembership", "access-policy", []string{"access.policy", "accessPolicy"}},
		{"_id", "Patient", "_id", []string{"id"}},
		{"_lastUpdated", "Observation", "_lastUpdated", []string{"meta.lastUpdated"}},
		{"_project", "Observation", "_project", []string{"meta.project"}},
		{"type without parameters of its own", "Binary", "_source", []string{"meta.source"}},
		{"unknown parameter", "Patient", "colour", nil},
		{"parameter of another type", "Patient", "value-quantity", nil},
	}
	for _, tc := range cases {
		if got := ParamPaths(tc.typ, tc.code); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ParamPaths(%s, %s) = %q, want %q", tc.name, tc.typ, tc.code, got, tc.want)
		}
	}
}

// Every parameter of every type has paths, and they are well formed.
func TestParamPathsEveryParameter(t *testing.T) {
	types := TypesWithParams()
	if !slices.Contains(types, "Patient") || !slices.Contains(types, "User") || !slices.IsSorted(types) {
		t.Fatalf("TypesWithParams: %d types", len(types))
	}
	for _, typ := range append(types, "Binary") {
		for _, p := range Params(typ) {
			paths := ParamPaths(typ, p.Code)
			if len(paths) == 0 {
				t.Errorf("%s %s: no paths", typ, p.Code)
			}
			for _, pa := range paths {
				if !elementName.MatchString(pa) {
					t.Errorf("%s %s: bad path %q", typ, p.Code, pa)
				}
			}
		}
	}
}
