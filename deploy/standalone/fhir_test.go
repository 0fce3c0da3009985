package standalone

import (
	"fmt"
	"strings"
	"testing"
)

func patient(family string, given ...string) []byte {
	name := map[string]any{"family": family}
	if len(given) > 0 {
		name["given"] = given
	}
	return mustJSON(map[string]any{
		"resourceType": "Patient",
		"name":         []any{name},
		"gender":       "female",
		"birthDate":    "1990-04-01",
	})
}

func TestCRUDVersionsHistory(t *testing.T) {
	_, tok := project(t, "crud")
	r := do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", patient("Smith", "Alice"))
	expect(t, r, 201)
	p := r.json(t)
	id := p["id"].(string)
	meta := p["meta"].(map[string]any)
	v1 := meta["versionId"].(string)
	if meta["lastUpdated"] == nil || meta["project"] == nil || r.header.Get("ETag") != `W/"`+v1+`"` || r.header.Get("Location") == "" {
		t.Fatalf("create: meta or headers missing: %v %v", meta, r.header)
	}

	r = do(t, "GET", "fhir/R4/Patient/"+id, tok, "", nil)
	expect(t, r, 200)
	if r.json(t)["meta"].(map[string]any)["versionId"] != v1 {
		t.Fatal("read returned another version")
	}

	// Update with the current version, then a stale If-Match → 412.
	p["gender"] = "other"
	r = do(t, "PUT", "fhir/R4/Patient/"+id, tok, "application/fhir+json", mustJSON(p), "If-Match", `W/"`+v1+`"`)
	expect(t, r, 200)
	v2 := r.json(t)["meta"].(map[string]any)["versionId"].(string)
	if v2 == v1 {
		t.Fatal("update kept the version")
	}
	expect(t, do(t, "PUT", "fhir/R4/Patient/"+id, tok, "application/fhir+json", mustJSON(p), "If-Match", `W/"`+v1+`"`), 412)

	// An identical update creates no version.
	r = do(t, "PUT", "fhir/R4/Patient/"+id, tok, "application/fhir+json", mustJSON(p))
	expect(t, r, 200)
	if r.json(t)["meta"].(map[string]any)["versionId"] != v2 {
		t.Fatal("no-op update made a new version")
	}

	// JSON Patch.
	r = do(t, "PATCH", "fhir/R4/Patient/"+id, tok, "application/json-patch+json",
		[]byte(`[{"op":"replace","path":"/gender","value":"male"},{"op":"add","path":"/active","value":true}]`))
	expect(t, r, 200)
	if pj := r.json(t); pj["gender"] != "male" || pj["active"] != true {
		t.Fatalf("patch result: %s", r.body)
	}

	// vread and history.
	r = do(t, "GET", "fhir/R4/Patient/"+id+"/_history/"+v1, tok, "", nil)
	expect(t, r, 200)
	if r.json(t)["gender"] != "female" {
		t.Fatal("vread returned the wrong version")
	}
	r = do(t, "GET", "fhir/R4/Patient/"+id+"/_history", tok, "", nil)
	expect(t, r, 200)
	if h := r.json(t); h["type"] != "history" || len(h["entry"].([]any)) != 3 {
		t.Fatalf("history: %s", r.body)
	}

	// Delete, then 410 on read, 404 for an unknown id.
	expect(t, do(t, "DELETE", "fhir/R4/Patient/"+id, tok, "", nil), 200)
	r = do(t, "GET", "fhir/R4/Patient/"+id, tok, "", nil)
	expect(t, r, 410)
	if r.outcomeText(t) != "Gone" {
		t.Fatal(string(r.body))
	}
	expect(t, do(t, "GET", "fhir/R4/Patient/00000000-0000-0000-0000-000000000000", tok, "", nil), 404)
}

