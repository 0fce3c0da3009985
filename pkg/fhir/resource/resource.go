// Package resource holds the FHIR resources Pinion writes itself
// (AuditEvent, AsyncJob, ProjectMembership, User) as typed structs, and
// their encoding to the map the repository stores. Resources a caller
// sends stay maps: only these have a shape Pinion decides.
package resource

import (
	"encoding/json"
	"fmt"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// Map is a typed resource as the repository takes it: its JSON read back
// as a caller's body is (numbers exact, depth bounded).
func Map(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return fhir.Decode(b)
}

// Coding is a FHIR Coding.
type Coding struct {
	System  string `json:"system,omitempty"`
	Code    string `json:"code"`
	Display string `json:"display,omitempty"`
}

// CodeableConcept is a FHIR CodeableConcept with text only, the one form
// Pinion writes.
type CodeableConcept struct {
	Text string `json:"text"`
}

// Reference is a FHIR Reference by its literal reference, and its display.
type Reference struct {
	Reference string `json:"reference"`
	Display   string `json:"display,omitempty"`
}

// Period is a FHIR Period, its instants as RFC 3339 text.
type Period struct {
	Start string `json:"start"`
	End   string `json:"end"`
}
