package fhirsvc

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
)

const base = "https://pinion.example/"

func TestDecodeBody(t *testing.T) {
	cases := []struct {
		name, ct, body string
		// want is the resource decoded and project the meta.project sent;
		// or status, text and expr the refusal.
		want, project string
		status        int
		text, expr    string
	}{
		{name: "fhir json", ct: "application/fhir+json", body: `{"resourceType":"Patient","gender":"male"}`, want: `{"resourceType":"Patient","gender":"male"}`},
		{name: "plain json", ct: "application/json", body: `{"resourceType":"Patient"}`, want: `{"resourceType":"Patient"}`},
		{name: "charset parameter", ct: "application/fhir+json; charset=utf-8", body: `{"resourceType":"Patient"}`, want: `{"resourceType":"Patient"}`},
		{name: "media type in capitals", ct: "Application/FHIR+JSON", body: `{"resourceType":"Patient"}`, want: `{"resourceType":"Patient"}`},
		{name: "id kept for an update to check", ct: "application/json", body: `{"resourceType":"Patient","id":"p1"}`, want: `{"resourceType":"Patient","id":"p1"}`},
		{name: "decimals kept exact", ct: "application/json", body: `{"resourceType":"Patient","x":1.50,"y":12345678901234567890}`, want: `{"resourceType":"Patient","x":1.50,"y":12345678901234567890}`},

		{name: "no content type", ct: "", body: `{"resourceType":"Patient"}`, status: 415, text: "Unsupported media type"},
		{name: "text", ct: "text/plain", body: `{"resourceType":"Patient"}`, status: 415, text: "Unsupported media type"},
		{name: "json patch", ct: "application/json-patch+json", body: `{"resourceType":"Patient"}`, status: 415, text: "Unsupported media type"},
		{name: "form", ct: "application/x-www-form-urlencoded", body: `{"resourceType":"Patient"}`, status: 415, text: "Unsupported media type"},
		{name: "xml", ct: "application/fhir+xml", body: `<Patient/>`, status: 415, text: "Unsupported media type"},
		{name: "malformed content type", ct: "application/json; charset", body: `{"resourceType":"Patient"}`, status: 415, text: "Unsupported media type"},

		{name: "truncated", ct: "application/json", body: `{"resourceType":"Patient",`, status: 400, text: "Content could not be parsed"},
		{name: "empty body", ct: "application/json", body: ``, status: 400, text: "Content could not be parsed"},
		{name: "trailing text", ct: "application/json", body: `{"resourceType":"Patient"} x`, status: 400, text: "Content could not be parsed"},
		{name: "two objects", ct: "application/json", body: `{"resourceType":"Patient"}{}`, status: 400, text: "Content could not be parsed"},
		{name: "array", ct: "application/json", body: `[{"resourceType":"Patient"}]`, status: 400, text: "Content could not be parsed"},
		{name: "null", ct: "application/json", body: `null`, status: 400, text: "Content could not be parsed"},
		{name: "string", ct: "application/json", body: `"Patient"`, status: 400, text: "Content could not be parsed"},
		{name: "nested too deeply", ct: "application/json", body: `{"resourceType":"Patient","a":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`, status: 400, text: "Content could not be parsed: nested too deeply"},

		{name: "another type", ct: "application/json", body: `{"resourceType":"Observation"}`, status: 400, text: "Incorrect resource type", expr: "resourceType"},
		{name: "no type", ct: "application/json", body: `{"gender":"male"}`, status: 400, text: "Incorrect resource type", expr: "resourceType"},
		{name: "type of another case", ct: "application/json", body: `{"resourceType":"patient"}`, status: 400, text: "Incorrect resource type", expr: "resourceType"},
		{name: "type not a string", ct: "application/json", body: `{"resourceType":["Patient"]}`, status: 400, text: "Incorrect resource type", expr: "resourceType"},
		{name: "empty object", ct: "application/json", body: `{}`, status: 400, text: "Incorrect resource type", expr: "resourceType"},

		// meta: the server's fields go, the client's stay.
		{
			name: "server's meta fields dropped", ct: "application/json",
			body:    `{"resourceType":"Patient","meta":{"versionId":"9","lastUpdated":"2020-01-01T00:00:00Z","project":"p1","author":{"reference":"Practitioner/x"},"account":{"reference":"Organization/o"},"compartment":[{"reference":"Project/p1"}],"tag":[{"code":"t"}],"profile":["http://p"],"source":"s","security":[{"code":"s"}]}}`,
			want:    `{"resourceType":"Patient","meta":{"tag":[{"code":"t"}],"profile":["http://p"],"source":"s","security":[{"code":"s"}]}}`,
			project: "p1",
		},
		{name: "meta left empty is dropped", ct: "application/json", body: `{"resourceType":"Patient","meta":{"versionId":"1","project":"p2"}}`, want: `{"resourceType":"Patient"}`, project: "p2"},
		{name: "empty meta dropped", ct: "application/json", body: `{"resourceType":"Patient","meta":{}}`, want: `{"resourceType":"Patient"}`},
		{name: "meta.project not a string", ct: "application/json", body: `{"resourceType":"Patient","meta":{"project":{"reference":"Project/p"}}}`, want: `{"resourceType":"Patient"}`},
		{name: "meta not an object is left to validation", ct: "application/json", body: `{"resourceType":"Patient","meta":"x"}`, want: `{"resourceType":"Patient","meta":"x"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, project, err := decodeBodyProject(request("POST", tc.ct, tc.body), "Patient")
			res2, err2 := decodeBody(request("POST", tc.ct, tc.body), "Patient")
			if tc.status != 0 {
				wantError(t, err, tc.status, tc.text, tc.expr)
				wantError(t, err2, tc.status, tc.text, tc.expr)
				return
			}
			wantNoError(t, err)
			wantNoError(t, err2)
			sameJSON(t, res, tc.want)
			sameJSON(t, res2, tc.want)
			if project != tc.project {
				t.Fatalf("project %q, want %q", project, tc.project)
			}
		})
	}
}

func TestDecodeCreate(t *testing.T) {
	const id = "0b1d6a2e-6f1e-4b8c-9d0e-3c2f1a4b5c6d"
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	cases := []struct {
		name, typ, ct, body string
		header              map[string]string
		principal           *bus.Principal
		// want is the resource to store, raw whether it is a raw upload,
		// project where it goes; or status, text and expr the refusal.
		want       string
		raw        bool
		project    string
		status     int
		text, expr string
	}{
		// A Binary sent as anything but JSON is its content.
		{name: "raw text", typ: "Binary", ct: "text/plain", body: "hello", raw: true,
			want: `{"resourceType":"Binary","contentType":"text/plain","data":"` + b64("hello") + `","url":"Binary/` + id + `"}`},
		{name: "raw content type kept whole", typ: "Binary", ct: "text/plain; charset=utf-8", body: "hé", raw: true,
			want: `{"resourceType":"Binary","contentType":"text/plain; charset=utf-8","data":"` + b64("hé") + `","url":"Binary/` + id + `"}`},
		{name: "raw without content type", typ: "Binary", ct: "", body: "\x00\x01\xff", raw: true,
			want: `{"resourceType":"Binary","contentType":"application/octet-stream","data":"AAH/","url":"Binary/` + id + `"}`},
		{name: "raw empty", typ: "Binary", ct: "image/png", body: "", raw: true,
			want: `{"resourceType":"Binary","contentType":"image/png","data":"","url":"Binary/` + id + `"}`},
		{name: "raw that looks like JSON", typ: "Binary", ct: "text/plain", body: `{"resourceType":"Patient"}`, raw: true,
			want: `{"resourceType":"Binary","contentType":"text/plain","data":"` + b64(`{"resourceType":"Patient"}`) + `","url":"Binary/` + id + `"}`},
		{name: "raw with a security context", typ: "Binary", ct: "application/pdf", body: "%PDF", raw: true,
			header: map[string]string{"X-Security-Context": "Patient/p1"},
			want:   `{"resourceType":"Binary","contentType":"application/pdf","data":"` + b64("%PDF") + `","url":"Binary/` + id + `","securityContext":{"reference":"Patient/p1"}}`},
		{name: "a raw upload ignores the super admin's meta", typ: "Binary", ct: "text/plain", body: `{"meta":{"project":"p"}}`, raw: true, principal: &bus.Principal{SuperAdmin: true},
			want: `{"resourceType":"Binary","contentType":"text/plain","data":"` + b64(`{"meta":{"project":"p"}}`) + `","url":"Binary/` + id + `"}`},

		// A Binary sent as JSON is a resource like any other.
		{name: "binary as json", typ: "Binary", ct: "application/fhir+json", body: `{"resourceType":"Binary","id":"mine","contentType":"text/plain","data":"aGk="}`,
			want: `{"resourceType":"Binary","contentType":"text/plain","data":"aGk="}`},
		{name: "binary as bad json", typ: "Binary", ct: "application/json", body: `{"resourceType":"Binary"`, status: 400, text: "Content could not be parsed"},
		{name: "binary as json of another type", typ: "Binary", ct: "application/json", body: `{"resourceType":"Patient"}`, status: 400, text: "Incorrect resource type", expr: "resourceType"},

		// Other types must be JSON; the id is the server's.
		{name: "patient", typ: "Patient", ct: "application/fhir+json", body: `{"resourceType":"Patient","id":"chosen","gender":"female"}`,
			want: `{"resourceType":"Patient","gender":"female"}`},
		{name: "patient as text", typ: "Patient", ct: "text/plain", body: `{"resourceType":"Patient"}`, status: 415, text: "Unsupported media type"},
		{name: "patient without content type", typ: "Patient", ct: "", body: `{"resourceType":"Patient"}`, status: 415, text: "Unsupported media type"},

		// meta.project: a super admin's places the resource, anyone else's is dropped.
		{name: "super admin's project", typ: "Patient", ct: "application/json", body: `{"resourceType":"Patient","meta":{"project":"p9"}}`, principal: &bus.Principal{SuperAdmin: true},
			want: `{"resourceType":"Patient"}`, project: "p9"},
		{name: "super admin's project on a Project", typ: "Project", ct: "application/json", body: `{"resourceType":"Project","name":"x","meta":{"project":"p9"}}`, principal: &bus.Principal{SuperAdmin: true},
			want: `{"resourceType":"Project","name":"x"}`},
		{name: "admin's project dropped", typ: "Patient", ct: "application/json", body: `{"resourceType":"Patient","meta":{"project":"p9"}}`, principal: &bus.Principal{Admin: true, Project: "p1"},
			want: `{"resourceType":"Patient"}`},
		{name: "member's project dropped", typ: "Patient", ct: "application/json", body: `{"resourceType":"Patient","meta":{"project":"p9","tag":[{"code":"t"}]}}`, principal: &bus.Principal{Project: "p1"},
			want: `{"resourceType":"Patient","meta":{"tag":[{"code":"t"}]}}`},
		{name: "super admin without meta", typ: "Patient", ct: "application/json", body: `{"resourceType":"Patient"}`, principal: &bus.Principal{SuperAdmin: true},
			want: `{"resourceType":"Patient"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := request("POST", tc.ct, tc.body)
			for k, v := range tc.header {
				r.Header[k] = v
			}
			r.Principal = tc.principal
			in, err := decodeCreate(r, tc.typ, id)
			if tc.status != 0 {
				wantError(t, err, tc.status, tc.text, tc.expr)
				return
			}
			wantNoError(t, err)
			sameJSON(t, in.res, tc.want)
			if in.raw != tc.raw || in.project != tc.project {
				t.Fatalf("raw %v project %q, want %v %q", in.raw, in.project, tc.raw, tc.project)
			}
		})
	}
}

func TestWantsRaw(t *testing.T) {
	cases := []struct {
		accept string
		want   bool
	}{
		{"", false},
		{"*/*", true}, // Medplum's download
		{"text/plain", true},
		{"image/png", true},
		{"application/pdf", true},
		{"application/fhir+json", false},
		{"application/json", false},
		{"application/fhir+json, */*;q=0.1", false},
		{"text/html,application/json;q=0.9", false},
	}
	for _, tc := range cases {
		if got := wantsRaw(tc.accept); got != tc.want {
			t.Errorf("wantsRaw(%q) = %v, want %v", tc.accept, got, tc.want)
		}
	}
}

func TestIfMatch(t *testing.T) {
	cases := []struct{ header, want string }{
		{``, ``},
		{`W/"3"`, `3`},
		{`"3"`, `3`},
		{`3`, `3`},
		{`  W/"3"  `, `3`},
		{`W/"a1b2-c3"`, `a1b2-c3`},
		{`W/""`, ``},
		{`""`, ``},
		{`w/"3"`, `w/"3`}, // the weak prefix is case-sensitive
		{`*`, `*`},
	}
	for _, tc := range cases {
		if got := ifMatch(tc.header); got != tc.want {
			t.Errorf("ifMatch(%q) = %q, want %q", tc.header, got, tc.want)
		}
	}
}

func TestCheckVersion(t *testing.T) {
	cases := []struct {
		header, current string
		ok              bool
	}{
		{``, `3`, true},
		{`W/"3"`, `3`, true},
		{`"3"`, `3`, true},
		{`3`, `3`, true},
		{`W/""`, `3`, true}, // no version named: any will do
		{`W/"2"`, `3`, false},
		{`W/"30"`, `3`, false},
		{`*`, `3`, false},
	}
	for _, tc := range cases {
		t.Run(tc.header, func(t *testing.T) {
			err := checkVersion(tc.header, tc.current)
			if tc.ok {
				wantNoError(t, err)
				return
			}
			wantError(t, err, 412, "Precondition Failed", "")
		})
	}
}

func TestCheckIdentity(t *testing.T) {
	cases := []struct {
		name, body string
		status     int
		text, expr string
	}{
		{name: "same", body: `{"resourceType":"Patient","id":"p1"}`},
		{name: "other id", body: `{"resourceType":"Patient","id":"p2"}`, status: 400, text: "Incorrect ID", expr: "id"},
		{name: "no id", body: `{"resourceType":"Patient"}`, status: 400, text: "Incorrect ID", expr: "id"},
		{name: "id a number", body: `{"resourceType":"Patient","id":1}`, status: 400, text: "Incorrect ID", expr: "id"},
		{name: "other type", body: `{"resourceType":"Observation","id":"p1"}`, status: 400, text: "Incorrect resource type", expr: "resourceType"},
		{name: "type before id", body: `{"resourceType":"Observation","id":"p2"}`, status: 400, text: "Incorrect resource type", expr: "resourceType"},
		{name: "no type", body: `{"id":"p1"}`, status: 400, text: "Incorrect resource type", expr: "resourceType"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var res map[string]any
			if err := json.Unmarshal([]byte(tc.body), &res); err != nil {
				t.Fatal(err)
			}
			err := checkIdentity(res, "Patient", "p1")
			if tc.status == 0 {
				wantNoError(t, err)
				return
			}
			wantError(t, err, tc.status, tc.text, tc.expr)
		})
	}
}