func TestBadInputWritesNothing(t *testing.T) {
	_, tok := project(t, "bad input")
	count := func() float64 {
		r := do(t, "GET", "fhir/R4/Patient?_summary=count", tok, "", nil)
		expect(t, r, 200)
		return r.json(t)["total"].(float64)
	}
	before := count()
	big := `{"resourceType":"Patient","name":[{"family":"` + strings.Repeat("x", 70000) + `"}]}`
	deep := strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200)
	cases := []struct {
		name, method, path, ct, body string
		status                       int
		text                         string
	}{
		{"malformed JSON", "POST", "fhir/R4/Patient", "application/fhir+json", `{"resourceType":"Patient",`, 400, "Content could not be parsed"},
		{"trailing garbage", "POST", "fhir/R4/Patient", "application/fhir+json", `{"resourceType":"Patient"} x`, 400, "Content could not be parsed"},
		{"deeply nested", "POST", "fhir/R4/Patient", "application/fhir+json", deep, 400, ""},
		{"wrong content type", "POST", "fhir/R4/Patient", "text/plain", `{"resourceType":"Patient"}`, 415, "Unsupported media type"},
		{"oversize body", "POST", "fhir/R4/Patient", "application/fhir+json", big, 413, ""},
		{"type mismatch", "POST", "fhir/R4/Patient", "application/fhir+json", `{"resourceType":"Observation","status":"final","code":{"text":"x"}}`, 400, "Incorrect resource type"},
		{"unknown property", "POST", "fhir/R4/Patient", "application/fhir+json", `{"resourceType":"Patient","favouriteColour":"blue"}`, 400, ""},
		{"wrong type", "POST", "fhir/R4/Patient", "application/fhir+json", `{"resourceType":"Patient","active":"yes"}`, 400, ""},
		{"bad date", "POST", "fhir/R4/Patient", "application/fhir+json", `{"resourceType":"Patient","birthDate":"1st of May"}`, 400, ""},
		{"unknown type", "POST", "fhir/R4/Foo", "application/fhir+json", `{"resourceType":"Foo"}`, 400, "Unknown resource type: Foo"},
		{"patch not array", "PATCH", "fhir/R4/Patient/x", "application/json-patch+json", `{"op":"add"}`, 400, "Patch body must be an array"},
		{"patch empty", "PATCH", "fhir/R4/Patient/x", "application/json-patch+json", `[]`, 400, "Empty patch body"},
		{"patch wrong type", "PATCH", "fhir/R4/Patient/x", "application/json", `[]`, 415, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, tc.method, tc.path, tok, tc.ct, []byte(tc.body))
			expect(t, r, tc.status)
			if got := r.outcomeText(t); tc.text != "" && got != tc.text {
				t.Fatalf("text %q, want %q", got, tc.text)
			}
		})
	}
	if after := count(); after != before {
		t.Fatalf("bad input wrote resources: %v → %v", before, after)
	}
	t.Run("unknown search parameter", func(t *testing.T) {
		r := do(t, "GET", "fhir/R4/Patient?colour=blue", tok, "", nil)
		expect(t, r, 400)
	})
	t.Run("unknown route", func(t *testing.T) {
		r := do(t, "GET", "no/such/route", tok, "", nil)
		expect(t, r, 404)
		r.outcomeText(t)
	})
}

