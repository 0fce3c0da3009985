package graphql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// requestSchemaQuery is the query @medplum/core 5.2.13's requestSchema
// sends for Patient (its whitespace collapsed as the client does).
const requestSchemaQuery = `{ StructureDefinitionList(_filter: "name eq Patient") { resourceType, name, kind, description, type, url, snapshot { element { id, path, definition, min, max, base { path, min, max }, contentReference, type { code, profile, targetProfile }, binding { strength, valueSet } } } } SearchParameterList(base: "Patient", _count: 100) { base, code, type, expression, target } }`

// emptyStore holds no resource: a project that stored none.
type emptyStore struct{}

func (emptyStore) Read(context.Context, string, string) (map[string]any, error) {
	return nil, fhir.NotFound()
}

func (emptyStore) Search(context.Context, string, url.Values) ([]map[string]any, error) {
	return nil, nil
}

func (emptyStore) Create(context.Context, string, map[string]any) (map[string]any, error) {
	return nil, fhir.Forbidden()
}

func (emptyStore) Update(context.Context, string, string, map[string]any) (map[string]any, error) {
	return nil, fhir.Forbidden()
}

func (emptyStore) Delete(context.Context, string, string) error { return fhir.Forbidden() }

// run executes a query against a project that stored nothing: the
// definitions' tables, or a query refused before any read.
func run(t *testing.T, q string) (map[string]any, error) {
	t.Helper()
	resp, err := Execute(context.Background(), emptyStore{}, Request{Query: q}, DefaultLimits)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out, nil
}

func TestRequestSchemaQuery(t *testing.T) {
	out, err := run(t, requestSchemaQuery)
	if err != nil {
		t.Fatal(err)
	}
	data := out["data"].(map[string]any)
	sds := data["StructureDefinitionList"].([]any)
	if len(sds) != 1 {
		t.Fatalf("want one StructureDefinition, got %d", len(sds))
	}
	sd := sds[0].(map[string]any)
	if sd["name"] != "Patient" || sd["kind"] != "resource" || sd["resourceType"] != "StructureDefinition" {
		t.Fatalf("StructureDefinition: %v", sd)
	}
	byPath := map[string]map[string]any{}
	for _, e := range sd["snapshot"].(map[string]any)["element"].([]any) {
		el := e.(map[string]any)
		delete(el, "definition") // TestRequestSchemaQueryTexts reads the texts
		byPath[el["path"].(string)] = el
	}
	for path, want := range map[string]string{
		"Patient":              `{"base":{"max":"*","min":0,"path":"Patient"},"binding":null,"contentReference":null,"id":"Patient","max":"*","min":0,"path":"Patient","type":null}`,
		"Patient.gender":       `{"base":{"max":"1","min":0,"path":"Patient.gender"},"binding":{"strength":"required","valueSet":"http://hl7.org/fhir/ValueSet/administrative-gender|4.0.1"},"contentReference":null,"id":"Patient.gender","max":"1","min":0,"path":"Patient.gender","type":[{"code":"code","profile":null,"targetProfile":null}]}`,
		"Patient.deceased[x]":  `{"base":{"max":"1","min":0,"path":"Patient.deceased[x]"},"binding":null,"contentReference":null,"id":"Patient.deceased[x]","max":"1","min":0,"path":"Patient.deceased[x]","type":[{"code":"boolean","profile":null,"targetProfile":null},{"code":"dateTime","profile":null,"targetProfile":null}]}`,
		"Patient.contact":      `{"base":{"max":"*","min":0,"path":"Patient.contact"},"binding":null,"contentReference":null,"id":"Patient.contact","max":"*","min":0,"path":"Patient.contact","type":[{"code":"BackboneElement","profile":null,"targetProfile":null}]}`,
		"Patient.contact.name": `{"base":{"max":"1","min":0,"path":"Patient.contact.name"},"binding":null,"contentReference":null,"id":"Patient.contact.name","max":"1","min":0,"path":"Patient.contact.name","type":[{"code":"HumanName","profile":null,"targetProfile":null}]}`,
		"Patient.link.other":   `{"base":{"max":"1","min":1,"path":"Patient.link.other"},"binding":null,"contentReference":null,"id":"Patient.link.other","max":"1","min":1,"path":"Patient.link.other","type":[{"code":"Reference","profile":null,"targetProfile":["http://hl7.org/fhir/StructureDefinition/Patient","http://hl7.org/fhir/StructureDefinition/RelatedPerson"]}]}`,
	} {
		got, _ := json.Marshal(byPath[path])
		if string(got) != want {
			t.Errorf("%s:\n got %s\nwant %s", path, got, want)
		}
	}
	params := map[string]map[string]any{}
	for _, p := range data["SearchParameterList"].([]any) {
		sp := p.(map[string]any)
		params[sp["code"].(string)] = sp
	}
	if len(params) < 20 || len(params) > 100 {
		t.Fatalf("Patient has %d search parameters", len(params))
	}
	for code, want := range map[string]string{
		"name":         `{"base":["Patient"],"code":"name","expression":"Patient.name","target":null,"type":"string"}`,
		"birthdate":    `{"base":["Patient"],"code":"birthdate","expression":"Patient.birthDate","target":null,"type":"date"}`,
		"organization": `{"base":["Patient"],"code":"organization","expression":"Patient.managingOrganization","target":["Organization"],"type":"reference"}`,
	} {
		got, _ := json.Marshal(params[code])
		if string(got) != want {
			t.Errorf("%s:\n got %s\nwant %s", code, got, want)
		}
	}
}

