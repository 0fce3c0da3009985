package standalone

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// The query @medplum/core 5.2.13's requestSchema sends for Patient, as it
// sends it (whitespace collapsed), before every list and resource form.
const medplumSchemaQuery = `{ StructureDefinitionList(_filter: "name eq Patient") { resourceType, name, kind, description, type, url, snapshot { element { id, path, definition, min, max, base { path, min, max }, contentReference, type { code, profile, targetProfile }, binding { strength, valueSet } } } } SearchParameterList(base: "Patient", _count: 100) { base, code, type, expression, target } }`

// graphQL posts a query as @medplum/core's graphql() does.
func graphQL(t *testing.T, token, query string, vars map[string]any) *response {
	t.Helper()
	body := map[string]any{"query": query}
	if vars != nil {
		body["variables"] = vars
	}
	return do(t, "POST", "fhir/R4/$graphql", token, "application/json", mustJSON(body))
}

// gqlAnswer is a 200 answer's data and errors, re-encoded for comparing.
func gqlAnswer(t *testing.T, r *response) (data map[string]any, errs []any) {
	t.Helper()
	expect(t, r, 200)
	m := r.json(t)
	data, _ = m["data"].(map[string]any)
	errs, _ = m["errors"].([]any)
	return data, errs
}

func asJSON(v any) string { return string(mustJSON(v)) }

func TestGraphQLSchemaQuery(t *testing.T) {
	_, tok := project(t, "GraphQL schema")
	data, errs := gqlAnswer(t, graphQL(t, tok, medplumSchemaQuery, nil))
	if errs != nil {
		t.Fatalf("errors: %v", errs)
	}
	sds := data["StructureDefinitionList"].([]any)
	if len(sds) != 1 || sds[0].(map[string]any)["name"] != "Patient" {
		t.Fatalf("StructureDefinitionList: %.300s", asJSON(sds))
	}
	elements := asJSON(sds[0].(map[string]any)["snapshot"])
	for _, want := range []string{`"path":"Patient.name"`, `"path":"Patient.contact.telecom"`, `"valueSet":"http://hl7.org/fhir/ValueSet/administrative-gender|4.0.1"`} {
		if !strings.Contains(elements, want) {
			t.Errorf("snapshot lacks %s", want)
		}
	}
	// The capability statement says it is served.
	r := do(t, "GET", "fhir/R4/metadata", "", "", nil)
	if !strings.Contains(string(r.body), `"operation":[{"name":"graphql","definition":"http://hl7.org/fhir/OperationDefinition/Resource-graphql"}]`) {
		t.Errorf("metadata does not name $graphql")
	}
	params := asJSON(data["SearchParameterList"])
	if !strings.Contains(params, `{"base":["Patient"],"code":"name","expression":"Patient.name","target":null,"type":"string"}`) {
		t.Fatalf("SearchParameterList lacks name: %.500s", params)
	}
}

// StructureDefinitionList lists the project's own profiles beside the
// base definitions, as Medplum's app finds them by name or url; another
// project does not see them.
func TestGraphQLListsProjectProfiles(t *testing.T) {
	_, tok := project(t, "GraphQL profiles")
	const profile = "http://example.com/fhir/StructureDefinition/graphql-project-patient"
	r := do(t, "POST", "fhir/R4/StructureDefinition", tok, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "StructureDefinition", "url": profile, "name": "GraphQLProjectPatient", "status": "active",
		"kind": "resource", "abstract": false, "type": "Patient", "derivation": "constraint",
		"baseDefinition": "http://hl7.org/fhir/StructureDefinition/Patient",
		"description":    "A patient of this project",
	}))
	expect(t, r, 201)
	want := `[{"description":"A patient of this project","name":"GraphQLProjectPatient","type":"Patient","url":"` + profile + `"}]`
	for _, q := range []string{
		`{ StructureDefinitionList(name: "GraphQLProjectPatient") { name, type, url, description } }`,
		`{ StructureDefinitionList(_filter: "url eq ` + profile + `") { name, type, url, description } }`,
	} {
		data, errs := gqlAnswer(t, graphQL(t, tok, q, nil))
		if errs != nil {
			t.Fatalf("errors: %v", errs)
		}
		if got := asJSON(data["StructureDefinitionList"]); got != want {
			t.Errorf("%s: %s, want %s", q, got, want)
		}
	}
	// A name is matched exactly, not as a prefix; the base Patient stays.
	data, _ := gqlAnswer(t, graphQL(t, tok, `{ StructureDefinitionList(name: "GraphQLProject") { name } }`, nil))
	if got := asJSON(data["StructureDefinitionList"]); got != `[]` {
		t.Errorf("by a prefix of the name: %s", got)
	}
	_, other := project(t, "GraphQL profiles elsewhere")
	data, _ = gqlAnswer(t, graphQL(t, other, `{ StructureDefinitionList(name: "GraphQLProjectPatient") { name } }`, nil))
	if got := asJSON(data["StructureDefinitionList"]); got != `[]` {
		t.Errorf("another project sees %s", got)
	}
}