func TestProfileInUse(t *testing.T) {
	wantNoError(t, profileInUse(""))
	wantError(t, profileInUse("m1"), 409, "Resource is the profile of ProjectMembership/m1; remove the member first", "")
	for typ, want := range map[string]bool{
		"Patient": true, "Practitioner": true, "RelatedPerson": true,
		"Observation": false, "Organization": false, "ProjectMembership": false,
	} {
		if profileTypes[typ] != want {
			t.Errorf("profileTypes[%s] = %v, want %v", typ, !want, want)
		}
	}
}

func TestIsMediaType(t *testing.T) {
	cases := []struct {
		header string
		want   []string
		ok     bool
	}{
		{"application/json", []string{"application/json"}, true},
		{"application/json; charset=utf-8", []string{"application/json"}, true},
		{"APPLICATION/JSON", []string{"application/json"}, true},
		{"application/fhir+json", []string{"application/json", "application/fhir+json"}, true},
		{"application/json-patch+json", []string{"application/json"}, false},
		{"", []string{"application/json"}, false},
		{"application/json; charset", []string{"application/json"}, false},
		{"application/json", nil, false},
	}
	for _, tc := range cases {
		if got := isMediaType(tc.header, tc.want...); got != tc.ok {
			t.Errorf("isMediaType(%q, %q) = %v, want %v", tc.header, tc.want, got, tc.ok)
		}
	}
}

