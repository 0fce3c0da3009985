package fhirsvc

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// entries reads a JSON array of Bundle entries.
func entries(t *testing.T, doc string) []batchEntry {
	t.Helper()
	var out []batchEntry
	if err := json.Unmarshal([]byte(doc), &out); err != nil {
		t.Fatalf("entries: %v", err)
	}
	return out
}

// bundleOf is a Bundle of type typ with n GET entries.
func bundleOf(typ string, n int) string {
	e := make([]string, n)
	for i := range e {
		e[i] = fmt.Sprintf(`{"request":{"method":"GET","url":"Patient/p%d"}}`, i)
	}
	return `{"resourceType":"Bundle","type":"` + typ + `","entry":[` + strings.Join(e, ",") + `]}`
}

func TestParseBundle(t *testing.T) {
	cases := []struct {
		name, ct, body string
		// entries and tx are the bundle read; or status, text and expr the refusal.
		entries    int
		tx         bool
		status     int
		text, expr string
	}{
		{name: "batch", ct: "application/fhir+json", body: bundleOf("batch", 2), entries: 2},
		{name: "transaction", ct: "application/json", body: bundleOf("transaction", 1), entries: 1, tx: true},
		{name: "no entries", ct: "application/json", body: `{"resourceType":"Bundle","type":"batch"}`},
		{name: "null entries", ct: "application/json", body: `{"resourceType":"Bundle","type":"batch","entry":null}`},
		{name: "at the entry bound", ct: "application/json", body: bundleOf("batch", maxBatchEntries), entries: maxBatchEntries},
		{name: "an entry's resource of any JSON type", ct: "application/json", body: `{"resourceType":"Bundle","type":"batch","entry":[{"resource":5,"request":{"method":"GET","url":"Patient"}}]}`, entries: 1},
		{name: "unknown fields ignored", ct: "application/json", body: `{"resourceType":"Bundle","type":"batch","id":"b","meta":{},"entry":[{"search":{}}]}`, entries: 1},

		{name: "not json", ct: "text/plain", body: bundleOf("batch", 1), status: 415, text: "Unsupported media type"},
		{name: "no content type", ct: "", body: bundleOf("batch", 1), status: 415, text: "Unsupported media type"},
		{name: "form", ct: "application/x-www-form-urlencoded", body: bundleOf("batch", 1), status: 415, text: "Unsupported media type"},
		{name: "malformed", ct: "application/json", body: `{"resourceType":"Bundle",`, status: 400, text: "Content could not be parsed"},
		{name: "trailing text", ct: "application/json", body: bundleOf("batch", 1) + "x", status: 400, text: "Content could not be parsed"},
		{name: "an array", ct: "application/json", body: `[` + bundleOf("batch", 1) + `]`, status: 400, text: "Content could not be parsed"},
		{name: "nested too deeply", ct: "application/json", body: `{"resourceType":"Bundle","type":"batch","entry":[{"resource":` + strings.Repeat(`{"a":`, 70) + `1` + strings.Repeat(`}`, 70) + `}]}`, status: 400, text: "Content could not be parsed: nested too deeply"},

		{name: "another resource", ct: "application/json", body: `{"resourceType":"Patient","type":"batch"}`, status: 400, text: "Not a bundle", expr: "resourceType"},
		{name: "no resource type", ct: "application/json", body: `{"type":"batch","entry":[]}`, status: 400, text: "Not a bundle", expr: "resourceType"},
		{name: "entry not an array", ct: "application/json", body: `{"resourceType":"Bundle","type":"batch","entry":{}}`, status: 400, text: "Not a bundle", expr: "resourceType"},
		{name: "request not an object", ct: "application/json", body: `{"resourceType":"Bundle","type":"batch","entry":[{"request":"GET Patient"}]}`, status: 400, text: "Not a bundle", expr: "resourceType"},
		{name: "method not a string", ct: "application/json", body: `{"resourceType":"Bundle","type":"batch","entry":[{"request":{"method":1,"url":"Patient"}}]}`, status: 400, text: "Not a bundle", expr: "resourceType"},
		{name: "fullUrl not a string", ct: "application/json", body: `{"resourceType":"Bundle","type":"batch","entry":[{"fullUrl":1}]}`, status: 400, text: "Not a bundle", expr: "resourceType"},
		{name: "type not a string", ct: "application/json", body: `{"resourceType":"Bundle","type":["batch"]}`, status: 400, text: "Not a bundle", expr: "resourceType"},

		{name: "searchset", ct: "application/json", body: bundleOf("searchset", 1), status: 400, text: "Bundle type must be batch or transaction", expr: "type"},
		{name: "no type", ct: "application/json", body: `{"resourceType":"Bundle","entry":[]}`, status: 400, text: "Bundle type must be batch or transaction", expr: "type"},
		{name: "type in capitals", ct: "application/json", body: bundleOf("Batch", 1), status: 400, text: "Bundle type must be batch or transaction", expr: "type"},
		{name: "a response bundle", ct: "application/json", body: bundleOf("transaction-response", 1), status: 400, text: "Bundle type must be batch or transaction", expr: "type"},

		{name: "over the entry bound", ct: "application/json", body: bundleOf("batch", maxBatchEntries+1), status: 413, text: "A bundle may hold at most 1000 entries"},
		{name: "the bound after the type", ct: "application/json", body: bundleOf("collection", maxBatchEntries+1), status: 400, text: "Bundle type must be batch or transaction", expr: "type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := parseBundle(request("POST", tc.ct, tc.body))
			if tc.status != 0 {
				wantError(t, err, tc.status, tc.text, tc.expr)
				return
			}
			wantNoError(t, err)
			if len(b.Entry) != tc.entries || b.tx() != tc.tx {
				t.Fatalf("%d entries, tx %v; want %d, %v", len(b.Entry), b.tx(), tc.entries, tc.tx)
			}
		})
	}
}