// requestSchema's answer carries the texts Medplum's app shows: each
// element's definition, the type's description, and the resource types a
// reference may point at (type.targetProfile).
func TestRequestSchemaQueryTexts(t *testing.T) {
	out, err := run(t, requestSchemaQuery)
	if err != nil {
		t.Fatal(err)
	}
	sds := out["data"].(map[string]any)["StructureDefinitionList"].([]any)
	if len(sds) != 1 {
		t.Fatalf("want one StructureDefinition, got %d", len(sds))
	}
	sd := sds[0].(map[string]any)
	if d, _ := sd["description"].(string); !strings.HasPrefix(d, "Demographics and other administrative information about an individual or animal receiving care") {
		t.Errorf("description: %q", d)
	}
	byPath := map[string]map[string]any{}
	for _, e := range sd["snapshot"].(map[string]any)["element"].([]any) {
		el := e.(map[string]any)
		byPath[el["path"].(string)] = el
	}
	for path, want := range map[string]string{
		"Patient":              "Demographics and other administrative information about an individual or animal receiving care",
		"Patient.active":       "Whether this patient record is in active use",
		"Patient.contact.name": "A name associated with the contact person.",
		"Patient.link.other":   "The other patient resource that the link refers to.",
	} {
		if d, _ := byPath[path]["definition"].(string); !strings.HasPrefix(d, want) {
			t.Errorf("%s definition: %q, want it to start with %q", path, d, want)
		}
	}
	for path, want := range map[string]string{
		"Patient.generalPractitioner": `[{"code":"Reference","profile":null,"targetProfile":["http://hl7.org/fhir/StructureDefinition/Organization","http://hl7.org/fhir/StructureDefinition/Practitioner","http://hl7.org/fhir/StructureDefinition/PractitionerRole"]}]`,
		"Patient.link.other":          `[{"code":"Reference","profile":null,"targetProfile":["http://hl7.org/fhir/StructureDefinition/Patient","http://hl7.org/fhir/StructureDefinition/RelatedPerson"]}]`,
		"Patient.active":              `[{"code":"boolean","profile":null,"targetProfile":null}]`,
	} {
		if got, _ := json.Marshal(byPath[path]["type"]); string(got) != want {
			t.Errorf("%s type:\n got %s\nwant %s", path, got, want)
		}
	}
}

// A content reference (Questionnaire.item.item) is written as one, not
// expanded without end.
func TestStructureDefinitionContentReference(t *testing.T) {
	out, err := run(t, `{ StructureDefinitionList(name: "Questionnaire") { snapshot { element { path contentReference } } } }`)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(out)
	if !strings.Contains(string(b), `{"contentReference":"#Questionnaire.item","path":"Questionnaire.item.item"}`) {
		t.Fatalf("no content reference for Questionnaire.item.item: %.400s", b)
	}
}