func TestSearchParams(t *testing.T) {
	const form = "application/x-www-form-urlencoded"
	cases := []struct {
		name, method, ct, body, query string
		want                          url.Values
		status                        int
		text                          string
	}{
		{name: "get reads the query", method: "GET", query: "name=a&_count=2", body: "name=ignored", want: url.Values{"name": {"a"}, "_count": {"2"}}},
		{name: "get without a query", method: "GET", want: url.Values{}},
		{name: "post reads the form", method: "POST", ct: form, body: "name=a&gender=male", want: url.Values{"name": {"a"}, "gender": {"male"}}},
		{name: "post with charset", method: "POST", ct: form + "; charset=UTF-8", body: "name=a", want: url.Values{"name": {"a"}}},
		{name: "post adds the query after the form", method: "POST", ct: form, body: "name=a", query: "name=b&_count=1", want: url.Values{"name": {"a", "b"}, "_count": {"1"}}},
		{name: "post empty form", method: "POST", ct: form, body: "", query: "name=b", want: url.Values{"name": {"b"}}},
		{name: "post escapes decoded", method: "POST", ct: form, body: "identifier=http%3A%2F%2Fx%7C1&name=a+b", want: url.Values{"identifier": {"http://x|1"}, "name": {"a b"}}},
		{name: "post bad escape", method: "POST", ct: form, body: "name=%zz", status: 400, text: "Invalid form body"},
		{name: "post json", method: "POST", ct: "application/json", body: `{"name":"a"}`, status: 415, text: "Unsupported media type"},
		{name: "post without content type", method: "POST", body: "name=a", status: 415, text: "Unsupported media type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := request(tc.method, tc.ct, tc.body)
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			r.Query = q
			got, err := searchParams(r)
			if tc.status != 0 {
				wantError(t, err, tc.status, tc.text, "")
				return
			}
			wantNoError(t, err)
			if got.Encode() != tc.want.Encode() {
				t.Fatalf("params %q, want %q", got.Encode(), tc.want.Encode())
			}
		})
	}
}

