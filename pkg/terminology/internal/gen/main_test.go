package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// defsDir is where tools/fhirdefs installs the definitions (npm ci).
var defsDir = filepath.Join("..", "..", "..", "..", "tools", "fhirdefs", "node_modules", "@medplum", "definitions", "dist", "fhir", "r4")

func generate(t *testing.T) []byte {
	t.Helper()
	if _, err := os.Stat(filepath.Join(defsDir, "valuesets.json")); err != nil {
		t.Skipf("definitions not installed (%v); run: cd tools/fhirdefs && npm ci", err)
	}
	var buf bytes.Buffer
	if err := Generate(defsDir, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var (
	once   sync.Once
	output []byte
)

// cached is generate's output, made once for the package's tests (it reads
// some 60 MB of JSON).
func cached(t *testing.T) []byte {
	t.Helper()
	once.Do(func() { output = generate(t) })
	if output == nil {
		t.Skip("definitions not installed")
	}
	return output
}

// TestValueSetsAreUpToDate fails when valuesets.txt is not what the
// generator makes of the installed definitions: edit the generator, not
// the table.
func TestValueSetsAreUpToDate(t *testing.T) {
	got := cached(t)
	want, err := os.ReadFile(filepath.Join("..", "..", "valuesets.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("valuesets.txt is stale; run: cd pkg && go generate ./terminology")
	}
	if again := generate(t); !bytes.Equal(again, got) {
		t.Fatal("generator output is not deterministic")
	}
}

func TestGeneratedTableContents(t *testing.T) {
	out := string(cached(t))
	for _, want := range []string{
		// A code system's concepts, with displays.
		"valueset\thttp://hl7.org/fhir/ValueSet/administrative-gender\t4.0.1\tAdministrativeGender\tAdministrativeGender\tactive\n",
		// A value set of several includes (a v3 system and a v3 null flavor).
		"valueset\thttp://hl7.org/fhir/ValueSet/marital-status\t",
		// Medplum's own types bind their own value sets.
		"valueset\thttps://medplum.com/fhir/ValueSet/",
		// SNOMED CT is not in the definitions: known, with the reason.
		"unexpandable\thttp://hl7.org/fhir/ValueSet/clinical-findings\t",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}
