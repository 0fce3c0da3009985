package fhirsvc

import (
	"encoding/json"
	"testing"
)

// TestCapabilityStatementNamesTerminology: the statement says what is
// true: _filter on every type, ValueSet's two operations and CodeSystem's
// $lookup.
func TestCapabilityStatementNamesTerminology(t *testing.T) {
	var cs struct {
		Rest []struct {
			SearchParam []struct{ Name, Type string }
			Resource    []struct {
				Type      string
				Operation []struct{ Name, Definition string }
			}
		}
	}
	if err := json.Unmarshal(capabilityStatement(base), &cs); err != nil {
		t.Fatal(err)
	}
	if sp := cs.Rest[0].SearchParam; len(sp) != 1 || sp[0].Name != "_filter" || sp[0].Type != "special" {
		t.Fatalf("rest.searchParam %+v", sp)
	}
	for _, r := range cs.Rest[0].Resource {
		switch {
		case r.Type == "ValueSet":
			if len(r.Operation) != 2 || r.Operation[0].Name != "expand" || r.Operation[1].Name != "validate-code" {
				t.Fatalf("ValueSet operations %+v", r.Operation)
			}
		case r.Type == "CodeSystem":
			if len(r.Operation) != 1 || r.Operation[0].Name != "lookup" {
				t.Fatalf("CodeSystem operations %+v", r.Operation)
			}
		case len(r.Operation) != 0:
			t.Fatalf("%s claims operations %+v", r.Type, r.Operation)
		}
	}
}
