package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// defsDir is where tools/fhirdefs installs the definitions (npm ci).
var defsDir = filepath.Join("..", "..", "..", "..", "tools", "fhirdefs", "node_modules", "@medplum", "definitions", "dist", "fhir", "r4")

// generate returns the validation table and the texts table.
func generate(t *testing.T) (schema, texts []byte) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(defsDir, "profiles-resources.json")); err != nil {
		t.Skipf("definitions not installed (%v); run: cd tools/fhirdefs && npm ci", err)
	}
	var s, x bytes.Buffer
	if err := Generate(defsDir, &s, &x); err != nil {
		t.Fatal(err)
	}
	return s.Bytes(), x.Bytes()
}

// TestSchemaIsUpToDate fails when schema.txt or texts.txt is not what the
// generator makes of the installed definitions: edit the generator, not
// the tables.
func TestSchemaIsUpToDate(t *testing.T) {
	schema, texts := generate(t)
	for name, got := range map[string][]byte{"schema.txt": schema, "texts.txt": texts} {
		want, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale; run: cd pkg && go generate ./fhirschema", name)
		}
	}
	if again, againTexts := generate(t); !bytes.Equal(again, schema) || !bytes.Equal(againTexts, texts) {
		t.Fatal("generator output is not deterministic")
	}
}

func TestGeneratedTableContents(t *testing.T) {
	schema, _ := generate(t)
	out := string(schema)
	for _, want := range []string{
		"\nresource Patient\n\tid 0..1 id\n",
		"\tdeceased[x] 0..1 boolean,dateTime\n",
		"\nbackbone Questionnaire.item\n",
		"\titem 0..* Questionnaire.item\n",     // contentReference
		"\tlink 0..* Bundle.link\n",            // contentReference from Bundle.entry
		"\toutcome 0..1 OperationOutcome\n",    // Medplum's typed Bundle.entry.response.outcome
		"\tlow 0..1 Quantity:SimpleQuantity\n", // profiled type
		"\textension 0..0 Extension array\n",   // xhtml
		"\nresource ProjectMembership\n",       // Medplum's own resources
		"\turl 1..1 uri\n",                     // Extension.url, a FHIRPath System.String
		"\tgender 0..1 code binding=http://hl7.org/fhir/ValueSet/administrative-gender|4.0.1\n",
		"\nvalueset http://hl7.org/fhir/ValueSet/administrative-gender\n\thttp://hl7.org/fhir/administrative-gender male female other unknown\n",
		"\thttps://medplum.com/fhir/CodeSystem/resource-types AccessPolicy ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	for _, unwanted := range []string{
		"\nresource DomainResource\n", "\ncomplex Element\n", "ViewDefinition", "MetadataResource",
		"valueset http://hl7.org/fhir/ValueSet/ucum-units", // UCUM is a grammar, not a list
		"valueset http://hl7.org/fhir/ValueSet/mimetypes",  // not enumerable
		"http://hl7.org/fhirpath/System.",
	} {
		if strings.Contains(out, unwanted) {
			t.Errorf("table holds %q", unwanted)
		}
	}
}

func TestGeneratedTextsContents(t *testing.T) {
	_, texts := generate(t)
	out := string(texts)
	for _, want := range []string{
		"\ntype Patient Demographics and other administrative information about an individual or animal receiving care or other health-related services.\n",
		"\tactive \"Whether this patient record is in active use. \\nMany systems", // quoted: it holds a newline
		"\tgeneralPractitioner/Reference http://hl7.org/fhir/StructureDefinition/Organization http://hl7.org/fhir/StructureDefinition/Practitioner http://hl7.org/fhir/StructureDefinition/PractitionerRole\n",
		"\ntype Patient.contact\n\tid =",                                                    // a backbone: no description; a repeated text by reference
		"\tname A name associated with the contact person.\n",                               // Patient.contact.name
		"\tquestionnaire/canonical http://hl7.org/fhir/StructureDefinition/Questionnaire\n", // QuestionnaireResponse
		"\ntype ProjectMembership ",                                                         // Medplum's own resources
	} {
		if !strings.Contains(out, want) {
			t.Errorf("texts lack %q", want)
		}
	}
}
