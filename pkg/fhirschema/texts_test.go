package fhirschema

import (
	"slices"
	"strings"
	"testing"
)

func TestTexts(t *testing.T) {
	for _, tc := range []struct {
		name, got, wantPrefix string
	}{
		{"description", Description("Patient"), "Demographics and other administrative information about an individual"},
		{"own definition", Definition("Patient"), "Demographics and other administrative information about an individual"},
		{"element", Definition("Patient.active"), "Whether this patient record is in active use. \nMany systems"},
		{"backbone element", Definition("Patient.contact.name"), "A name associated with the contact person."},
		{"repeated text", Definition("Patient.contact.id"), "Unique id for the element within a resource"},
		{"profile by its name", Definition("SimpleQuantity.value"), "The value of the measured amount."},
		{"medplum resource", Description("ProjectMembership"), "Medplum project membership."},
		{"no backbone description", Description("Patient.contact"), ""},
		{"unknown", Definition("Patient.nosuch"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.HasPrefix(tc.got, tc.wantPrefix) || (tc.wantPrefix == "" && tc.got != "") {
				t.Errorf("got %q, want it to start with %q", tc.got, tc.wantPrefix)
			}
		})
	}
	if got := TargetProfiles("Patient.link.other", "Reference"); !slices.Equal(got, []string{
		"http://hl7.org/fhir/StructureDefinition/Patient", "http://hl7.org/fhir/StructureDefinition/RelatedPerson",
	}) {
		t.Errorf("Patient.link.other targets: %v", got)
	}
	if got := TargetProfiles("Observation.value[x]", "Quantity"); got != nil {
		t.Errorf("a Quantity's targets: %v", got)
	}
}

// Every type and element the validation table describes has its
// definition in the texts table, so no answer shows an empty one.
func TestEveryElementHasADefinition(t *testing.T) {
	for _, name := range TypeNames() {
		d, _ := Describe(name)
		if d.Kind != "backbone" && Definition(name) == "" {
			t.Errorf("%s has no definition", name)
		}
		for _, el := range d.Elements {
			if Definition(name+"."+el.Name) == "" {
				t.Errorf("%s.%s has no definition", name, el.Name)
			}
		}
	}
}