// Every node of a query meets the caller's policy, as the REST request it
// stands for would: hidden fields are absent wherever the resource is
// reached (by id, in a list, through a reference, by a reverse link), a
// search on a hidden field is refused, another project's resource is not
// found, and a type the policy does not grant is forbidden.
func TestGraphQLHonoursPolicy(t *testing.T) {
	pid, su := adminProject(t, "GraphQL policy")
	create := func(res map[string]any) string {
		res["meta"] = map[string]any{"project": pid}
		r := do(t, "POST", "fhir/R4/"+res["resourceType"].(string), su, "application/fhir+json", mustJSON(res))
		expect(t, r, 201)
		return r.json(t)["id"].(string)
	}
	org := create(map[string]any{"resourceType": "Organization", "name": "Gq Clinic"})
	pat := create(map[string]any{"resourceType": "Patient", "name": []any{map[string]any{"family": "Gqlpolicy"}},
		"birthDate": "1970-01-02", "gender": "female", "managingOrganization": map[string]any{"reference": "Organization/" + org}})
	tok := policyClient(t, su, pid,
		map[string]any{"resourceType": "Patient", "hiddenFields": []any{"birthDate"}},
		map[string]any{"resourceType": "Organization"})

	q := `query($id: ID!, $org: ID!) {
	  Patient(id: $id) { id birthDate gender }
	  PatientList(name: "Gqlpolicy") { id birthDate name { family } managingOrganization { resource { __typename ... on Organization { name } } } }
	  Organization(id: $org) { name PatientList(_reference: organization) { id birthDate gender } }
	}`
	r := graphQL(t, tok, q, map[string]any{"id": pat, "org": org})
	if _, errs := gqlAnswer(t, r); errs != nil {
		t.Fatalf("errors: %v", errs)
	}
	want := `{"Patient":{"id":"` + pat + `","birthDate":null,"gender":"female"},` +
		`"PatientList":[{"id":"` + pat + `","birthDate":null,"name":[{"family":"Gqlpolicy"}],"managingOrganization":{"resource":{"__typename":"Organization","name":"Gq Clinic"}}}],` +
		`"Organization":{"name":"Gq Clinic","PatientList":[{"id":"` + pat + `","birthDate":null,"gender":"female"}]}}`
	if got := string(ordered(t, r)); got != want {
		t.Fatalf("data:\n got %s\nwant %s", got, want)
	}

	// _filter, _sort and _offset reach the search as they would over REST.
	data, errs := gqlAnswer(t, graphQL(t, tok, `{ a: PatientList(_filter: "name eq Gqlpolicy", _sort: "-_lastUpdated") { id } b: PatientList(name: "Gqlpolicy", _offset: 1) { id } }`, nil))
	if errs != nil || asJSON(data) != `{"a":[{"id":"`+pat+`"}],"b":[]}` {
		t.Fatalf("_filter, _sort, _offset: %v %v", asJSON(data), errs)
	}

	// The super admin sees the field, so it is the policy that hid it.
	data, _ = gqlAnswer(t, graphQL(t, su, `{ Patient(id: "`+pat+`") { birthDate } }`, nil))
	if asJSON(data) != `{"Patient":{"birthDate":"1970-01-02"}}` {
		t.Fatalf("super admin: %s", asJSON(data))
	}

	// Searching on the hidden field would reveal it: as a parameter, or
	// inside _filter at any depth (a binary search over birthdate gt ...
	// recovered the date in 16 requests).
	for _, list := range []string{
		`PatientList(birthdate: "1970-01-02")`,
		`PatientList(_filter: "birthdate gt 1969-01-01")`,
		`PatientList(_filter: "name eq Gqlpolicy and (gender eq male or birthdate eq 1970-01-02)")`,
	} {
		_, errs = gqlAnswer(t, graphQL(t, tok, `{ `+list+` { id } }`, nil))
		if len(errs) != 1 || !strings.Contains(fmt.Sprint(errs[0]), "hidden by your access policy") {
			t.Fatalf("%s: errors %v", list, errs)
		}
	}
	for _, query := range []string{"birthdate=gt1969-01-01", "_filter=birthdate+gt+1969-01-01", "_filter=" + url.QueryEscape("name eq Gqlpolicy and birthdate pr true")} {
		r := do(t, "GET", "fhir/R4/Patient?"+query, tok, "", nil)
		if r.status != 400 || !strings.Contains(string(r.body), "Search parameter birthdate reads a field hidden by your access policy") {
			t.Fatalf("GET Patient?%s: %d %s", query, r.status, r.body)
		}
	}

	// Another project's client: not found by id, absent from lists.
	_, other := project(t, "GraphQL other project")
	r = graphQL(t, other, `{ Patient(id: "`+pat+`") { id } PatientList(name: "Gqlpolicy") { id } }`, nil)
	if got := string(r.body); r.status != 200 || got != `{"data":{"Patient":null,"PatientList":[]},"errors":[{"message":"Not found","locations":[{"line":1,"column":3}],"path":["Patient"]}]}` {
		t.Fatalf("another project: %d %s", r.status, got)
	}

	// A type the policy does not grant.
	_, errs = gqlAnswer(t, graphQL(t, tok, `{ ObservationList { id } }`, nil))
	if len(errs) != 1 || errs[0].(map[string]any)["message"] != "Forbidden" {
		t.Fatalf("a type the policy does not grant: %v", errs)
	}
}