// resources are n Patients p1…pn, each size bytes of JSON or more.
func resources(n, size int) []*repo.Resource {
	out := make([]*repo.Resource, n)
	for i := range out {
		id := fmt.Sprintf("p%d", i+1)
		doc := fmt.Sprintf(`{"resourceType":"Patient","id":%q,"meta":{"versionId":"1"},"text":{"status":"generated"},"gender":"male","note":%q}`, id, strings.Repeat("x", size))
		out[i] = &repo.Resource{Type: "Patient", ID: id, VersionID: "1", JSON: []byte(doc)}
	}
	return out
}

// bundle reads a Bundle: its total (-1 when absent), links by relation,
// and entries.
func bundle(t *testing.T, doc []byte) (total int, links map[string]string, entries []map[string]any) {
	t.Helper()
	var b struct {
		ResourceType, Type string
		Total              *int
		Link               []struct{ Relation, URL string }
		Entry              []map[string]any
	}
	if err := json.Unmarshal(doc, &b); err != nil {
		t.Fatalf("bundle: %v: %s", err, doc)
	}
	total = -1
	if b.Total != nil {
		total = *b.Total
	}
	links = map[string]string{}
	for _, l := range b.Link {
		links[l.Relation] = l.URL
	}
	return total, links, b.Entry
}