func TestEntryOrder(t *testing.T) {
	list := entries(t, `[
		{"request":{"method":"GET","url":"Patient/a"}},
		{"request":{"method":"POST","url":"Patient"}},
		{"request":{"method":"PUT","url":"Patient/b"}},
		{"request":{"method":"post","url":"Observation"}},
		{"request":{"method":"DELETE","url":"Patient/c"}},
		{"resource":{"resourceType":"Patient"}},
		{"request":{"method":"POST","url":"Patient/_search"}},
		{"request":{"method":"PATCH","url":"Patient/d"}}]`)
	if got, want := entryOrder(list, false), []int{0, 1, 2, 3, 4, 5, 6, 7}; !slices.Equal(got, want) {
		t.Errorf("batch order %v, want %v", got, want)
	}
	// A transaction's creates first, in any case of method, then the rest;
	// each in bundle order.
	if got, want := entryOrder(list, true), []int{1, 3, 6, 0, 2, 4, 5, 7}; !slices.Equal(got, want) {
		t.Errorf("transaction order %v, want %v", got, want)
	}
	if got := entryOrder(nil, true); len(got) != 0 {
		t.Errorf("order of nothing: %v", got)
	}
}

func TestRewriteRefs(t *testing.T) {
	refs := map[string]string{"urn:uuid:aa": "Patient/1", "urn:uuid:bb": "Organization/2"}
	cases := []struct {
		name, in, want string
		refs           map[string]string
	}{
		{"one reference", `{"subject":{"reference":"urn:uuid:aa"}}`, `{"subject":{"reference":"Patient/1"}}`, refs},
		{"every occurrence of each", `{"a":{"reference":"urn:uuid:aa"},"b":[{"reference":"urn:uuid:bb"},{"reference":"urn:uuid:aa"}]}`, `{"a":{"reference":"Patient/1"},"b":[{"reference":"Organization/2"},{"reference":"Patient/1"}]}`, refs},
		{"only whole strings", `{"note":"see urn:uuid:aa","x":"urn:uuid:aab","y":"urn:uuid:aa/x"}`, `{"note":"see urn:uuid:aa","x":"urn:uuid:aab","y":"urn:uuid:aa/x"}`, refs},
		{"an unknown urn stays", `{"subject":{"reference":"urn:uuid:cc"}}`, `{"subject":{"reference":"urn:uuid:cc"}}`, refs},
		{"no references known", `{"subject":{"reference":"urn:uuid:aa"}}`, `{"subject":{"reference":"urn:uuid:aa"}}`, nil},
		{"no resource", ``, ``, refs},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(rewriteRefs(json.RawMessage(tc.in), tc.refs)); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// invalid is a 400 with n validation issues.
func invalid(n int) *fhir.Error {
	issues := make([]fhir.Issue, n)
	for i := range issues {
		issues[i] = fhir.FieldIssue(fmt.Sprintf("Patient.name[%d]", i), "Invalid value")
	}
	return fhir.Invalid(issues...)
}

func TestFailedEntry(t *testing.T) {
	small := fhir.NotFound()
	large := invalid(40)
	over := len(large.JSON()) - entryReserve // what the large outcome takes beyond its reserve
	if len(small.JSON()) > entryReserve || over <= 0 {
		t.Fatalf("fixtures: %d and %d bytes", len(small.JSON()), len(large.JSON()))
	}
	short := fhir.BadRequest("Entry failed; its outcome is too large to include in the batch's answer").JSON()
	cases := []struct {
		name     string
		fe       *fhir.Error
		room     int
		status   string
		outcome  []byte
		wantRoom int
	}{
		{"short outcome, plenty of room", small, 1000, "404 Not Found", small.JSON(), 1000},
		{"short outcome, no room", small, 0, "404 Not Found", small.JSON(), 0},
		{"short outcome, room overdrawn", small, -5, "404 Not Found", small.JSON(), -5},
		{"long outcome that fits", large, over + 10, "400 Bad Request", large.JSON(), 10},
		{"long outcome that just fits", large, over, "400 Bad Request", large.JSON(), 0},
		{"long outcome a byte short", large, over - 1, "400 Bad Request", short, over - 1},
		{"long outcome keeps its status", &fhir.Error{Status: 422, Outcome: large.Outcome}, 0, "422 Unprocessable Entity", short, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			re, room := failedEntry(tc.fe, tc.room)
			if re.Response.Status != tc.status || string(re.Response.Outcome) != string(tc.outcome) || room != tc.wantRoom {
				t.Fatalf("%q %s, room %d; want %q %s, room %d", re.Response.Status, re.Response.Outcome, room, tc.status, tc.outcome, tc.wantRoom)
			}
			if re.Resource != nil || re.Response.Location != "" || re.Response.Etag != "" {
				t.Fatalf("a failure answered with more: %+v", re)
			}
		})
	}
}

func TestAnsweredEntry(t *testing.T) {
	body := []byte(`{"resourceType":"Patient","id":"p1"}`)
	n := len(body)
	created := &bus.Response{Status: 201, Body: body, Header: map[string]string{
		"Location": base + "fhir/R4/Patient/p1/_history/1", "ETag": `W/"1"`, "Last-Modified": "Mon, 06 May 2024 05:08:09 GMT", "Content-Type": bus.FHIRContentType,
	}}
	read := &bus.Response{Status: 200, Body: body, Header: map[string]string{"ETag": `W/"1"`}}
	empty := &bus.Response{Status: 202, Header: map[string]string{}}
	tooLarge := tooLargeEntry()
	cases := []struct {
		name     string
		resp     *bus.Response
		read     bool
		room     int
		want     responseEntry
		wantRoom int
	}{
		{"a write that fits", created, false, n + 1, responseEntry{Resource: body, Response: entryResponse{
			Status: "201 Created", Location: base + "fhir/R4/Patient/p1/_history/1", Etag: `W/"1"`, LastModified: "Mon, 06 May 2024 05:08:09 GMT"}}, 1},
		{"a write that just fits", created, false, n, responseEntry{Resource: body, Response: entryResponse{
			Status: "201 Created", Location: base + "fhir/R4/Patient/p1/_history/1", Etag: `W/"1"`, LastModified: "Mon, 06 May 2024 05:08:09 GMT"}}, 0},
		{"a write too large is answered without it", created, false, n - 1, responseEntry{Response: entryResponse{
			Status: "201 Created", Location: base + "fhir/R4/Patient/p1/_history/1", Etag: `W/"1"`, LastModified: "Mon, 06 May 2024 05:08:09 GMT"}}, n - 1},
		{"a read that fits", read, true, n, responseEntry{Resource: body, Response: entryResponse{Status: "200 OK", Etag: `W/"1"`}}, 0},
		{"a read too large is 413", read, true, n - 1, tooLarge, n - 1},
		{"a read with no room", read, true, 0, tooLarge, 0},
		{"nothing to include", empty, false, 0, responseEntry{Response: entryResponse{Status: "202 Accepted"}}, 0},
		{"nothing to include, read", empty, true, 0, responseEntry{Response: entryResponse{Status: "202 Accepted"}}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			re, room := answeredEntry(tc.resp, tc.read, tc.room)
			got, _ := json.Marshal(re)
			want, _ := json.Marshal(tc.want)
			if string(got) != string(want) || room != tc.wantRoom {
				t.Fatalf("%s, room %d\nwant %s, room %d", got, room, want, tc.wantRoom)
			}
		})
	}
	sameJSON(t, tooLarge, `{"response":{"status":"413 Request Entity Too Large","outcome":{"resourceType":"OperationOutcome","id":"content-too-large","issue":[{"severity":"error","code":"too-long","details":{"text":"Entry not answered: the batch's answer would be too large; read it on its own"}}]}}}`)
}

