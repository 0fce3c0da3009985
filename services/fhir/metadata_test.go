package fhirsvc

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhirschema"
	"github.com/pinion-health/pinion/pkg/search"
)

func TestCapabilityStatement(t *testing.T) {
	var cs struct {
		ResourceType, Status, Date, Kind, FhirVersion string
		Format                                        []string
		Software                                      struct{ Name string }
		Implementation                                struct{ Description, URL string }
		Rest                                          []struct {
			Mode     string
			Resource []struct {
				Type        string
				Interaction []struct{ Code string }
				Versioning  string
				ReadHistory bool
				SearchParam []struct{ Name, Type string }
			}
			Security struct {
				Cors    bool
				Service []struct {
					Coding []struct{ System, Code string }
				}
			}
		}
	}
	doc := capabilityStatement(base)
	if err := json.Unmarshal(doc, &cs); err != nil {
		t.Fatal(err)
	}
	if cs.ResourceType != "CapabilityStatement" || cs.Status != "active" || cs.Kind != "instance" || cs.FhirVersion != "4.0.1" ||
		!slices.Equal(cs.Format, []string{"application/fhir+json", "json"}) || cs.Software.Name != "Pinion" ||
		cs.Implementation.URL != base+"fhir/R4" || cs.Implementation.Description != "Pinion FHIR R4 server" {
		t.Fatalf("statement: %+v", cs)
	}
	if _, err := time.Parse("2006-01-02", cs.Date); err != nil {
		t.Fatalf("date %q: %v", cs.Date, err)
	}
	if len(cs.Rest) != 1 || cs.Rest[0].Mode != "server" || !cs.Rest[0].Security.Cors {
		t.Fatalf("rest: %+v", cs.Rest)
	}
	svc := cs.Rest[0].Security.Service
	if len(svc) != 1 || len(svc[0].Coding) != 1 || svc[0].Coding[0].Code != "SMART-on-FHIR" ||
		svc[0].Coding[0].System != "http://terminology.hl7.org/CodeSystem/restful-security-service" {
		t.Fatalf("security service: %+v", svc)
	}
	// Every stored type, with what the service really does for it.
	types := fhirschema.ResourceTypes()
	res := cs.Rest[0].Resource
	if len(res) != len(types) {
		t.Fatalf("%d resources, want %d", len(res), len(types))
	}
	want := []string{"read", "vread", "update", "patch", "delete", "history-instance", "create", "search-type"}
	for i, r := range res {
		if r.Type != types[i] || r.Versioning != "versioned" || !r.ReadHistory {
			t.Fatalf("resource %d: %+v, want type %s", i, r, types[i])
		}
		var codes []string
		for _, in := range r.Interaction {
			codes = append(codes, in.Code)
		}
		if !slices.Equal(codes, want) {
			t.Fatalf("%s interactions %v", r.Type, codes)
		}
		params := search.Params(r.Type)
		if len(r.SearchParam) != len(params) {
			t.Fatalf("%s: %d search parameters, want %d", r.Type, len(r.SearchParam), len(params))
		}
		for j, p := range params {
			if r.SearchParam[j].Name != p.Code || r.SearchParam[j].Type != p.Type {
				t.Fatalf("%s parameter %d: %+v, want %s %s", r.Type, j, r.SearchParam[j], p.Code, p.Type)
			}
		}
	}
}

func TestCapabilities(t *testing.T) {
	s := &Service{metadata: capabilityStatement(base)}
	resp, err := s.capabilities(context.Background(), &bus.Request{})
	wantNoError(t, err)
	if resp.Status != 200 || string(resp.Body) != string(s.metadata) || resp.Header["Content-Type"] != bus.FHIRContentType {
		t.Fatalf("answer %d %v", resp.Status, resp.Header)
	}
}