func TestProjectIsolation(t *testing.T) {
	_, a := project(t, "isolation A")
	_, b := project(t, "isolation B")
	r := do(t, "POST", "fhir/R4/Patient", a, "application/fhir+json", patient("Isolated", "Ann"))
	expect(t, r, 201)
	p := r.json(t)
	id := p["id"].(string)

	expect(t, do(t, "GET", "fhir/R4/Patient/"+id, b, "", nil), 404)
	expect(t, do(t, "GET", "fhir/R4/Patient/"+id+"/_history", b, "", nil), 404)
	p["gender"] = "male"
	expect(t, do(t, "PUT", "fhir/R4/Patient/"+id, b, "application/fhir+json", mustJSON(p)), 404)
	expect(t, do(t, "PATCH", "fhir/R4/Patient/"+id, b, "application/json-patch+json", []byte(`[{"op":"replace","path":"/gender","value":"male"}]`)), 404)
	expect(t, do(t, "DELETE", "fhir/R4/Patient/"+id, b, "", nil), 404)
	r = do(t, "GET", "fhir/R4/Patient?family=Isolated", b, "", nil)
	expect(t, r, 200)
	if r.json(t)["entry"] != nil {
		t.Fatalf("search leaked another project's patient: %s", r.body)
	}
	// A forged meta.project is ignored: the resource lands in the caller's project.
	forged := fmt.Sprintf(`{"resourceType":"Patient","meta":{"project":%q}}`, p["meta"].(map[string]any)["project"])
	r = do(t, "POST", "fhir/R4/Patient", b, "application/fhir+json", []byte(forged))
	expect(t, r, 201)
	if r.json(t)["meta"].(map[string]any)["project"] == p["meta"].(map[string]any)["project"] {
		t.Fatal("forged meta.project was kept")
	}
	// Still intact for its owner.
	r = do(t, "GET", "fhir/R4/Patient/"+id, a, "", nil)
	expect(t, r, 200)
	if r.json(t)["gender"] != "female" {
		t.Fatal("another project changed the patient")
	}
	// Non-admin members cannot read project-administration resources.
	expect(t, do(t, "GET", "fhir/R4/ProjectMembership", b, "", nil), 403)
}