func TestSearchBundle(t *testing.T) {
	three := resources(3, 10)
	per := len(three[0].JSON) + 256 // what one entry costs
	cases := []struct {
		name  string
		query string
		page  *repo.Page
		room  int
		// wantTotal is the total (-1 for none), ids the entries, self and
		// next the links ("" for none); or status and text the refusal.
		wantTotal  int
		ids        []string
		self, next string
		status     int
		text       string
	}{
		{name: "one page", query: "gender=male", page: &repo.Page{Resources: three, Total: 3}, room: 1 << 20,
			wantTotal: 3, ids: []string{"p1", "p2", "p3"}, self: base + "fhir/R4/Patient?_count=20&gender=male"},
		{name: "total not counted", query: "", page: &repo.Page{Resources: three[:1], Total: -1}, room: 1 << 20,
			wantTotal: -1, ids: []string{"p1"}, self: base + "fhir/R4/Patient?_count=20"},
		{name: "no matches", query: "gender=other", page: &repo.Page{Total: 0}, room: 1 << 20,
			wantTotal: 0, self: base + "fhir/R4/Patient?_count=20&gender=other"},
		{name: "more pages", query: "_count=2&gender=male", page: &repo.Page{Resources: three[:2], Total: -1, More: true}, room: 1 << 20,
			wantTotal: -1, ids: []string{"p1", "p2"}, self: base + "fhir/R4/Patient?_count=2&gender=male", next: base + "fhir/R4/Patient?_count=2&_offset=2&gender=male"},
		{name: "a later page", query: "_count=2&_offset=4", page: &repo.Page{Resources: three[:2], Total: 9, More: true}, room: 1 << 20,
			wantTotal: 9, ids: []string{"p1", "p2"}, self: base + "fhir/R4/Patient?_count=2&_offset=4", next: base + "fhir/R4/Patient?_count=2&_offset=6"},
		{name: "the last page", query: "_count=2&_offset=2", page: &repo.Page{Resources: three[2:], Total: 3}, room: 1 << 20,
			wantTotal: 3, ids: []string{"p3"}, self: base + "fhir/R4/Patient?_count=2&_offset=2"},
		{name: "the default count in the next link", query: "", page: &repo.Page{Resources: three, Total: -1, More: true}, room: 1 << 20,
			wantTotal: -1, ids: []string{"p1", "p2", "p3"}, self: base + "fhir/R4/Patient?_count=20", next: base + "fhir/R4/Patient?_count=20&_offset=3"},
		{name: "count only", query: "_summary=count", page: &repo.Page{Total: 7}, room: 1 << 20,
			wantTotal: 7, self: base + "fhir/R4/Patient?_count=0&_summary=count"},

		// Cut where the answer would be too large; the next link goes on from there.
		{name: "exactly fits", query: "", page: &repo.Page{Resources: three, Total: 3}, room: 3 * per,
			wantTotal: 3, ids: []string{"p1", "p2", "p3"}, self: base + "fhir/R4/Patient?_count=20"},
		{name: "one byte short", query: "", page: &repo.Page{Resources: three, Total: 3}, room: 3*per - 1,
			wantTotal: 3, ids: []string{"p1", "p2"}, self: base + "fhir/R4/Patient?_count=20", next: base + "fhir/R4/Patient?_count=20&_offset=2"},
		{name: "cut on a later page", query: "_count=3&_offset=6", page: &repo.Page{Resources: three, Total: -1}, room: per,
			wantTotal: -1, ids: []string{"p1"}, self: base + "fhir/R4/Patient?_count=3&_offset=6", next: base + "fhir/R4/Patient?_count=3&_offset=7"},
		{name: "first too large", query: "", page: &repo.Page{Resources: three, Total: 3}, room: per - 1,
			status: 413, text: "Patient/p1 is too large to answer in a search; read it by id"},
		{name: "no room", query: "", page: &repo.Page{Resources: three, Total: 3}, room: 0,
			status: 413, text: "Patient/p1 is too large to answer in a search; read it by id"},
		{name: "no room, nothing to answer", query: "", page: &repo.Page{Total: 0}, room: 0,
			wantTotal: 0, self: base + "fhir/R4/Patient?_count=20"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			params, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			q, err := search.Parse("Patient", params)
			wantNoError(t, err)
			out, err := searchBundle(base, "Patient", q, tc.page, tc.room)
			if tc.status != 0 {
				wantError(t, err, tc.status, tc.text, "")
				return
			}
			wantNoError(t, err)
			m := decoded(t, out)
			if m["resourceType"] != "Bundle" || m["type"] != "searchset" {
				t.Fatalf("not a searchset: %s", out)
			}
			total, links, entries := bundle(t, out)
			if total != tc.wantTotal {
				t.Errorf("total %d, want %d", total, tc.wantTotal)
			}
			want := map[string]string{"self": tc.self}
			if tc.next != "" {
				want["next"] = tc.next
			}
			if !maps.Equal(links, want) {
				t.Errorf("links %q, want self %q next %q", links, tc.self, tc.next)
			}
			if len(entries) != len(tc.ids) {
				t.Fatalf("%d entries, want %v", len(entries), tc.ids)
			}
			for i, e := range entries {
				id := tc.ids[i]
				res := e["resource"].(map[string]any)
				if e["fullUrl"] != base+"fhir/R4/Patient/"+id || res["id"] != id || e["search"].(map[string]any)["mode"] != "match" {
					t.Errorf("entry %d: %v", i, e)
				}
			}
		})
	}
}

