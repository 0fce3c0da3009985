package main

import (
	"strings"
	"testing"
)

// testSchema is a small hand-written schema, so these tests need no npm install.
func testSchema() *schema {
	el := func(types ...string) *elemDef { return &elemDef{types: types} }
	choice := func(types ...string) *elemDef { return &elemDef{types: types, choice: true} }
	return &schema{types: map[string]*typeDef{
		"Patient": {root: "Patient", elems: map[string]*elemDef{
			"Patient.name":       el("HumanName"),
			"Patient.telecom":    el("ContactPoint"),
			"Patient.deceased":   choice("boolean", "dateTime"),
			"Patient.link":       el("BackboneElement"),
			"Patient.link.other": el("Reference"),
			"Patient.extension":  el("Extension"),
		}},
		"Observation": {root: "Observation", elems: map[string]*elemDef{
			"Observation.value":     choice("Quantity", "CodeableConcept", "string"),
			"Observation.subject":   el("Reference"),
			"Observation.effective": choice("dateTime", "Period", "string"),
		}},
		"Questionnaire": {root: "Questionnaire", elems: map[string]*elemDef{
			"Questionnaire.item":      el("BackboneElement"),
			"Questionnaire.item.code": el("Coding"),
			"Questionnaire.item.item": {contentRef: "Questionnaire.item"},
		}},
		"ProjectMembership": {root: "ProjectMembership", elems: map[string]*elemDef{
			"ProjectMembership.profile": el("Reference"),
		}},
		"Resource":        {root: "Resource", elems: map[string]*elemDef{"Resource.meta": el("Meta")}},
		"Meta":            {root: "Meta", elems: map[string]*elemDef{"Meta.tag": el("Coding")}},
		"HumanName":       {root: "HumanName", elems: map[string]*elemDef{"HumanName.family": el("string")}},
		"ContactPoint":    {root: "ContactPoint", elems: map[string]*elemDef{"ContactPoint.system": el("code")}},
		"CodeableConcept": {root: "CodeableConcept", elems: map[string]*elemDef{"CodeableConcept.coding": el("Coding")}},
		"Extension": {root: "Extension", elems: map[string]*elemDef{
			"Extension.url":   el("uri"),
			"Extension.value": choice("string", "Reference", "CodeableConcept", "Period"),
		}},
		"Quantity":  {root: "Quantity", elems: map[string]*elemDef{}},
		"Reference": {root: "Reference", elems: map[string]*elemDef{}},
		"Coding":    {root: "Coding", elems: map[string]*elemDef{}},
		"Period":    {root: "Period", elems: map[string]*elemDef{}},
	}}
}

func TestCompile(t *testing.T) {
	tests := []struct {
		name, paramType, base, expr string
		want                        string // program, or "error: <substring>"
	}{
		{"dotted path", "string", "Patient", "Patient.name.family", "name:HumanName.family:string"},
		{"union keeps this base's paths", "string", "Patient", "Patient.name | Person.name", "name:HumanName"},
		{"union of two paths", "token", "Observation", "Observation.value | Observation.value.coding", "valueCodeableConcept:CodeableConcept,valueString:string|valueCodeableConcept:CodeableConcept.coding:Coding"},
		{"where equality", "token", "Patient", "Patient.telecom.where(system='email')", "telecom:ContactPoint.?system=email"},
		{"where value is escaped", "reference", "Patient", "Patient.extension.where(url='http://x.org/a|b').value", "extension:Extension.?url=http%3A%2F%2Fx%2Eorg%2Fa%7Cb.valueReference:Reference"},
		{"ofType on a choice", "date", "Patient", "(Patient.deceased.ofType(dateTime))", "deceasedDateTime:dateTime"},
		{"as operator", "quantity", "Observation", "(Observation.value as Quantity)", "valueQuantity:Quantity"},
		{"as function", "quantity", "Observation", "Observation.value.as(FHIR.Quantity)", "valueQuantity:Quantity"},
		{"choice pruned by parameter type", "date", "Observation", "Observation.effective", "effectiveDateTime:dateTime,effectivePeriod:Period"},
		{"choice pruned by next member", "token", "Patient", "Patient.extension.value.coding", "extension:Extension.valueCodeableConcept:CodeableConcept.coding:Coding"},
		{"backbone element", "reference", "Patient", "Patient.link.other", "link:BackboneElement.other:Reference"},
		{"content reference", "token", "Questionnaire", "Questionnaire.item.item.code", "item:BackboneElement.item:BackboneElement.code:Coding"},
		{"where resolve is", "reference", "Observation", "Observation.subject.where(resolve() is Patient)", "subject:Reference.@is=Patient"},
		{"profile-type", "token", "ProjectMembership", "ProjectMembership.profile.resolve().resourceType", "profile:Reference.@type"},
		{"exists", "token", "Patient", "Patient.deceased.exists()", "deceasedBoolean:boolean,deceasedDateTime:dateTime.!exists"},
		{"exists and not false", "token", "Patient", "Patient.deceased.exists() and Patient.deceased != false", "deceasedBoolean:boolean,deceasedDateTime:dateTime.!truthy"},
		{"Resource root applies to any base", "token", "Patient", "Resource.meta.tag", "meta:Meta.tag:Coding"},
		{"relative path", "string", "Patient", "name", "name:HumanName"},
		{"unknown type keeps keys", "string", "Enterprise", "Enterprise.name", "name"},
		{"ofType on unknown element", "date", "Enterprise", "Enterprise.when.ofType(Period)", "whenPeriod:Period,when:Period"},
		{"iif", "number", "Task", "iif(priority = 'stat', 50, 10)", "error: iif"},
		{"indexer", "reference", "Patient", "Patient.link[0].other", "error: indexers"},
		{"resolve alone", "reference", "Observation", "Observation.subject.resolve()", "error: resolve()"},
		{"other function", "string", "Patient", "Patient.name.first()", "error: first()"},
		{"no such element", "string", "Patient", "Patient.nickname", `error: no element "nickname"`},
		{"no path for base", "string", "Patient", "Person.name", "error: no path"},
		{"no value of the parameter's type", "date", "Observation", "Observation.value", "error: no path"},
		{"comparison", "token", "Patient", "Patient.deceased = true", "error: comparisons"},
		{"other and", "token", "Patient", "Patient.name.exists() and Patient.telecom.exists()", "error: only"},
	}
	sch := testSchema()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := compile(sch, tc.paramType, tc.base, tc.expr)
			if want, ok := strings.CutPrefix(tc.want, "error: "); ok {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("compile(%q) = %q, %v; want an error containing %q", tc.expr, got, err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("compile(%q): %v", tc.expr, err)
			}
			if got != tc.want {
				t.Errorf("compile(%q)\n got %s\nwant %s", tc.expr, got, tc.want)
			}
		})
	}
}

func TestEncodeTargets(t *testing.T) {
	sch := &schema{resourceTypes: []string{"A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K"}}
	tests := []struct {
		name    string
		targets []string
		want    string
	}{
		{"a few, sorted", []string{"C", "A"}, "A,C"},
		{"all but one is any", []string{"A", "B", "C", "D", "E", "F", "G", "H", "I", "J"}, "*"},
		{"none", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := encodeTargets(tc.targets, sch); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
