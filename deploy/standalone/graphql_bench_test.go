package standalone

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
)

// The two GraphQL requests Medplum's app makes most, over HTTP through the
// whole stack: the schema query before each form, and a list of 20
// Patients beside the REST search it stands for.
//
//	go test -run '^$' -bench GraphQL -benchtime 200x ./deploy/standalone/

func benchPost(b *testing.B, method, path, token, contentType string, body []byte) {
	b.Helper()
	req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("%s %s: %d", method, path, resp.StatusCode)
	}
}

// benchCall makes one request and decodes its JSON answer.
func benchCall(b *testing.B, method, path, token, contentType string, body []byte, want int) map[string]any {
	b.Helper()
	req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != want {
		b.Fatalf("%s %s: %d %v", method, path, resp.StatusCode, m)
	}
	return m
}

// benchPatients makes a project with 20 Patients named Bench, and returns
// its client's token.
func benchPatients(b *testing.B) string {
	b.Helper()
	token := func(id, secret string) string {
		form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}
		return benchCall(b, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()), 200)["access_token"].(string)
	}
	su := token(saID, saSec)
	pid := benchCall(b, "POST", "admin/Project", su, "application/json", []byte(`{"resourceType":"Project","name":"GraphQL bench"}`), 201)["id"].(string)
	c := benchCall(b, "POST", "admin/projects/"+pid+"/client", su, "application/json", []byte(`{"name":"bench"}`), 201)
	tok := token(c["id"].(string), c["secret"].(string))
	for range 20 {
		benchCall(b, "POST", "fhir/R4/Patient", tok, "application/fhir+json", []byte(`{"resourceType":"Patient","name":[{"family":"Bench","given":["G"]}],"gender":"other","birthDate":"1980-01-01"}`), 201)
	}
	return tok
}

func BenchmarkGraphQLSchemaQuery(b *testing.B) {
	tok := benchPatients(b)
	body := mustJSON(map[string]any{"query": medplumSchemaQuery})
	benchPost(b, "POST", "fhir/R4/$graphql", tok, "application/json", body) // builds the schema once
	b.ResetTimer()
	for b.Loop() {
		benchPost(b, "POST", "fhir/R4/$graphql", tok, "application/json", body)
	}
}

func BenchmarkGraphQLPatientList20(b *testing.B) {
	tok := benchPatients(b)
	body := mustJSON(map[string]any{"query": `{ PatientList(name: "Bench", _count: 20) { id name { family given } gender birthDate } }`})
	benchPost(b, "POST", "fhir/R4/$graphql", tok, "application/json", body)
	b.ResetTimer()
	for b.Loop() {
		benchPost(b, "POST", "fhir/R4/$graphql", tok, "application/json", body)
	}
}

func BenchmarkRESTPatientSearch20(b *testing.B) {
	tok := benchPatients(b)
	b.ResetTimer()
	for b.Loop() {
		benchPost(b, "GET", "fhir/R4/Patient?name=Bench&_count=20", tok, "", nil)
	}
}