func TestSearch(t *testing.T) {
	_, tok := project(t, "search")
	for i := 0; i < 5; i++ {
		expect(t, do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", patient(fmt.Sprintf("Searchfam%d", i), "Bob")), 201)
	}
	expect(t, do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", patient("Other", "Carol")), 201)
	r := do(t, "GET", "fhir/R4/Patient?name=searchfam&_count=2", tok, "", nil)
	expect(t, r, 200)
	b := r.json(t)
	if len(b["entry"].([]any)) != 2 {
		t.Fatalf("page size: %s", r.body)
	}
	var next string
	for _, l := range b["link"].([]any) {
		if l.(map[string]any)["relation"] == "next" {
			next = l.(map[string]any)["url"].(string)
		}
	}
	if next == "" {
		t.Fatalf("no next link: %s", r.body)
	}
	seen := 2
	for next != "" {
		path := next[strings.Index(next, "fhir/R4/"):]
		r = do(t, "GET", path, tok, "", nil)
		expect(t, r, 200)
		b = r.json(t)
		if e, ok := b["entry"].([]any); ok {
			seen += len(e)
		}
		next = ""
		for _, l := range b["link"].([]any) {
			if l.(map[string]any)["relation"] == "next" {
				next = l.(map[string]any)["url"].(string)
			}
		}
	}
	if seen != 5 {
		t.Fatalf("paged through %d patients, want 5", seen)
	}
	r = do(t, "GET", "fhir/R4/Patient?given=carol&_total=accurate", tok, "", nil)
	expect(t, r, 200)
	if r.json(t)["total"].(float64) != 1 {
		t.Fatalf("given search: %s", r.body)
	}
	r = do(t, "GET", "fhir/R4/Patient?_summary=count&birthdate=ge1990-01-01", tok, "", nil)
	expect(t, r, 200)
	if r.json(t)["total"].(float64) != 6 {
		t.Fatalf("birthdate count: %s", r.body)
	}
	r = do(t, "GET", "fhir/R4/Patient?_elements=gender&_count=1", tok, "", nil)
	expect(t, r, 200)
	res := r.json(t)["entry"].([]any)[0].(map[string]any)["resource"].(map[string]any)
	if res["name"] != nil || res["gender"] == nil {
		t.Fatalf("_elements: %v", res)
	}
	r = do(t, "GET", "fhir/R4/metadata", "", "", nil)
	expect(t, r, 200)
	if r.json(t)["resourceType"] != "CapabilityStatement" {
		t.Fatal("metadata")
	}
}

// Raw uploads and downloads of Binary content, as Medplum's createBinary
// and download do; readResource still gets the FHIR JSON.
func TestBinaryContent(t *testing.T) {
	_, tok := project(t, "binary")
	r := do(t, "POST", "fhir/R4/Binary?_filename=h.txt", tok, "text/plain", []byte("hello binary"))
	expect(t, r, 201)
	b := r.json(t)
	id := b["id"].(string)
	// The url is a signed storage URL, as Medplum's createBinary answers (attachments_test.go).
	if u, _ := b["url"].(string); b["contentType"] != "text/plain" || !strings.Contains(u, "/storage/"+id+"/") {
		t.Fatalf("binary: %s", r.body)
	}
	r = do(t, "GET", "fhir/R4/Binary/"+id, tok, "", nil, "Accept", "*/*")
	expect(t, r, 200)
	if string(r.body) != "hello binary" || r.header.Get("Content-Type") != "text/plain" {
		t.Fatalf("download: %q %q", r.header.Get("Content-Type"), r.body)
	}
	// Content whose type the uploader chose is never sniffed into another.
	r = do(t, "POST", "fhir/R4/Binary", tok, "text/html", []byte("<script>alert(1)</script>"))
	expect(t, r, 201)
	r = do(t, "GET", "fhir/R4/Binary/"+r.json(t)["id"].(string), tok, "", nil, "Accept", "*/*")
	expect(t, r, 200)
	if r.header.Get("Content-Type") != "text/html" || r.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("download of html: type %q, nosniff %q", r.header.Get("Content-Type"), r.header.Get("X-Content-Type-Options"))
	}
	r = do(t, "GET", "fhir/R4/Binary/"+id, tok, "", nil, "Accept", "application/fhir+json")
	expect(t, r, 200)
	if r.json(t)["resourceType"] != "Binary" {
		t.Fatal(string(r.body))
	}
}

// Empty values are dropped before validation, as Medplum drops them; what
// is stored and answered has none. Empty items of an array are refused.
func TestEmptyValuesDropped(t *testing.T) {
	_, tok := project(t, "empty values")
	r := do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", []byte(
		`{"resourceType":"Patient","gender":"","active":null,"name":[{"family":"Empty","given":[],"period":{"start":""}}],"telecom":[{"value":""}],"maritalStatus":{}}`))
	expect(t, r, 201)
	p := r.json(t)
	for _, k := range []string{"gender", "active", "telecom", "maritalStatus"} {
		if _, ok := p[k]; ok {
			t.Errorf("%s was kept: %s", k, r.body)
		}
	}
	if name := p["name"].([]any)[0].(map[string]any); len(name) != 1 || name["family"] != "Empty" {
		t.Errorf("name not cleaned: %v", name)
	}
	id := p["id"].(string)
	r = do(t, "GET", "fhir/R4/Patient/"+id, tok, "", nil)
	expect(t, r, 200)
	if strings.Contains(string(r.body), `""`) {
		t.Errorf("stored with an empty value: %s", r.body)
	}
	// A patch that empties a value removes it.
	r = do(t, "PATCH", "fhir/R4/Patient/"+id, tok, "application/json-patch+json", []byte(`[{"op":"add","path":"/gender","value":""}]`))
	expect(t, r, 200)
	if _, ok := r.json(t)["gender"]; ok {
		t.Errorf("patched empty gender kept: %s", r.body)
	}
	for body, text := range map[string]string{
		`{"resourceType":"Patient","name":[{"given":[""]}]}`: "Invalid empty value",
		`{"resourceType":"Patient","name":[{"family":" "}]}`: "String must contain non-whitespace content",
		`{"resourceType":"Patient","identifier":[{}]}`:       "Invalid empty value",
	} {
		r := do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", []byte(body))
		expect(t, r, 400)
		if got := r.outcomeText(t); got != text {
			t.Errorf("%s: %q, want %q", body, got, text)
		}
	}
}
