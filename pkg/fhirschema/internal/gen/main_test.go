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

func generate(t *testing.T) []byte {
	t.Helper()
	if _, err := os.Stat(filepath.Join(defsDir, "profiles-resources.json")); err != nil {
		t.Skipf("definitions not installed (%v); run: cd tools/fhirdefs && npm ci", err)
	}
	var buf bytes.Buffer
	if err := Generate(defsDir, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestSchemaIsUpToDate fails when schema.txt is not what the generator
// makes of the installed definitions: edit the generator, not the table.
func TestSchemaIsUpToDate(t *testing.T) {
	got := generate(t)
	want, err := os.ReadFile(filepath.Join("..", "..", "schema.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("schema.txt is stale; run: cd pkg && go generate ./fhirschema")
	}
	if again := generate(t); !bytes.Equal(again, got) {
		t.Fatal("generator output is not deterministic")
	}
}

func TestGeneratedTableContents(t *testing.T) {
	out := string(generate(t))
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