// ordered is a 200 answer's data as sent, keys in the query's order.
func ordered(t *testing.T, r *response) json.RawMessage {
	t.Helper()
	expect(t, r, 200)
	var m struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatal(err)
	}
	return m.Data
}

// Mutations run as the REST writes they stand for.
func TestGraphQLMutations(t *testing.T) {
	_, tok := project(t, "GraphQL mutations")
	data, errs := gqlAnswer(t, graphQL(t, tok, `mutation { PatientCreate(res: {resourceType: "Patient", name: [{family: "Mutated"}]}) { id name { family } } }`, nil))
	if errs != nil {
		t.Fatalf("create: %v", errs)
	}
	id := data["PatientCreate"].(map[string]any)["id"].(string)
	expect(t, do(t, "GET", "fhir/R4/Patient/"+id, tok, "", nil), 200)

	data, errs = gqlAnswer(t, graphQL(t, tok, `mutation($id: ID!, $res: JSON!) { PatientUpdate(id: $id, res: $res) { gender } }`,
		map[string]any{"id": id, "res": map[string]any{"resourceType": "Patient", "id": id, "gender": "other"}}))
	if errs != nil || asJSON(data) != `{"PatientUpdate":{"gender":"other"}}` {
		t.Fatalf("update: %v %v", data, errs)
	}

	// An invalid resource is refused as the REST create refuses it.
	_, errs = gqlAnswer(t, graphQL(t, tok, `mutation { PatientCreate(res: {resourceType: "Patient", gender: 3}) { id } }`, nil))
	if len(errs) != 1 {
		t.Fatalf("invalid create: %v", errs)
	}

	_, errs = gqlAnswer(t, graphQL(t, tok, `mutation($id: ID!) { PatientDelete(id: $id) { id } }`, map[string]any{"id": id}))
	if errs != nil {
		t.Fatalf("delete: %v", errs)
	}
	expect(t, do(t, "GET", "fhir/R4/Patient/"+id, tok, "", nil), 410)
}

// Requests that cannot run are a 400 OperationOutcome, as Medplum answers
// them, and those beyond a bound are refused before anything is read.
func TestGraphQLRefusals(t *testing.T) {
	_, tok := project(t, "GraphQL refusals")
	deep := "id"
	for range 12 {
		deep = "contained { ... on Patient { " + deep + " } }"
	}
	for _, tc := range []struct{ name, query, want string }{
		{"syntax", `{ PatientList( }`, "GraphQL syntax error."},
		{"unknown field", `{ PatientList { nosuch } }`, `Cannot query field "nosuch" on type "Patient".`},
		{"too deep", `{ PatientList { ` + deep + ` } }`, "exceeds max depth"},
		{"too wide", `{ PatientList { ` + strings.Repeat("id ", 1) + aliases(129) + ` } }`, "Too many fields"},
		{"too costly", `{ PatientList(_count: 1000) { managingOrganization { resource { ... on Organization { PatientList(_reference: organization, _count: 1000) { id } } } } } }`, "Query too expensive"},
		{"too large", `{ PatientList { id } }` + strings.Repeat(" ", 40<<10), "Query too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := graphQL(t, tok, tc.query, nil)
			expect(t, r, 400)
			if got := r.outcomeText(t); !strings.Contains(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("refused after %v", d)
			}
		})
	}
	expect(t, do(t, "POST", "fhir/R4/$graphql", "", "application/json", mustJSON(map[string]any{"query": "{ PatientList { id } }"})), 401)
	expect(t, do(t, "POST", "fhir/R4/$graphql", tok, "application/json", []byte(`{"query": `)), 400)
}

func aliases(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(" a")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(string(rune('a'+i%26)) + string(rune('a'+i/26)) + ": id")
	}
	return b.String()
}