func TestSearchBundleSubsets(t *testing.T) {
	one := resources(1, 3)
	cases := []struct {
		query string
		want  string
	}{
		{"", `{"resourceType":"Patient","id":"p1","meta":{"versionId":"1"},"text":{"status":"generated"},"gender":"male","note":"xxx"}`},
		{"_elements=gender", `{"resourceType":"Patient","id":"p1","meta":{"versionId":"1"},"gender":"male"}`},
		{"_elements=gender,note,birthDate", `{"resourceType":"Patient","id":"p1","meta":{"versionId":"1"},"gender":"male","note":"xxx"}`},
		{"_summary=text", `{"resourceType":"Patient","id":"p1","meta":{"versionId":"1"},"text":{"status":"generated"}}`},
		{"_summary=data", `{"resourceType":"Patient","id":"p1","meta":{"versionId":"1"},"gender":"male","note":"xxx"}`},
		{"_summary=false", `{"resourceType":"Patient","id":"p1","meta":{"versionId":"1"},"text":{"status":"generated"},"gender":"male","note":"xxx"}`},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			params, _ := url.ParseQuery(tc.query)
			q, err := search.Parse("Patient", params)
			wantNoError(t, err)
			out, err := searchBundle(base, "Patient", q, &repo.Page{Resources: one, Total: 1}, 1<<20)
			wantNoError(t, err)
			_, _, entries := bundle(t, out)
			sameJSON(t, entries[0]["resource"], tc.want)
		})
	}
	// A subset is smaller: it fits where the whole would not.
	q, _ := search.Parse("Patient", url.Values{"_elements": {"gender"}})
	big := resources(1, 5000)
	out, err := searchBundle(base, "Patient", q, &repo.Page{Resources: big, Total: 1}, 1000)
	wantNoError(t, err)
	if _, _, entries := bundle(t, out); len(entries) != 1 {
		t.Fatalf("the subset did not fit: %s", out)
	}
	// A stored resource that is not JSON cannot be cut down.
	bad := []*repo.Resource{{Type: "Patient", ID: "p1", JSON: []byte(`{"resourceType":`)}}
	if _, err := searchBundle(base, "Patient", q, &repo.Page{Resources: bad}, 1<<20); err == nil {
		t.Fatal("a broken resource was subset")
	}
}

