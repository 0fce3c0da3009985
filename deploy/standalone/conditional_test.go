package standalone

import (
	"net/url"
	"strings"
	"sync"
	"testing"
)

func TestConditionalCreateAndUpdate(t *testing.T) {
	_, tok := project(t, "conditional")
	body := []byte(`{"resourceType":"Patient","identifier":[{"system":"http://x","value":"ine"}]}`)
	// Racing conditional creates make one resource.
	var wg sync.WaitGroup
	ids := make([]string, 4)
	statuses := make([]int, 4)
	for i := range ids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", body, "If-None-Exist", "identifier=http://x|ine")
			statuses[i] = r.status
			ids[i], _ = r.json(t)["id"].(string)
		}(i)
	}
	wg.Wait()
	created := 0
	for i, st := range statuses {
		if st == 201 {
			created++
		} else if st != 200 {
			t.Fatalf("status %d", st)
		}
		if ids[i] != ids[0] {
			t.Fatalf("conditional creates made different resources: %v", ids)
		}
	}
	if created != 1 {
		t.Fatalf("%d creates", created)
	}
	expect(t, do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", body, "If-None-Exist", "nonsense=1"), 400)

	// Conditional update: create when none, update the one match, 412 for several.
	q := "fhir/R4/Patient?identifier=" + url.QueryEscape("http://x|ups")
	up := []byte(`{"resourceType":"Patient","identifier":[{"system":"http://x","value":"ups"}],"gender":"male"}`)
	r := do(t, "PUT", q, tok, "application/fhir+json", up)
	expect(t, r, 201)
	id := r.json(t)["id"].(string)
	r = do(t, "PUT", q, tok, "application/fhir+json", []byte(strings.Replace(string(up), "male", "female", 1)))
	expect(t, r, 200)
	if r.json(t)["id"] != id || r.json(t)["gender"] != "female" {
		t.Fatalf("conditional update: %s", r.body)
	}
	for i := 0; i < 2; i++ {
		expect(t, do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", []byte(`{"resourceType":"Patient","gender":"unknown"}`)), 201)
	}
	r = do(t, "PUT", "fhir/R4/Patient?gender=unknown", tok, "application/fhir+json", up)
	expect(t, r, 412)
	expect(t, do(t, "PUT", "fhir/R4/Patient", tok, "application/fhir+json", up), 400)
}

func TestValidateAndBatch(t *testing.T) {
	_, tok := project(t, "batch")
	expect(t, do(t, "POST", "fhir/R4/Patient/$validate", tok, "application/fhir+json", []byte(`{"resourceType":"Patient","gender":"female"}`)), 200)
	r := do(t, "POST", "fhir/R4/Patient/$validate", tok, "application/fhir+json", []byte(`{"resourceType":"Patient","gender":"robot"}`))
	expect(t, r, 400)

	r = do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", patient("Batched"))
	expect(t, r, 201)
	id := r.json(t)["id"].(string)
	batch := `{"resourceType":"Bundle","type":"batch","entry":[
		{"request":{"method":"GET","url":"/Patient/` + id + `"}},
		{"request":{"method":"GET","url":"Patient/00000000-0000-0000-0000-000000000000"}},
		{"resource":{"resourceType":"Patient","gender":"other"},"request":{"method":"POST","url":"Patient"}},
		{"request":{"method":"GET","url":"Patient?family=Batched"}}]}`
	r = do(t, "POST", "fhir/R4", tok, "application/fhir+json", []byte(batch))
	expect(t, r, 200)
	entries := r.json(t)["entry"].([]any)
	want := []string{"200 OK", "404 Not Found", "201 Created", "200 OK"}
	for i, e := range entries {
		resp := e.(map[string]any)["response"].(map[string]any)
		if resp["status"] != want[i] {
			t.Fatalf("entry %d: %v, want %s", i, resp, want[i])
		}
	}
	if entries[1].(map[string]any)["response"].(map[string]any)["outcome"] == nil {
		t.Fatal("failed entry lacks its outcome")
	}

	// A transaction resolves urn:uuid references, and a failing entry undoes its creates.
	tx := `{"resourceType":"Bundle","type":"transaction","entry":[
		{"fullUrl":"urn:uuid:61ebe359-bfdc-4613-8bf2-c5e300945f0a","resource":{"resourceType":"Patient","gender":"male"},"request":{"method":"POST","url":"Patient"}},
		{"resource":{"resourceType":"Observation","status":"final","code":{"text":"x"},"subject":{"reference":"urn:uuid:61ebe359-bfdc-4613-8bf2-c5e300945f0a"}},"request":{"method":"POST","url":"Observation"}}]}`
	r = do(t, "POST", "fhir/R4", tok, "application/fhir+json", []byte(tx))
	expect(t, r, 200)
	obs := r.json(t)["entry"].([]any)[1].(map[string]any)["resource"].(map[string]any)
	if ref := obs["subject"].(map[string]any)["reference"].(string); !strings.HasPrefix(ref, "Patient/") {
		t.Fatalf("urn:uuid not resolved: %s", ref)
	}
	count := func() float64 {
		r := do(t, "GET", "fhir/R4/Patient?_summary=count", tok, "", nil)
		return r.json(t)["total"].(float64)
	}
	before := count()
	bad := `{"resourceType":"Bundle","type":"transaction","entry":[
		{"resource":{"resourceType":"Patient"},"request":{"method":"POST","url":"Patient"}},
		{"resource":{"resourceType":"Patient","gender":"robot"},"request":{"method":"POST","url":"Patient"}}]}`
	expect(t, do(t, "POST", "fhir/R4", tok, "application/fhir+json", []byte(bad)), 400)
	if after := count(); after != before {
		t.Fatalf("failed transaction left %v patients behind", after-before)
	}
	expect(t, do(t, "POST", "fhir/R4", tok, "application/fhir+json", []byte(`{"resourceType":"Patient"}`)), 400)

	// All or nothing: an update made before the failing entry does not stay
	// (creates run first, so the failing entry is an update too).
	r = do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", []byte(`{"resourceType":"Patient","gender":"male"}`))
	expect(t, r, 201)
	kept := r.json(t)
	keptID := kept["id"].(string)
	bad = `{"resourceType":"Bundle","type":"transaction","entry":[
		{"resource":{"resourceType":"Patient","id":"` + keptID + `","gender":"female"},"request":{"method":"PUT","url":"Patient/` + keptID + `"}},
		{"resource":{"resourceType":"Patient","id":"` + keptID + `","gender":"robot"},"request":{"method":"PUT","url":"Patient/` + keptID + `"}}]}`
	expect(t, do(t, "POST", "fhir/R4", tok, "application/fhir+json", []byte(bad)), 400)
	now := do(t, "GET", "fhir/R4/Patient/"+keptID, tok, "", nil).json(t)
	if now["gender"] != "male" || now["meta"].(map[string]any)["versionId"] != kept["meta"].(map[string]any)["versionId"] {
		t.Fatalf("failed transaction's update stayed: %v", now)
	}
	if h, _ := do(t, "GET", "fhir/R4/Patient/"+keptID+"/_history", tok, "", nil).json(t)["entry"].([]any); len(h) != 1 {
		t.Fatalf("history has %d versions, want 1: the failed transaction left one", len(h))
	}
}
