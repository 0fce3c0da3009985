package fhirsvc

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhirschema"
	"github.com/pinion-health/pinion/pkg/search"
)

// capabilityStatement lists what the server really supports: every stored
// type, its interactions and the search parameters Parse accepts.
func capabilityStatement(base string) []byte {
	type param struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	type operation struct {
		Name       string `json:"name"`
		Definition string `json:"definition"`
	}
	type interaction struct {
		Code string `json:"code"`
	}
	type resource struct {
		Type        string        `json:"type"`
		Interaction []interaction `json:"interaction"`
		Versioning  string        `json:"versioning"`
		ReadHistory bool          `json:"readHistory"`
		SearchParam []param       `json:"searchParam,omitempty"`
		Operation   []operation   `json:"operation,omitempty"`
	}
	var resources []resource
	inter := []interaction{{"read"}, {"vread"}, {"update"}, {"patch"}, {"delete"}, {"history-instance"}, {"create"}, {"search-type"}}
	for _, t := range fhirschema.ResourceTypes() {
		r := resource{Type: t, Interaction: inter, Versioning: "versioned", ReadHistory: true}
		for _, p := range search.Params(t) {
			r.SearchParam = append(r.SearchParam, param{Name: p.Code, Type: p.Type})
		}
		switch t {
		case "ValueSet":
			r.Operation = []operation{
				{"expand", "http://hl7.org/fhir/OperationDefinition/ValueSet-expand"},
				{"validate-code", "http://hl7.org/fhir/OperationDefinition/ValueSet-validate-code"},
			}
		case "CodeSystem":
			r.Operation = []operation{{"lookup", "http://hl7.org/fhir/OperationDefinition/CodeSystem-lookup"}}
		}
		resources = append(resources, r)
	}
	cs := map[string]any{
		"resourceType": "CapabilityStatement",
		"status":       "active",
		"date":         time.Now().UTC().Format("2006-01-02"),
		"kind":         "instance",
		"software":     map[string]any{"name": "Pinion"},
		"implementation": map[string]any{
			"description": "Pinion FHIR R4 server", "url": base + "fhir/R4",
		},
		"fhirVersion": "4.0.1",
		"format":      []string{"application/fhir+json", "json"},
		"rest": []map[string]any{{
			"mode":     "server",
			"resource": resources,
			// Parameters every type takes beside its own.
			"searchParam": []param{{Name: "_filter", Type: "special"}},
			// System-level operations.
			"operation": []operation{{"graphql", "http://hl7.org/fhir/OperationDefinition/Resource-graphql"}},
			"security": map[string]any{
				"cors": true,
				"service": []map[string]any{{"coding": []map[string]any{{
					"system": "http://terminology.hl7.org/CodeSystem/restful-security-service", "code": "SMART-on-FHIR",
				}}}},
			},
		}},
	}
	b, _ := json.Marshal(cs)
	return b
}

func (s *Service) capabilities(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return bus.FHIR(200, s.metadata), nil
}