func outcomeOf(t *testing.T, err error) *fhir.Error {
	t.Helper()
	var fe *fhir.Error
	if !errors.As(err, &fe) {
		t.Fatalf("want a *fhir.Error, got %v", err)
	}
	return fe
}

func TestRefusedRequests(t *testing.T) {
	nest := func(depth int) string {
		q := "id"
		for range depth {
			q = "contained { ... on Patient { " + q + " } }"
		}
		return `{ Patient(id: "x") { ` + q + ` } }`
	}
	var wide strings.Builder
	wide.WriteString(`{ Patient(id: "x") {`)
	for i := range 129 {
		fmt.Fprintf(&wide, " f%d: id", i)
	}
	wide.WriteString(" } }")
	// Each fragment spreads the next 100 times, five deep: 10^10 fields
	// from 30 KB, within the depth and breadth bounds.
	var frags strings.Builder
	frags.WriteString(`{ Patient(id: "x") { ...F0 } } fragment F5 on Patient { id }`)
	for i := 4; i >= 0; i-- {
		fmt.Fprintf(&frags, " fragment F%d on Patient {", i)
		for j := range 100 {
			fmt.Fprintf(&frags, " a%d: contained { ...F%d }", j, i+1)
		}
		frags.WriteString(" }")
	}
	for _, tc := range []struct {
		name, query, want string
	}{
		{"no query", "  ", "Must provide query."},
		{"syntax", "{ Patient(id: ", "GraphQL syntax error."},
		{"unknown field", `{ Patient(id: "x") { nosuchfield } }`, `Cannot query field "nosuchfield" on type "Patient".`},
		{"unknown argument", `{ PatientList(nosuch: "x") { id } }`, `Unknown argument "nosuch" on field "QueryType.PatientList".`},
		{"too large", "{ " + strings.Repeat(" ", 33<<10) + " }", "Query too large"},
		{"too deep", nest(12), "exceeds max depth"},
		{"too wide", wide.String(), "Too many fields in one selection (max 128)"},
		{"too costly", `{ PatientList(_count: 1000) { managingOrganization { resource { ... on Organization { PatientList(_reference: organization, _count: 5) { id } } } } } }`, "Query too expensive"},
		{"fragment explosion", frags.String(), "Query too complex"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := run(t, tc.query)
			if err == nil {
				t.Fatal("accepted")
			}
			fe := outcomeOf(t, err)
			if fe.Status != 400 || !strings.Contains(fe.Message(), tc.want) {
				t.Fatalf("got %d %s, want 400 with %q", fe.Status, fe.JSON(), tc.want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("refused after %v", d)
			}
		})
	}
}

// The schema is not served whole (Medplum needs a project feature for it).
func TestIntrospectionForbidden(t *testing.T) {
	for _, q := range []string{`{ __schema { types { name } } }`, `{ __type(name: "Patient") { name } }`, `query { ...F } fragment F on QueryType { __schema { queryType { name } } }`} {
		if _, err := run(t, q); err == nil || outcomeOf(t, err).Status != 403 {
			t.Errorf("%s: %v", q, err)
		}
	}
}

// A field that cannot be answered is an entry of errors, with its path,
// beside the rest of the data (status 200), as graphql-js answers.
func TestFieldErrorBesideData(t *testing.T) {
	out, err := run(t, `{ StructureDefinitionList(_filter: "name co Pat") { name } SearchParameterList(base: "Patient", code: "gender") { code } }`)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(out)
	want := `{"data":{"SearchParameterList":[{"code":"gender"}],"StructureDefinitionList":null},"errors":[{"locations":[{"column":3,"line":1}],"message":"Unsupported _filter on definitions: name co Pat (supported: \u003cname|type|url\u003e eq \u003cvalue\u003e, joined by and)","path":["StructureDefinitionList"]}]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}