func TestCreatedRef(t *testing.T) {
	cases := []struct {
		name string
		resp *bus.Response
		want string
	}{
		{"created", &bus.Response{Status: 201, Body: []byte(`{"resourceType":"Patient","id":"p1","gender":"male"}`)}, "Patient/p1"},
		{"found by a conditional create", &bus.Response{Status: 200, Body: []byte(`{"resourceType":"Patient","id":"p1"}`)}, ""},
		{"created without an id", &bus.Response{Status: 201, Body: []byte(`{"resourceType":"Patient"}`)}, ""},
		{"created, body not JSON", &bus.Response{Status: 201, Body: []byte(`created`)}, ""},
		{"created, id not a string", &bus.Response{Status: 201, Body: []byte(`{"resourceType":"Patient","id":7}`)}, ""},
		{"created, no body", &bus.Response{Status: 201}, ""},
	}
	for _, tc := range cases {
		if got := createdRef(tc.resp); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// call is one entry a bundleRun ran.
type call struct {
	url, assigned, resource string
}

// fakeRunner runs entries by answer, recording each call.
type fakeRunner struct {
	calls  []call
	answer func(e batchEntry, assigned string) (*bus.Response, error)
}

func (f *fakeRunner) run(_ context.Context, e batchEntry, assigned string) (*bus.Response, error) {
	f.calls = append(f.calls, call{e.Request.URL, assigned, string(e.Resource)})
	return f.answer(e, assigned)
}

// createdAs answers a create of the entry's type with id.
func createdAs(e batchEntry, id string) *bus.Response {
	typ := entryType("", e)
	return &bus.Response{Status: 201, Body: []byte(`{"resourceType":"` + typ + `","id":"` + id + `"}`),
		Header: map[string]string{"Location": base + "fhir/R4/" + typ + "/" + id + "/_history/1", "ETag": `W/"1"`}}
}

// statuses are the status lines of a run's answers, in bundle order.
func statuses(b *bundleRun) []string {
	out := make([]string, len(b.out))
	for i, e := range b.out {
		out[i] = e.Response.Status
	}
	return out
}

func TestBundleRunBatch(t *testing.T) {
	list := entries(t, `[
		{"request":{"method":"GET","url":"Patient/p1"}},
		{"request":{"method":"GET","url":"Patient/missing"}},
		{"fullUrl":"urn:uuid:aa","resource":{"resourceType":"Patient"},"request":{"method":"POST","url":"Patient"}},
		{"resource":{"resourceType":"Observation","subject":{"reference":"urn:uuid:aa"}},"request":{"method":"POST","url":"Observation"}},
		{"request":{"method":"DELETE","url":"Patient/p2"}},
		{"request":{"method":"GET","url":"Patient?name=a"}}]`)
	f := &fakeRunner{answer: func(e batchEntry, assigned string) (*bus.Response, error) {
		switch e.Request.URL {
		case "Patient/p1":
			return &bus.Response{Status: 200, Body: []byte(`{"resourceType":"Patient","id":"p1"}`), Header: map[string]string{"ETag": `W/"3"`}}, nil
		case "Patient/missing":
			return nil, fhir.NotFound()
		case "Patient":
			return createdAs(e, "new1"), nil
		case "Observation":
			return nil, errors.New("store down") // not a *fhir.Error: answered 500, saying nothing
		case "Patient/p2":
			return bus.OK(), nil
		}
		return &bus.Response{Status: 200, Body: []byte(`{"resourceType":"Bundle","type":"searchset"}`)}, nil
	}}
	b := newBundleRun(base, &bundleRequest{Type: "batch", Entry: list}, 1<<20)
	wantNoError(t, b.run(context.Background(), f.run))

	// In bundle order, nothing assigned, no reference rewritten.
	want := []call{
		{"Patient/p1", "", ""},
		{"Patient/missing", "", ""},
		{"Patient", "", `{"resourceType":"Patient"}`},
		{"Observation", "", `{"resourceType":"Observation","subject":{"reference":"urn:uuid:aa"}}`},
		{"Patient/p2", "", ""},
		{"Patient?name=a", "", ""},
	}
	if !slices.Equal(f.calls, want) {
		t.Fatalf("calls %v\nwant  %v", f.calls, want)
	}
	if got, want := statuses(b), []string{"200 OK", "404 Not Found", "201 Created", "500 Internal Server Error", "200 OK", "200 OK"}; !slices.Equal(got, want) {
		t.Fatalf("statuses %q, want %q", got, want)
	}
	if !slices.Equal(b.created, []string{"Patient/new1"}) {
		t.Fatalf("created %v", b.created)
	}
	resp, err := b.response()
	wantNoError(t, err)
	if resp.Status != 200 || resp.Header["Content-Type"] != bus.FHIRContentType {
		t.Fatalf("answer %d %v", resp.Status, resp.Header)
	}
	if _, _, ok := resp.Session(); ok {
		t.Fatal("an answer that waits for no session write says it does")
	}
	sameJSON(t, resp.Body, `{"resourceType":"Bundle","type":"batch-response","entry":[
		{"resource":{"resourceType":"Patient","id":"p1"},"response":{"status":"200 OK","etag":"W/\"3\""}},
		{"response":{"status":"404 Not Found","outcome":{"resourceType":"OperationOutcome","id":"not-found","issue":[{"severity":"error","code":"not-found","details":{"text":"Not found"}}]}}},
		{"resource":{"resourceType":"Patient","id":"new1"},"response":{"status":"201 Created","location":"`+base+`fhir/R4/Patient/new1/_history/1","etag":"W/\"1\""}},
		{"response":{"status":"500 Internal Server Error","outcome":{"resourceType":"OperationOutcome","issue":[{"severity":"error","code":"exception","details":{"text":"Internal server error"}}]}}},
		{"resource":{"resourceType":"OperationOutcome","id":"ok","issue":[{"severity":"information","code":"informational","details":{"text":"All OK"}}]},"response":{"status":"200 OK"}},
		{"resource":{"resourceType":"Bundle","type":"searchset"},"response":{"status":"200 OK"}}]}`)
}

func TestBundleRunTransaction(t *testing.T) {
	list := entries(t, `[
		{"resource":{"resourceType":"Observation","id":"o1","subject":{"reference":"urn:uuid:pp"},"performer":[{"reference":"urn:uuid:oo"}]},"request":{"method":"PUT","url":"Observation/o1"}},
		{"fullUrl":"urn:uuid:pp","resource":{"resourceType":"Patient","managingOrganization":{"reference":"urn:uuid:oo"}},"request":{"method":"POST","url":"Patient"}},
		{"fullUrl":"urn:uuid:oo","resource":{"resourceType":"Organization"},"request":{"method":"POST","url":"Organization"}},
		{"fullUrl":"Practitioner/x","resource":{"resourceType":"Practitioner"},"request":{"method":"POST","url":"Practitioner"}},
		{"request":{"method":"GET","url":"Patient?name=urn:uuid:pp"}}]`)
	f := &fakeRunner{answer: func(e batchEntry, assigned string) (*bus.Response, error) {
		if e.isMethod("POST") {
			return createdAs(e, assigned), nil
		}
		return &bus.Response{Status: 200, Body: e.Resource}, nil
	}}
	b := newBundleRun(base, &bundleRequest{Type: "transaction", Entry: list}, 1<<20)
	wantNoError(t, b.run(context.Background(), f.run))
	if len(f.calls) != 5 {
		t.Fatalf("calls %v", f.calls)
	}
	pat, org, prac := f.calls[0].assigned, f.calls[1].assigned, f.calls[2].assigned
	for _, id := range []string{pat, org, prac} {
		if uuid.Validate(id) != nil {
			t.Fatalf("a create was assigned %q", id)
		}
	}
	if pat == org || org == prac {
		t.Fatal("two creates were assigned one id")
	}
	// Creates first; a reference to a create that ran before is rewritten
	// (the Patient's to the Organization was not yet known: creates run in
	// bundle order); the reads and updates after see every create's.
	want := []call{
		{"Patient", pat, `{"resourceType":"Patient","managingOrganization":{"reference":"urn:uuid:oo"}}`},
		{"Organization", org, `{"resourceType":"Organization"}`},
		{"Practitioner", prac, `{"resourceType":"Practitioner"}`},
		{"Observation/o1", "", `{"resourceType":"Observation","id":"o1","subject":{"reference":"Patient/` + pat + `"},"performer":[{"reference":"Organization/` + org + `"}]}`},
		{"Patient?name=urn:uuid:pp", "", ""},
	}
	if !slices.Equal(f.calls, want) {
		t.Fatalf("calls %v\nwant  %v", f.calls, want)
	}
	if got, want := b.refs, map[string]string{"urn:uuid:pp": "Patient/" + pat, "urn:uuid:oo": "Organization/" + org}; !equalMaps(got, want) {
		t.Fatalf("refs %v, want %v", got, want)
	}
	if got, want := b.created, []string{"Patient/" + pat, "Organization/" + org, "Practitioner/" + prac}; !slices.Equal(got, want) {
		t.Fatalf("created %v, want %v", got, want)
	}
	// Answers stay in bundle order.
	if got, want := statuses(b), []string{"200 OK", "201 Created", "201 Created", "201 Created", "200 OK"}; !slices.Equal(got, want) {
		t.Fatalf("statuses %q, want %q", got, want)
	}
	resp, err := b.response()
	wantNoError(t, err)
	if m := decoded(t, resp.Body); m["type"] != "transaction-response" || len(m["entry"].([]any)) != 5 {
		t.Fatalf("answer %s", resp.Body)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestBundleRunTransactionFailure(t *testing.T) {
	cases := []struct {
		name    string
		entries string
		fail    string // the URL whose entry fails
		err     error
		// status, text and expr are what the transaction answers; created
		// the types of what it must undo.
		status     int
		text, expr string
		created    []string
	}{
		{
			name: "a failed create is undone too",
			entries: `[{"request":{"method":"POST","url":"Patient"}},{"request":{"method":"POST","url":"Observation"}},
				{"request":{"method":"PUT","url":"Patient/p1"}}]`,
			fail: "Observation", err: fhir.BadRequest("Invalid value", "Observation.status"),
			status: 400, text: "Invalid value", expr: "Observation.status", created: []string{"Patient", "Observation"},
		},
		{
			name:    "a failed update",
			entries: `[{"request":{"method":"PUT","url":"Patient/p1"}},{"request":{"method":"POST","url":"Patient"}},{"request":{"method":"GET","url":"Patient/p2"}}]`,
			fail:    "Patient/p1", err: fhir.PreconditionFailed(),
			status: 412, text: "Precondition Failed", created: []string{"Patient"},
		},
		{
			name:    "a failure that is not a FHIR error says nothing",
			entries: `[{"request":{"method":"POST","url":"Patient"}}]`,
			fail:    "Patient", err: errors.New("disk full at /var/lib/pinion"),
			status: 500, text: "Internal server error", created: []string{"Patient"},
		},
		{
			name:    "a failed create by a full URL",
			entries: `[{"request":{"method":"POST","url":"` + base + `fhir/R4/Patient?x=1"}}]`,
			fail:    base + "fhir/R4/Patient?x=1", err: fhir.NotFound(),
			status: 404, text: "Not found", created: []string{"Patient"},
		},
		{
			name:    "a failed POST search undoes no type of its own",
			entries: `[{"request":{"method":"POST","url":"Patient/_search"}}]`,
			fail:    "Patient/_search", err: fhir.UnsupportedMediaType(),
			status: 415, text: "Unsupported media type", created: []string{"Patient"},
		},
		{
			name:    "a failed read",
			entries: `[{"request":{"method":"GET","url":"Patient/p1"}}]`,
			fail:    "Patient/p1", err: fhir.Gone(),
			status: 410, text: "Gone",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRunner{answer: func(e batchEntry, assigned string) (*bus.Response, error) {
				if e.Request.URL == tc.fail {
					return nil, tc.err
				}
				if e.isMethod("POST") {
					return createdAs(e, assigned), nil
				}
				return &bus.Response{Status: 200}, nil
			}}
			b := newBundleRun(base, &bundleRequest{Type: "transaction", Entry: entries(t, tc.entries)}, 1<<20)
			wantError(t, b.run(context.Background(), f.run), tc.status, tc.text, tc.expr)
			if f.calls[len(f.calls)-1].url != tc.fail {
				t.Fatalf("ran on after the failure: %v", f.calls)
			}
			if len(b.created) != len(tc.created) {
				t.Fatalf("created %v, want one of each of %v", b.created, tc.created)
			}
			for i, ref := range b.created {
				typ, id, _ := strings.Cut(ref, "/")
				if typ != tc.created[i] || uuid.Validate(id) != nil {
					t.Fatalf("created %v, want one of each of %v", b.created, tc.created)
				}
			}
		})
	}
}

func TestBundleRunRoom(t *testing.T) {
	body := []byte(`{"resourceType":"Patient","id":"p1","note":"` + strings.Repeat("x", 64) + `"}`)
	n := len(body)
	list := entries(t, `[
		{"request":{"method":"GET","url":"Patient/a"}},
		{"request":{"method":"GET","url":"Patient/b"}},
		{"request":{"method":"POST","url":"Patient"}},
		{"request":{"method":"PUT","url":"Patient/c"}},
		{"request":{"method":"GET","url":"Patient/d"}}]`)
	answer := func(e batchEntry, assigned string) (*bus.Response, error) {
		if e.isMethod("POST") {
			return &bus.Response{Status: 201, Body: body}, nil
		}
		if e.Request.URL == "Patient/c" {
			return nil, invalid(40)
		}
		return &bus.Response{Status: 200, Body: body}, nil
	}
	reserve := len(list) * entryReserve
	long := len(invalid(40).JSON()) - entryReserve
	cases := []struct {
		name   string
		budget int
		ran    []string
		want   []string // status lines; "+" marks an answer with its resource
	}{
		{"room for all", reserve + 4*n + long, []string{"Patient/a", "Patient/b", "Patient", "Patient/c", "Patient/d"},
			[]string{"200 OK+", "200 OK+", "201 Created+", "400 Bad Request", "200 OK+"}},
		// After the first read, room for less than a resource: the next
		// read is 413, the write runs without its resource, the failure's
		// outcome is cut short, and the last read still runs: room is left.
		{"room for one", reserve + n + n/2, []string{"Patient/a", "Patient/b", "Patient", "Patient/c", "Patient/d"},
			[]string{"200 OK+", "413 Request Entity Too Large", "201 Created", "400 Bad Request", "413 Request Entity Too Large"}},
		// Once no room is left, reads are not even run.
		{"room for one exactly", reserve + n, []string{"Patient/a", "Patient", "Patient/c"},
			[]string{"200 OK+", "413 Request Entity Too Large", "201 Created", "400 Bad Request", "413 Request Entity Too Large"}},
		{"no room", reserve, []string{"Patient", "Patient/c"},
			[]string{"413 Request Entity Too Large", "413 Request Entity Too Large", "201 Created", "400 Bad Request", "413 Request Entity Too Large"}},
		{"a budget smaller than the reserve", reserve - 1000, []string{"Patient", "Patient/c"},
			[]string{"413 Request Entity Too Large", "413 Request Entity Too Large", "201 Created", "400 Bad Request", "413 Request Entity Too Large"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRunner{answer: answer}
			b := newBundleRun(base, &bundleRequest{Type: "batch", Entry: list}, tc.budget)
			wantNoError(t, b.run(context.Background(), f.run))
			var ran []string
			for _, c := range f.calls {
				ran = append(ran, c.url)
			}
			if !slices.Equal(ran, tc.ran) {
				t.Fatalf("ran %v, want %v", ran, tc.ran)
			}
			got := statuses(b)
			for i, e := range b.out {
				if e.Resource != nil {
					got[i] += "+"
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("answers %q\nwant    %q", got, tc.want)
			}
		})
	}
	// The failure's long outcome is kept while it fits, and cut short after.
	b := newBundleRun(base, &bundleRequest{Type: "batch", Entry: list[3:4]}, entryReserve+long)
	wantNoError(t, b.run(context.Background(), (&fakeRunner{answer: answer}).run))
	if string(b.out[0].Response.Outcome) != string(invalid(40).JSON()) || b.room != 0 {
		t.Fatalf("long outcome not kept: room %d, %.80s", b.room, b.out[0].Response.Outcome)
	}
	b = newBundleRun(base, &bundleRequest{Type: "batch", Entry: list[3:4]}, entryReserve+long-1)
	wantNoError(t, b.run(context.Background(), (&fakeRunner{answer: answer}).run))
	wantText(t, b.out[0].Response.Outcome, "Entry failed; its outcome is too large to include in the batch's answer")
}

// wantText fails unless an outcome's first issue has the details text.
func wantText(t *testing.T, outcome []byte, text string) {
	t.Helper()
	var o fhir.OperationOutcome
	if err := json.Unmarshal(outcome, &o); err != nil || len(o.Issue) == 0 || o.Issue[0].Details == nil || o.Issue[0].Details.Text != text {
		t.Fatalf("outcome %s, want %q", outcome, text)
	}
}

func TestBundleRunSessions(t *testing.T) {
	list := entries(t, `[
		{"request":{"method":"PUT","url":"ProjectMembership/m1"}},
		{"request":{"method":"PUT","url":"ProjectMembership/m2"}},
		{"request":{"method":"DELETE","url":"ProjectMembership/m3"}},
		{"request":{"method":"GET","url":"ProjectMembership/m4"}}]`)
	revs := map[string]uint64{"ProjectMembership/m1": 7, "ProjectMembership/m2": 12, "ProjectMembership/m3": 9}
	f := &fakeRunner{answer: func(e batchEntry, assigned string) (*bus.Response, error) {
		resp := &bus.Response{Status: 200, Header: map[string]string{}}
		if rev := revs[e.Request.URL]; rev > 0 {
			resp.WithSession("memberships", rev)
		}
		return resp, nil
	}}
	b := newBundleRun(base, &bundleRequest{Type: "batch", Entry: list}, 1<<20)
	wantNoError(t, b.run(context.Background(), f.run))
	resp, err := b.response()
	wantNoError(t, err)
	// The answer waits for the newest revision any entry wrote.
	if bucket, rev, ok := resp.Session(); !ok || bucket != "memberships" || rev != 12 {
		t.Fatalf("session %q %d %v, want memberships 12", bucket, rev, ok)
	}
	if strings.Contains(string(resp.Body), bus.SessionHeader) {
		t.Fatal("an entry's session header leaked into the answer")
	}
}

// stubService is a Service whose handlers record the request they get and
// answer with their route.
func stubService(got **bus.Request, gotRoute *string) *Service {
	s := &Service{cfg: Config{BaseURL: base}}
	s.handlers = map[string]bus.Handler{}
	for _, e := range s.routes() {
		route := e.Route
		s.handlers[route] = func(_ context.Context, r *bus.Request) (*bus.Response, error) {
			*got, *gotRoute = r, route
			if r.Param("id") == "fails" {
				return nil, fhir.Conflict("stub refused")
			}
			return &bus.Response{Status: 200, Body: []byte(route)}, nil
		}
	}
	return s
}

func TestRunEntry(t *testing.T) {
	ops := `[{"op":"replace","path":"/gender","value":"male"}]`
	b64 := base64.StdEncoding.EncodeToString([]byte(ops))
	principal := &bus.Principal{Project: "p1", Profile: "Practitioner/x"}
	cases := []struct {
		name, entry, assigned string
		// route, path, params, query, header and body are the request the
		// entry's handler gets; or status, text and expr the refusal.
		route, path, query, body string
		params, header           map[string]string
		status                   int
		text, expr               string
	}{
		{name: "read", entry: `{"request":{"method":"GET","url":"Patient/p1"}}`,
			route: "GET /fhir/R4/:type/:id", path: "/fhir/R4/Patient/p1", params: map[string]string{"type": "Patient", "id": "p1"}},
		{name: "method in any case", entry: `{"request":{"method":"get","url":"Patient/p1"}}`,
			route: "GET /fhir/R4/:type/:id", path: "/fhir/R4/Patient/p1", params: map[string]string{"type": "Patient", "id": "p1"}},
		{name: "leading slash", entry: `{"request":{"method":"GET","url":"/Patient/p1"}}`,
			route: "GET /fhir/R4/:type/:id", path: "/fhir/R4/Patient/p1", params: map[string]string{"type": "Patient", "id": "p1"}},
		{name: "full URL", entry: `{"request":{"method":"GET","url":"` + base + `fhir/R4/Patient/p1"}}`,
			route: "GET /fhir/R4/:type/:id", path: "/fhir/R4/Patient/p1", params: map[string]string{"type": "Patient", "id": "p1"}},
		{name: "vread", entry: `{"request":{"method":"GET","url":"Patient/p1/_history/2"}}`,
			route: "GET /fhir/R4/:type/:id/_history/:vid", path: "/fhir/R4/Patient/p1/_history/2", params: map[string]string{"type": "Patient", "id": "p1", "vid": "2"}},
		{name: "history", entry: `{"request":{"method":"GET","url":"Patient/p1/_history"}}`,
			route: "GET /fhir/R4/:type/:id/_history", path: "/fhir/R4/Patient/p1/_history", params: map[string]string{"type": "Patient", "id": "p1"}},
		{name: "search", entry: `{"request":{"method":"GET","url":"Patient?name=a&_count=2"}}`,
			route: "GET /fhir/R4/:type", path: "/fhir/R4/Patient", query: "name=a&_count=2", params: map[string]string{"type": "Patient"}},
		{name: "search after a slash", entry: `{"request":{"method":"GET","url":"Patient/?name=a"}}`,
			route: "GET /fhir/R4/:type", path: "/fhir/R4/Patient/", query: "name=a", params: map[string]string{"type": "Patient"}},
		{name: "metadata", entry: `{"request":{"method":"GET","url":"metadata"}}`,
			route: "GET /fhir/R4/metadata", path: "/fhir/R4/metadata", params: map[string]string{}},
		{name: "create", entry: `{"resource":{"resourceType":"Patient"},"request":{"method":"POST","url":"Patient"}}`,
			route: "POST /fhir/R4/:type", path: "/fhir/R4/Patient", params: map[string]string{"type": "Patient"}, body: `{"resourceType":"Patient"}`},
		{name: "create named in advance", entry: `{"resource":{"resourceType":"Patient"},"request":{"method":"POST","url":"Patient"}}`, assigned: "id-1",
			route: "POST /fhir/R4/:type", path: "/fhir/R4/Patient", params: map[string]string{"type": "Patient", "id": "id-1"}, body: `{"resourceType":"Patient"}`},
		{name: "conditional create", entry: `{"resource":{"resourceType":"Patient"},"request":{"method":"POST","url":"Patient","ifNoneExist":"identifier=x|1"}}`,
			route: "POST /fhir/R4/:type", path: "/fhir/R4/Patient", params: map[string]string{"type": "Patient"}, body: `{"resourceType":"Patient"}`,
			header: map[string]string{"If-None-Exist": "identifier=x|1"}},
		{name: "a POST search is not named", entry: `{"request":{"method":"POST","url":"Patient/_search"}}`, assigned: "id-1",
			route: "POST /fhir/R4/:type/_search", path: "/fhir/R4/Patient/_search", params: map[string]string{"type": "Patient"}},
		{name: "validate", entry: `{"resource":{"resourceType":"Patient"},"request":{"method":"POST","url":"Patient/$validate"}}`,
			route: "POST /fhir/R4/:type/$validate", path: "/fhir/R4/Patient/$validate", params: map[string]string{"type": "Patient"}, body: `{"resourceType":"Patient"}`},
		{name: "update", entry: `{"resource":{"resourceType":"Patient","id":"p1"},"request":{"method":"PUT","url":"Patient/p1","ifMatch":"W/\"3\""}}`,
			route: "PUT /fhir/R4/:type/:id", path: "/fhir/R4/Patient/p1", params: map[string]string{"type": "Patient", "id": "p1"}, body: `{"resourceType":"Patient","id":"p1"}`,
			header: map[string]string{"If-Match": `W/"3"`}},
		{name: "conditional update", entry: `{"resource":{"resourceType":"Patient"},"request":{"method":"PUT","url":"Patient?identifier=x"}}`,
			route: "PUT /fhir/R4/:type", path: "/fhir/R4/Patient", query: "identifier=x", params: map[string]string{"type": "Patient"}, body: `{"resourceType":"Patient"}`},
		{name: "delete", entry: `{"request":{"method":"DELETE","url":"Patient/p1"}}`,
			route: "DELETE /fhir/R4/:type/:id", path: "/fhir/R4/Patient/p1", params: map[string]string{"type": "Patient", "id": "p1"}},
		{name: "job status", entry: `{"request":{"method":"GET","url":"job/j1/status"}}`,
			route: "GET /fhir/R4/job/:id/status", path: "/fhir/R4/job/j1/status", params: map[string]string{"id": "j1"}},
		{name: "export", entry: `{"request":{"method":"GET","url":"$export"}}`,
			route: "GET /fhir/R4/$export", path: "/fhir/R4/$export", params: map[string]string{}},

		// A patch travels as a Binary holding the JSON Patch.
		{name: "patch", entry: `{"resource":{"resourceType":"Binary","contentType":"application/json-patch+json","data":"` + b64 + `"},"request":{"method":"PATCH","url":"Patient/p1","ifMatch":"W/\"2\""}}`,
			route: "PATCH /fhir/R4/:type/:id", path: "/fhir/R4/Patient/p1", params: map[string]string{"type": "Patient", "id": "p1"}, body: ops,
			header: map[string]string{"Content-Type": "application/json-patch+json", "If-Match": `W/"2"`}},
		{name: "patch of a Patient", entry: `{"resource":{"resourceType":"Patient"},"request":{"method":"PATCH","url":"Patient/p1"}}`,
			status: 400, text: "A patch entry needs a Binary resource with the JSON Patch", expr: "entry.resource"},
		{name: "patch without a resource", entry: `{"request":{"method":"PATCH","url":"Patient/p1"}}`,
			status: 400, text: "A patch entry needs a Binary resource with the JSON Patch", expr: "entry.resource"},
		{name: "patch as an array", entry: `{"resource":` + ops + `,"request":{"method":"PATCH","url":"Patient/p1"}}`,
			status: 400, text: "A patch entry needs a Binary resource with the JSON Patch", expr: "entry.resource"},
		{name: "patch data not a string", entry: `{"resource":{"resourceType":"Binary","data":5},"request":{"method":"PATCH","url":"Patient/p1"}}`,
			status: 400, text: "A patch entry needs a Binary resource with the JSON Patch", expr: "entry.resource"},
		{name: "patch data not base64", entry: `{"resource":{"resourceType":"Binary","data":"[{\"op\":\"remove\"}]"},"request":{"method":"PATCH","url":"Patient/p1"}}`,
			status: 400, text: "Invalid Binary data", expr: "entry.resource.data"},

		{name: "no request", entry: `{"resource":{"resourceType":"Patient"}}`, status: 400, text: "Entry has no request", expr: "entry.request"},
		{name: "no url", entry: `{"request":{"method":"GET"}}`, status: 400, text: "Entry has no request", expr: "entry.request"},
		{name: "no method", entry: `{"request":{"url":"Patient/p1"}}`, status: 400, text: "Unsupported entry request:  Patient/p1", expr: "entry.request"},
		{name: "unknown method", entry: `{"request":{"method":"HEAD","url":"Patient/p1"}}`, status: 400, text: "Unsupported entry request: HEAD Patient/p1", expr: "entry.request"},
		{name: "no such route", entry: `{"request":{"method":"GET","url":"Patient/p1/x/y/z"}}`, status: 400, text: "Unsupported entry request: GET Patient/p1/x/y/z", expr: "entry.request"},
		{name: "bad query", entry: `{"request":{"method":"GET","url":"Patient?name=%zz"}}`, status: 400, text: "Unsupported entry request: GET Patient?name=%zz", expr: "entry.request"},
		{name: "a nested batch", entry: `{"resource":{"resourceType":"Bundle"},"request":{"method":"POST","url":"/"}}`, status: 400, text: "Unsupported entry request: POST /", expr: "entry.request"},
		{name: "another service's route", entry: `{"request":{"method":"POST","url":"Bot/b1/$execute"}}`, status: 400, text: "Unsupported entry request: POST Bot/b1/$execute", expr: "entry.request"},
		{name: "the admin API", entry: `{"request":{"method":"GET","url":"` + base + `admin/projects/p1"}}`, status: 400, text: "Unsupported entry request: GET " + base + "admin/projects/p1", expr: "entry.request"},

		{name: "the handler's refusal passes through", entry: `{"request":{"method":"GET","url":"Patient/fails"}}`, status: 409, text: "stub refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got *bus.Request
			var route string
			s := stubService(&got, &route)
			var e batchEntry
			if err := json.Unmarshal([]byte(tc.entry), &e); err != nil {
				t.Fatal(err)
			}
			outer := &bus.Request{Method: "POST", Path: "/fhir/R4", Principal: principal, RequestID: "req-1",
				Header: map[string]string{"Content-Type": "application/fhir+json", "If-Match": `W/"9"`, "Prefer": "respond-async"}}
			resp, err := s.runEntry(context.Background(), outer, e, tc.assigned)
			if tc.status != 0 {
				wantError(t, err, tc.status, tc.text, tc.expr)
				return
			}
			wantNoError(t, err)
			if route != tc.route || string(resp.Body) != tc.route {
				t.Fatalf("ran %q, want %q", route, tc.route)
			}
			header := map[string]string{"Content-Type": "application/fhir+json"}
			for k, v := range tc.header {
				header[k] = v
			}
			if got.Path != tc.path || got.RawQuery != tc.query || got.Query.Encode() != queryOf(t, tc.query) || string(got.Body) != tc.body ||
				!equalMaps(got.Params, tc.params) || !equalMaps(got.Header, header) || got.Method != strings.ToUpper(e.Request.Method) {
				t.Fatalf("request %s %s ? %q %v %v %q\nwant    %s ? %q %v %v %q", got.Method, got.Path, got.RawQuery, got.Params, got.Header, got.Body, tc.path, tc.query, tc.params, header, tc.body)
			}
			// As the caller, in the same request.
			if got.Principal != principal || got.RequestID != "req-1" {
				t.Fatalf("principal %v, request id %q", got.Principal, got.RequestID)
			}
		})
	}
}

// queryOf is a raw query, decoded and encoded again.
func queryOf(t *testing.T, raw string) string {
	t.Helper()
	q, err := url.ParseQuery(raw)
	if err != nil {
		t.Fatal(err)
	}
	return q.Encode()
}

func TestPatchEntryBody(t *testing.T) {
	cases := []struct {
		name, resource, want string
		status               int
		text, expr           string
	}{
		{name: "ops", resource: `{"resourceType":"Binary","data":"` + base64.StdEncoding.EncodeToString([]byte(`[{"op":"remove","path":"/a"}]`)) + `"}`, want: `[{"op":"remove","path":"/a"}]`},
		{name: "no data", resource: `{"resourceType":"Binary"}`, want: ``},
		{name: "no type", resource: `{"data":"W10="}`, status: 400, text: "A patch entry needs a Binary resource with the JSON Patch", expr: "entry.resource"},
		{name: "type not a string", resource: `{"resourceType":1,"data":"W10="}`, status: 400, text: "A patch entry needs a Binary resource with the JSON Patch", expr: "entry.resource"},
		{name: "not JSON", resource: `Binary`, status: 400, text: "A patch entry needs a Binary resource with the JSON Patch", expr: "entry.resource"},
		{name: "nothing", resource: ``, status: 400, text: "A patch entry needs a Binary resource with the JSON Patch", expr: "entry.resource"},
		{name: "padding missing", resource: `{"resourceType":"Binary","data":"W10"}`, status: 400, text: "Invalid Binary data", expr: "entry.resource.data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := patchEntryBody(json.RawMessage(tc.resource))
			if tc.status != 0 {
				wantError(t, err, tc.status, tc.text, tc.expr)
				return
			}
			wantNoError(t, err)
			if string(got) != tc.want {
				t.Fatalf("%q, want %q", got, tc.want)
			}
		})
	}
}

func TestTouchesSessions(t *testing.T) {
	cases := []struct {
		name, entries string
		want          bool
	}{
		{"no entries", `[]`, false},
		{"patients", `[{"request":{"method":"POST","url":"Patient"}},{"request":{"method":"PUT","url":"Patient/p"}}]`, false},
		{"reading memberships", `[{"request":{"method":"GET","url":"ProjectMembership/m"}},{"request":{"method":"get","url":"AccessPolicy?name=x"}}]`, false},
		{"no request", `[{"resource":{"resourceType":"ProjectMembership"}}]`, false},
		{"creating a membership", `[{"request":{"method":"GET","url":"Patient/p"}},{"request":{"method":"POST","url":"ProjectMembership"}}]`, true},
		{"updating a policy", `[{"request":{"method":"PUT","url":"AccessPolicy/a"}}]`, true},
		{"a conditional update of a policy", `[{"request":{"method":"PUT","url":"AccessPolicy?name=x"}}]`, true},
		{"deleting a client", `[{"request":{"method":"DELETE","url":"/ClientApplication/c"}}]`, true},
		{"patching a membership by full URL", `[{"request":{"method":"PATCH","url":"` + base + `fhir/R4/ProjectMembership/m"}}]`, true},
		{"a type of another case", `[{"request":{"method":"POST","url":"projectmembership"}}]`, false},
	}
	for _, tc := range cases {
		if got := touchesSessions(base, entries(t, tc.entries)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestEntryType(t *testing.T) {
	cases := []struct{ url, want string }{
		{"Patient", "Patient"},
		{"Patient/p1", "Patient"},
		{"/Patient/p1/_history/2", "Patient"},
		{"Patient?name=a/b", "Patient"},
		{"Patient/_search", "Patient"},
		{base + "fhir/R4/Observation/o1", "Observation"},
		{"https://elsewhere.example/fhir/R4/Observation/o1", "https:"},
		{"?name=a", ""},
		{"/", ""},
	}
	for _, tc := range cases {
		e := batchEntry{}
		if err := json.Unmarshal([]byte(`{"request":{"method":"GET","url":`+mustQuote(tc.url)+`}}`), &e); err != nil {
			t.Fatal(err)
		}
		if got := entryType(base, e); got != tc.want {
			t.Errorf("entryType(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}

func mustQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