func TestSubset(t *testing.T) {
	doc := []byte(`{"resourceType":"Patient","id":"p","meta":{"versionId":"2"},"text":{"div":"<div/>"},"name":[{"family":"F"}],"gender":"female","birthDate":"2000-01-01"}`)
	cases := []struct {
		name string
		q    search.Query
		want string
	}{
		{"elements", search.Query{Elements: []string{"name", "birthDate"}}, `{"resourceType":"Patient","id":"p","meta":{"versionId":"2"},"name":[{"family":"F"}],"birthDate":"2000-01-01"}`},
		{"elements naming nothing present", search.Query{Elements: []string{"telecom"}}, `{"resourceType":"Patient","id":"p","meta":{"versionId":"2"}}`},
		{"elements cannot drop the identity", search.Query{Elements: []string{"gender"}}, `{"resourceType":"Patient","id":"p","meta":{"versionId":"2"},"gender":"female"}`},
		{"text", search.Query{Summary: "text"}, `{"resourceType":"Patient","id":"p","meta":{"versionId":"2"},"text":{"div":"<div/>"}}`},
		{"data", search.Query{Summary: "data"}, `{"resourceType":"Patient","id":"p","meta":{"versionId":"2"},"name":[{"family":"F"}],"gender":"female","birthDate":"2000-01-01"}`},
		{"text wins over elements", search.Query{Summary: "text", Elements: []string{"gender"}}, `{"resourceType":"Patient","id":"p","meta":{"versionId":"2"},"text":{"div":"<div/>"}}`},
		{"data wins over elements", search.Query{Summary: "data", Elements: []string{"gender"}}, `{"resourceType":"Patient","id":"p","meta":{"versionId":"2"},"name":[{"family":"F"}],"gender":"female","birthDate":"2000-01-01"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := subset(doc, &tc.q)
			wantNoError(t, err)
			sameJSON(t, out, tc.want)
		})
	}
	if _, err := subset([]byte(`[1]`), &search.Query{Summary: "text"}); err == nil {
		t.Fatal("an array was subset")
	}
}

func TestHistoryBundle(t *testing.T) {
	t1 := time.Date(2024, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	t2 := t1.Add(time.Hour)
	versions := []*repo.Resource{
		{Type: "Patient", ID: "p1", VersionID: "3", LastUpdated: t2.Add(time.Hour), Deleted: true},
		{Type: "Patient", ID: "p1", VersionID: "2", LastUpdated: t2, JSON: []byte(`{"resourceType":"Patient","id":"p1","gender":"male"}`)},
		{Type: "Patient", ID: "p1", VersionID: "1", LastUpdated: t1, JSON: []byte(`{"resourceType":"Patient","id":"p1"}`)},
	}
	out, err := historyBundle(base, "Patient", "p1", versions, 1<<20)
	wantNoError(t, err)
	sameJSON(t, out, `{"resourceType":"Bundle","type":"history","total":3,"entry":[
		{"fullUrl":"`+base+`fhir/R4/Patient/p1","request":{"method":"DELETE","url":"Patient/p1"},"response":{"status":"410","lastModified":"2024-01-02T05:04:05.678Z"}},
		{"fullUrl":"`+base+`fhir/R4/Patient/p1","resource":{"resourceType":"Patient","id":"p1","gender":"male"},"request":{"method":"PUT","url":"Patient/p1"},"response":{"status":"200","lastModified":"2024-01-02T04:04:05.678Z"}},
		{"fullUrl":"`+base+`fhir/R4/Patient/p1","resource":{"resourceType":"Patient","id":"p1"},"request":{"method":"PUT","url":"Patient/p1"},"response":{"status":"200","lastModified":"2024-01-02T03:04:05.678Z"}}]}`)

	out, err = historyBundle(base, "Patient", "p1", nil, 1<<20)
	wantNoError(t, err)
	sameJSON(t, out, `{"resourceType":"Bundle","type":"history","total":0}`)

	// Each version costs its JSON and 256 bytes; a history that does not
	// fit is refused whole, never cut.
	need := 3*256 + len(versions[1].JSON) + len(versions[2].JSON)
	if _, err := historyBundle(base, "Patient", "p1", versions, need); err != nil {
		t.Fatalf("a history that fits exactly: %v", err)
	}
	_, err = historyBundle(base, "Patient", "p1", versions, need-1)
	wantError(t, err, 413, "The history of Patient/p1 (3 versions) is too large to answer at once; read versions one at a time", "")
	_, err = historyBundle(base, "Patient", "p1", versions, 0)
	wantError(t, err, 413, "The history of Patient/p1 (3 versions) is too large to answer at once; read versions one at a time", "")
}

func TestResourceResponse(t *testing.T) {
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.FixedZone("CEST", 2*3600))
	res := &repo.Resource{Type: "Patient", ID: "p1", VersionID: "v7", LastUpdated: at, JSON: []byte(`{"resourceType":"Patient"}`)}
	resp := resourceResponse(201, res)
	if resp.Status != 201 || string(resp.Body) != `{"resourceType":"Patient"}` {
		t.Fatalf("response %d %s", resp.Status, resp.Body)
	}
	want := map[string]string{"Content-Type": bus.FHIRContentType, "ETag": `W/"v7"`, "Last-Modified": "Mon, 06 May 2024 05:08:09 GMT"}
	for k, v := range want {
		if resp.Header[k] != v {
			t.Errorf("%s: %q, want %q", k, resp.Header[k], v)
		}
	}
	if len(resp.Header) != len(want) {
		t.Errorf("headers %v", resp.Header)
	}
}

func TestWithoutData(t *testing.T) {
	in := &repo.Resource{Type: "Binary", ID: "b1", VersionID: "1", Project: "p", JSON: []byte(`{"resourceType":"Binary","id":"b1","contentType":"text/plain","data":"aGk=","url":"Binary/b1"}`)}
	out, err := withoutData(in)
	wantNoError(t, err)
	sameJSON(t, out.JSON, `{"resourceType":"Binary","id":"b1","contentType":"text/plain","url":"Binary/b1"}`)
	if out.ID != "b1" || out.VersionID != "1" || out.Project != "p" || out.Type != "Binary" {
		t.Errorf("version fields lost: %+v", out)
	}
	if !strings.Contains(string(in.JSON), `"data"`) {
		t.Error("the stored version was changed")
	}
	if _, err := withoutData(&repo.Resource{JSON: []byte(`not json`)}); err == nil {
		t.Error("bad JSON answered")
	}
}

func TestBinaryContent(t *testing.T) {
	cases := []struct {
		name, doc string
		// ct and body are the answer; or status and text the refusal.
		ct, body string
		status   int
		text     string
	}{
		{name: "text", doc: `{"resourceType":"Binary","contentType":"text/plain","data":"aGVsbG8="}`, ct: "text/plain", body: "hello"},
		{name: "bytes", doc: `{"resourceType":"Binary","contentType":"image/png","data":"AAH/"}`, ct: "image/png", body: "\x00\x01\xff"},
		{name: "no data", doc: `{"resourceType":"Binary","contentType":"text/plain"}`, ct: "text/plain", body: ""},
		{name: "no content type", doc: `{"resourceType":"Binary","data":"aGk="}`, ct: "", body: "hi"},
		{name: "bad base64", doc: `{"resourceType":"Binary","contentType":"text/plain","data":"not base64!"}`, status: 400, text: "Binary data is not valid base64"},
		{name: "url-safe base64", doc: `{"resourceType":"Binary","contentType":"text/plain","data":"AAH_"}`, status: 400, text: "Binary data is not valid base64"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := binaryContent(&repo.Resource{Type: "Binary", ID: "b", VersionID: "4", JSON: []byte(tc.doc)})
			if tc.status != 0 {
				wantError(t, err, tc.status, tc.text, "")
				return
			}
			wantNoError(t, err)
			if resp.Status != 200 || string(resp.Body) != tc.body || resp.Header["Content-Type"] != tc.ct || resp.Header["ETag"] != `W/"4"` || len(resp.Header) != 2 {
				t.Fatalf("answer %d %v %q", resp.Status, resp.Header, resp.Body)
			}
		})
	}
	if _, err := binaryContent(&repo.Resource{JSON: []byte(`{"data":1}`)}); err == nil {
		t.Error("data of the wrong JSON type answered")
	}
}
