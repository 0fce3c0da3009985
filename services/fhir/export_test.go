package fhirsvc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/fhirschema"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/store"
)

func TestExportParams(t *testing.T) {
	params := func(parts ...string) string {
		return `{"resourceType":"Parameters","parameter":[` + strings.Join(parts, ",") + `]}`
	}
	cases := []struct {
		name, method, query, ct, body string
		// want is the parameters read; or status, text and expr the refusal.
		want       url.Values
		status     int
		text, expr string
	}{
		{name: "none", method: "GET", want: url.Values{}},
		{name: "query", method: "GET", query: "_type=Patient,Observation&_since=2024-01-01T00:00:00Z&_outputFormat=ndjson",
			want: url.Values{"_type": {"Patient,Observation"}, "_since": {"2024-01-01T00:00:00Z"}, "_outputFormat": {"ndjson"}}},
		{name: "_type repeated is one list", method: "GET", query: "_type=Patient&_type=Observation,Encounter",
			want: url.Values{"_type": {"Patient,Observation,Encounter"}}},
		{name: "formatting parameters pass", method: "GET", query: "_format=json&_pretty=true", want: url.Values{"_format": {"json"}, "_pretty": {"true"}}},
		{name: "a GET's body is not read", method: "GET", query: "_type=Patient", ct: "text/plain", body: "x",
			want: url.Values{"_type": {"Patient"}}},
		{name: "a POST without a body", method: "POST", query: "_type=Patient", want: url.Values{"_type": {"Patient"}}},
		{name: "a POST with a blank body", method: "POST", query: "_type=Patient", ct: "text/plain", body: " \n\t", want: url.Values{"_type": {"Patient"}}},
		{name: "a Parameters body", method: "POST", ct: "application/fhir+json",
			body: params(`{"name":"_type","valueString":"Patient"}`, `{"name":"_since","valueInstant":"2024-01-01T00:00:00Z"}`, `{"name":"_outputFormat","valueCode":"application/fhir+ndjson"}`),
			want: url.Values{"_type": {"Patient"}, "_since": {"2024-01-01T00:00:00Z"}, "_outputFormat": {"application/fhir+ndjson"}}},
		{name: "query and body together", method: "POST", query: "_type=Patient", ct: "application/json",
			body: params(`{"name":"_type","valueString":"Observation"}`, `{"name":"_type","valueCode":"Encounter"}`),
			want: url.Values{"_type": {"Patient,Observation,Encounter"}}},
		{name: "a value of another kind reads as empty", method: "POST", ct: "application/json",
			body: params(`{"name":"_since","valueDateTime":"2024-01-01"}`), want: url.Values{"_since": {""}}},
		{name: "no parameters", method: "POST", ct: "application/json", body: `{"resourceType":"Parameters"}`, want: url.Values{}},

		{name: "an unsupported parameter", method: "GET", query: "_typeFilter=Patient%3Factive%3Dtrue", status: 400, text: "Unsupported export parameter: _typeFilter", expr: "_typeFilter"},
		{name: "a search parameter", method: "GET", query: "patient=Patient/1", status: 400, text: "Unsupported export parameter: patient", expr: "patient"},
		{name: "an unsupported parameter in the body", method: "POST", ct: "application/json", body: params(`{"name":"includeAssociatedData","valueCode":"x"}`),
			status: 400, text: "Unsupported export parameter: includeAssociatedData", expr: "includeAssociatedData"},
		{name: "a parameter without a name", method: "POST", ct: "application/json", body: params(`{"valueString":"Patient"}`),
			status: 400, text: "Unsupported export parameter: "},
		{name: "_since twice", method: "GET", query: "_since=2024-01-01T00:00:00Z&_since=2024-01-01T00:00:00Z", status: 400, text: "Give _since once", expr: "_since"},
		{name: "_outputFormat twice", method: "GET", query: "_outputFormat=ndjson&_outputFormat=ndjson", status: 400, text: "Give _outputFormat once", expr: "_outputFormat"},
		{name: "_since in query and body", method: "POST", query: "_since=2024-01-01T00:00:00Z", ct: "application/json",
			body: params(`{"name":"_since","valueInstant":"2024-01-01T00:00:00Z"}`), status: 400, text: "Give _since once", expr: "_since"},
		{name: "a body not JSON", method: "POST", ct: "text/plain", body: "_type=Patient", status: 415, text: "Unsupported media type"},
		{name: "a body without content type", method: "POST", body: params(), status: 415, text: "Unsupported media type"},
		{name: "a body of another resource", method: "POST", ct: "application/json", body: `{"resourceType":"Patient"}`, status: 400, text: "The body of $export must be a Parameters resource"},
		{name: "a malformed body", method: "POST", ct: "application/json", body: `{"resourceType":"Parameters"`, status: 400, text: "The body of $export must be a Parameters resource"},
		{name: "a value of the wrong JSON type", method: "POST", ct: "application/json", body: params(`{"name":"_type","valueString":["Patient"]}`), status: 400, text: "The body of $export must be a Parameters resource"},
		{name: "parameter not a list", method: "POST", ct: "application/json", body: `{"resourceType":"Parameters","parameter":{"name":"_type"}}`, status: 400, text: "The body of $export must be a Parameters resource"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := request(tc.method, tc.ct, tc.body)
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			r.Query = q
			got, err := exportParams(r)
			if tc.status != 0 {
				wantError(t, err, tc.status, tc.text, tc.expr)
				return
			}
			wantNoError(t, err)
			if got.Encode() != tc.want.Encode() {
				t.Fatalf("params %q, want %q", got.Encode(), tc.want.Encode())
			}
		})
	}
}

func TestExportSince(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", ""},
		{"2024-01-02T03:04:05Z", "2024-01-02T03:04:05Z"},
		{"2024-01-02T03:04:05.120Z", "2024-01-02T03:04:05.12Z"},
		{"2024-01-02T03:04:05.123+02:00", "2024-01-02T01:04:05.123Z"},
		{"2024-01-01T00:30:00-01:00", "2024-01-01T01:30:00Z"},
	}
	for _, tc := range cases {
		got, err := exportSince(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("exportSince(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"yesterday", "2024-01-02", "2024-01-02T03:04:05", "2024-01-02 03:04:05Z", "2024-13-02T03:04:05Z", "1704164645"} {
		t.Run(bad, func(t *testing.T) {
			_, err := exportSince(bad)
			wantError(t, err, 400, "Invalid _since: want an instant such as 2024-01-02T03:04:05Z", "_since")
		})
	}
}

func TestCheckOutputFormat(t *testing.T) {
	for _, ok := range []string{"", "application/fhir+ndjson", "application/ndjson", "ndjson"} {
		wantNoError(t, checkOutputFormat(ok))
	}
	for _, bad := range []string{"text/csv", "application/fhir+json", "NDJSON", "application/fhir+ndjson; charset=utf-8", " ndjson"} {
		t.Run(bad, func(t *testing.T) {
			wantError(t, checkOutputFormat(bad), 400, "Unsupported _outputFormat: "+bad+" (only application/fhir+ndjson)", "_outputFormat")
		})
	}
}

func TestExportLevel(t *testing.T) {
	cases := map[string]string{
		"/fhir/R4/$export":               "System",
		"/fhir/R4/Patient/$export":       "Patient",
		"/fhir/R4/Group/g1/$export":      "Group",
		"/fhir/R4/Group/$export":         "Group",
		"/fhir/R4/Observation/$export":   "System",
		"/fhir/R4/PatientX/$export":      "System",
		"/fhir/R4/Patient":               "System",
		"fhir/R4/Group/g1/$export":       "System",
		"/fhir/R4/bulkdata/export/job-1": "System",
	}
	for path, want := range cases {
		if got := exportLevel(path); got != want {
			t.Errorf("exportLevel(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestNotExported(t *testing.T) {
	for typ, want := range map[string]bool{
		"Binary": true, "AsyncJob": true, "BulkDataExport": true, "AuditEvent": false,
		"CodeSystem": true, "SearchParameter": true, "StructureDefinition": true, "ValueSet": true,
		"ClientApplication": true, "PasswordChangeRequest": true,
		// The administrative types, by access's own list.
		"Project": true, "ProjectMembership": true, "User": true, "Login": true, "JsonWebKey": true,
		"Patient": false, "Observation": false, "Organization": false, "Practitioner": false,
	} {
		if got := notExported(typ); got != want {
			t.Errorf("notExported(%s) = %v, want %v", typ, got, want)
		}
	}
}

func TestExportCandidates(t *testing.T) {
	all := exportCandidates("System")
	if !slices.Equal(all, fhirschema.ResourceTypes()) {
		t.Fatalf("a system export's candidates are not every type: %d of %d", len(all), len(fhirschema.ResourceTypes()))
	}
	pt := exportCandidates("Patient")
	if !slices.Equal(pt, exportCandidates("Group")) || !slices.Equal(pt, patientTypes()) {
		t.Fatal("patient and group exports cover different types")
	}
	if len(pt) < 2 || pt[0] != "Patient" || slices.Contains(pt[1:], "Patient") {
		t.Fatalf("patient types %v: Patient first, once", pt)
	}
	for _, want := range []string{"Observation", "Encounter", "Condition", "MedicationRequest", "AllergyIntolerance"} {
		if !slices.Contains(pt, want) {
			t.Errorf("patient types lack %s", want)
		}
	}
	for _, typ := range pt[1:] {
		if notExported(typ) {
			t.Errorf("patient types include %s, which is never exported", typ)
		}
		found := false
		for _, p := range search.Params(typ) {
			if p.Code == "patient" && p.Type == "reference" && (len(p.Targets) == 0 || slices.Contains(p.Targets, "Patient")) {
				found = true
			}
		}
		if !found {
			t.Errorf("patient types include %s, which has no patient reference to search by", typ)
		}
	}
	for _, never := range []string{"Organization", "Practitioner", "AuditEvent", "Binary", "Bot"} {
		if slices.Contains(pt, never) {
			t.Errorf("patient types include %s", never)
		}
	}
}

func TestAskedTypes(t *testing.T) {
	all, pt := exportCandidates("System"), patientTypes()
	cases := []struct {
		name, v    string
		candidates []string
		want       []string
		text       string
	}{
		{name: "one", v: "Patient", candidates: all, want: []string{"Patient"}},
		{name: "in the order asked, once each", v: "Observation, Patient ,Observation", candidates: all, want: []string{"Observation", "Patient"}},
		{name: "a patient type at patient level", v: "Observation", candidates: pt, want: []string{"Observation"}},
		{name: "an unknown type", v: "Foo", candidates: all, text: "Unknown resource type: Foo"},
		{name: "a type in lower case", v: "patient", candidates: all, text: "Unknown resource type: patient"},
		{name: "an empty item", v: "Patient,", candidates: all, text: "Unknown resource type: "},
		{name: "never exported", v: "Binary", candidates: all, text: "Binary cannot be exported at this level"},
		{name: "administrative", v: "Patient,ProjectMembership", candidates: all, text: "ProjectMembership cannot be exported at this level"},
		{name: "not at patient level", v: "Organization", candidates: pt, text: "Organization cannot be exported at this level"},
		{name: "the first bad type answers", v: "Foo,Binary", candidates: all, text: "Unknown resource type: Foo"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := askedTypes(tc.v, tc.candidates)
			if tc.text != "" {
				wantError(t, err, 400, tc.text, "_type")
				return
			}
			wantNoError(t, err)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("%v, want %v", got, tc.want)
			}
		})
	}
}

func TestExportTypes(t *testing.T) {
	candidates := []string{"Patient", "Observation", "Binary", "Encounter", "Project"}
	searchable := func(typ string) bool { return typ != "Encounter" }
	cases := []struct {
		name string
		spec exportSpec
		want []string
	}{
		{"what the caller may search", exportSpec{}, []string{"Patient", "Observation"}},
		{"a group with patients", exportSpec{Group: true, Patients: []string{"a"}}, []string{"Patient", "Observation"}},
		{"a group without patients exports nothing", exportSpec{Group: true}, nil},
		{"no patients without a group is no matter", exportSpec{Patients: nil}, []string{"Patient", "Observation"}},
	}
	for _, tc := range cases {
		if got := exportTypes(candidates, &tc.spec, searchable); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := exportTypes(candidates, &exportSpec{}, func(string) bool { return false }); got != nil {
		t.Errorf("nothing searchable: %v", got)
	}
}

func TestNewExportJob(t *testing.T) {
	at := time.Date(2024, 3, 4, 5, 6, 7, 890_000_000, time.FixedZone("X", -5*3600))
	cases := []struct{ path, raw, want string }{
		{"/fhir/R4/$export", "", base + "fhir/R4/$export"},
		{"/fhir/R4/Patient/$export", "_type=Observation&_since=2024-01-01T00:00:00Z", base + "fhir/R4/Patient/$export?_type=Observation&_since=2024-01-01T00:00:00Z"},
		{"/fhir/R4/Group/g1/$export", "_type=Patient", base + "fhir/R4/Group/g1/$export?_type=Patient"},
	}
	for _, tc := range cases {
		job := newExportJob(base, tc.path, tc.raw, at)
		sameJSON(t, job, `{"resourceType":"AsyncJob","status":"active","requestTime":"2024-03-04T10:06:07.89Z","request":"`+tc.want+`"}`)
		if !isExportJob(job) {
			t.Errorf("%s: not recognised as an export", tc.path)
		}
	}
}

func TestExportAccepted(t *testing.T) {
	resp := exportAccepted(base, "job-1")
	status := base + "fhir/R4/bulkdata/export/job-1"
	if resp.Status != 202 || resp.Header["Content-Location"] != status || resp.Header["Content-Type"] != bus.FHIRContentType || len(resp.Header) != 2 {
		t.Fatalf("answer %d %v", resp.Status, resp.Header)
	}
	sameJSON(t, resp.Body, `{"resourceType":"OperationOutcome","id":"accepted","issue":[{"severity":"information","code":"informational","details":{"text":"Accepted"},"diagnostics":"`+status+`"}]}`)
}

func TestGroupMembers(t *testing.T) {
	members := func(refs ...string) string {
		m := make([]string, len(refs))
		for i, r := range refs {
			m[i] = `{"entity":{"reference":` + mustQuote(r) + `}}`
		}
		return `{"resourceType":"Group","member":[` + strings.Join(m, ",") + `]}`
	}
	ids := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("p%d", i)
		}
		return out
	}
	many := func(n int) []string {
		out := ids(n)
		for i := range out {
			out[i] = "Patient/" + out[i]
		}
		return out
	}
	cases := []struct {
		name, group string
		want        []string
		err         bool
		text        string
	}{
		{name: "patients", group: members("Patient/a", "Patient/b"), want: []string{"a", "b"}},
		{name: "others left out", group: members("Practitioner/x", "Patient/a", "Device/d", "Group/g"), want: []string{"a"}},
		{name: "each once", group: members("Patient/a", "Patient/b", "Patient/a"), want: []string{"a", "b"}},
		{name: "full and versioned references", group: members(base+"fhir/R4/Patient/c", "Patient/d/_history/3"), want: []string{"c", "d"}},
		{name: "references without an id", group: members("Patient", "Patient/", "", "urn:uuid:1"), want: nil},
		{name: "a member without an entity", group: `{"resourceType":"Group","member":[{"period":{}}]}`, want: nil},
		{name: "no members", group: `{"resourceType":"Group"}`, want: nil},
		{name: "at the bound", group: members(many(maxGroupPatients)...), want: ids(maxGroupPatients)},
		{name: "at the bound counting each once", group: members(append(many(maxGroupPatients), "Patient/p0", "Patient/p1")...), want: ids(maxGroupPatients)},
		{name: "over the bound", group: members(many(maxGroupPatients + 1)...), text: "The group has 1001 patients; a group export takes at most 1000 (export Patient/$export instead)"},
		{name: "not JSON", group: `{"member":`, err: true},
		{name: "member not a list", group: `{"member":{"entity":{"reference":"Patient/a"}}}`, err: true},
		{name: "reference not a string", group: `{"member":[{"entity":{"reference":5}}]}`, err: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := groupMembers([]byte(tc.group))
			switch {
			case tc.text != "":
				wantError(t, err, 400, tc.text, "")
			case tc.err:
				if err == nil {
					t.Fatalf("read as %v", got)
				}
			default:
				wantNoError(t, err)
				if !slices.Equal(got, tc.want) {
					t.Fatalf("%d members %v, want %d %v", len(got), got[:min(len(got), 5)], len(tc.want), tc.want[:min(len(tc.want), 5)])
				}
			}
		})
	}
}

func TestActiveExportsLimit(t *testing.T) {
	for _, n := range []int{0, maxActiveExports - 1} {
		wantNoError(t, activeExportsLimit(n))
	}
	for _, n := range []int{maxActiveExports, 5} {
		e := wantError(t, activeExportsLimit(n), 429, fmt.Sprintf("This project has %d exports running; wait for one to finish", n), "")
		if e.Outcome.ID != "too-many-requests" {
			t.Errorf("outcome id %q", e.Outcome.ID)
		}
	}
	// The text is set on a fresh error each time, never on a shared one.
	wantError(t, activeExportsLimit(3), 429, "This project has 3 exports running; wait for one to finish", "")
	if fhir.TooManyRequests().Message() != "Too Many Requests" {
		t.Fatal("the shared outcome was changed")
	}
}

func TestQuerySuffix(t *testing.T) {
	if querySuffix("") != "" || querySuffix("a=b") != "?a=b" || querySuffix("?a") != "??a" {
		t.Fatalf("querySuffix: %q %q %q", querySuffix(""), querySuffix("a=b"), querySuffix("?a"))
	}
}

// jobWith is an AsyncJob as read from the store whose output is the given
// Parameters.
func jobWith(t *testing.T, status string, output any) *resource.AsyncJob {
	t.Helper()
	return asJob(t, map[string]any{"resourceType": "AsyncJob", "status": status, "request": base + "fhir/R4/$export", "transactionTime": "2024-01-01T00:00:00Z", "output": output})
}

// asJob is the AsyncJob a document reads as.
func asJob(t *testing.T, doc map[string]any) *resource.AsyncJob {
	t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var job resource.AsyncJob
	if err := json.Unmarshal(b, &job); err != nil {
		t.Fatal(err)
	}
	return &job
}

func TestExportStateRoundTrip(t *testing.T) {
	files := []exportFile{{Type: "Patient", URL: "Binary/b1", Count: 500}, {Type: "Patient", URL: "Binary/b2", Count: 3}, {Type: "Observation", URL: "Binary/b3", Count: 0}}
	cases := []struct {
		name string
		st   exportState
		done bool
		want exportState
	}{
		{"running", exportState{Files: files, Step: 1, After: "id-9"}, false, exportState{Files: files, Step: 1, After: "id-9"}},
		{"between types", exportState{Files: files, Step: 2}, false, exportState{Files: files, Step: 2}},
		{"not started", exportState{}, false, exportState{}},
		{"done drops the cursor", exportState{Files: files, Step: 3, After: "x"}, true, exportState{Files: files}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := tc.st.output(tc.done)
			// As written, and with its numbers in other JSON forms (1e0, 1.0).
			fromStore := stateOf(jobWith(t, "active", out))
			b, _ := json.Marshal(map[string]any{"output": out})
			var exp, dec resource.AsyncJob
			if err := json.Unmarshal(regexp.MustCompile(`("valueInteger":\d+)`).ReplaceAll(b, []byte("${1}e0")), &exp); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(regexp.MustCompile(`("valueInteger":\d+)`).ReplaceAll(b, []byte("${1}.0")), &dec); err != nil {
				t.Fatal(err)
			}
			for _, got := range []exportState{fromStore, stateOf(&exp), stateOf(&dec)} {
				if !slices.Equal(got.Files, tc.want.Files) || got.Step != tc.want.Step || got.After != tc.want.After {
					t.Fatalf("%+v, want %+v", got, tc.want)
				}
			}
		})
	}
	sameJSON(t, exportState{Files: files[:1], Step: 1}.output(false), `{"resourceType":"Parameters","parameter":[
		{"name":"output","part":[{"name":"type","valueCode":"Patient"},{"name":"url","valueUri":"Binary/b1"},{"name":"count","valueInteger":500}]},
		{"name":"cursor","part":[{"name":"step","valueInteger":1}]}]}`)
	sameJSON(t, exportState{}.output(true), `{"resourceType":"Parameters","parameter":[]}`)
}

func TestStateOf(t *testing.T) {
	cases := []struct {
		name string
		job  *resource.AsyncJob
		want exportState
	}{
		{"no output", asJob(t, map[string]any{"status": "active"}), exportState{}},
		{"output not an object", asJob(t, map[string]any{"output": "x"}), exportState{}},
		{"parameter not a list", asJob(t, map[string]any{"output": map[string]any{"parameter": map[string]any{}}}), exportState{}},
		{"unknown parameters ignored", jobWith(t, "active", map[string]any{"parameter": []any{
			map[string]any{"name": "outcome", "part": []any{map[string]any{"name": "step", "valueInteger": 4}}},
			"not an object",
		}}), exportState{}},
		{"values of the wrong kind read as zero", jobWith(t, "active", map[string]any{"parameter": []any{
			map[string]any{"name": "output", "part": []any{
				map[string]any{"name": "type", "valueCode": 7},
				map[string]any{"name": "count", "valueString": "12"},
			}},
			map[string]any{"name": "cursor", "part": []any{map[string]any{"name": "step", "valueString": "2"}, map[string]any{"name": "after", "valueInteger": 3}}},
		}}), exportState{Files: []exportFile{{}}}},
		{"parts without a value", jobWith(t, "active", map[string]any{"parameter": []any{
			map[string]any{"name": "cursor", "part": []any{map[string]any{"name": "step"}}},
		}}), exportState{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := stateOf(tc.job)
			if !slices.Equal(got.Files, tc.want.Files) || got.Step != tc.want.Step || got.After != tc.want.After {
				t.Fatalf("%+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestExportStateAdvance(t *testing.T) {
	st := exportState{Files: []exportFile{{Type: "Patient", URL: "Binary/b1", Count: 2}}, Step: 0, After: "a"}
	next := st.advance(1, "")
	if next.Step != 1 || next.After != "" || !slices.Equal(next.Files, st.Files) {
		t.Fatalf("advanced to %+v", next)
	}
	// The next state's files are its own: a flush that fails leaves the
	// state it started from as it was.
	next.Files[0].Count = 99
	next.Files = append(next.Files, exportFile{Type: "Observation", URL: "Binary/b2", Count: 1})
	if len(st.Files) != 1 || st.Files[0].Count != 2 || st.Step != 0 || st.After != "a" {
		t.Fatalf("the earlier state changed: %+v", st)
	}
	if got := (exportState{}).advance(0, "x"); got.Files != nil || got.After != "x" {
		t.Fatalf("advanced from nothing to %+v", got)
	}
	if n := next.resources(); n != 100 {
		t.Fatalf("%d resources, want 100", n)
	}
	if n := (exportState{}).resources(); n != 0 {
		t.Fatalf("%d resources in no files", n)
	}
}

func TestChanged(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fhir.PreconditionFailed(), true},
		{fmt.Errorf("update job: %w", fhir.PreconditionFailed()), true},
		{fhir.Conflict("x"), false},
		{fhir.NotFound(), false},
		{errors.New("412"), false},
	}
	for _, tc := range cases {
		if got := changed(tc.err); got != tc.want {
			t.Errorf("changed(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestExportOutcome(t *testing.T) {
	refused := fhir.ForbiddenText("The requester of the export is no longer a member of the project")
	cases := []struct {
		name     string
		stopping bool
		err      error
		attempt  uint64
		want     jobOutcome
	}{
		{"done", false, nil, 1, jobDone},
		{"cancelled", false, errCancelled, 1, jobDone},
		{"cancelled, wrapped", false, fmt.Errorf("flush: %w", errCancelled), 3, jobDone},
		{"a refusal fails at once", false, refused, 1, jobFailed},
		{"a wrapped refusal", false, fmt.Errorf("read: %w", fhir.NotFound()), 1, jobFailed},
		{"a store failure is retried", false, errors.New("connection reset"), 1, jobRetry},
		{"a 500 is retried", false, fhir.Internal(), 2, jobRetry},
		{"a 503 is retried", false, fhir.Unavailable("x"), 1, jobRetry},
		{"on the last attempt it fails", false, errors.New("connection reset"), exportAttempts, jobFailed},
		{"past the last attempt", false, fhir.Internal(), exportAttempts + 1, jobFailed},
		{"stopping pauses whatever happened", true, errors.New("context canceled"), 1, jobPaused},
		{"stopping, even after success", true, nil, exportAttempts, jobPaused},
		{"stopping, even after a refusal", true, refused, 1, jobPaused},
	}
	for _, tc := range cases {
		if got := exportOutcome(tc.stopping, tc.err, tc.attempt); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestExportQuery(t *testing.T) {
	cases := []struct {
		name, typ string
		spec      exportSpec
		want      url.Values
		status    int
	}{
		{name: "everything", typ: "Observation", spec: exportSpec{}, want: url.Values{"_count": {"500"}}},
		{name: "since", typ: "Observation", spec: exportSpec{Since: "2024-01-01T00:00:00Z"}, want: url.Values{"_count": {"500"}, "_lastUpdated": {"ge2024-01-01T00:00:00Z"}}},
		{name: "a group's patients", typ: "Patient", spec: exportSpec{Group: true, Patients: []string{"a", "b"}}, want: url.Values{"_count": {"500"}, "_id": {"a,b"}}},
		{name: "about a group's patients", typ: "Observation", spec: exportSpec{Group: true, Patients: []string{"a", "b"}, Since: "2024-01-01T00:00:00Z"},
			want: url.Values{"_count": {"500"}, "patient": {"Patient/a,Patient/b"}, "_lastUpdated": {"ge2024-01-01T00:00:00Z"}}},
		{name: "a type without a patient", typ: "Organization", spec: exportSpec{Group: true, Patients: []string{"a"}}, status: 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := exportQuery(&tc.spec, tc.typ)
			if tc.status != 0 {
				if fe := fhir.AsError(err); err == nil || fe.Status != tc.status {
					t.Fatalf("error %v, want %d", err, tc.status)
				}
				return
			}
			wantNoError(t, err)
			if q.Canonical.Encode() != tc.want.Encode() {
				t.Fatalf("query %q, want %q", q.Canonical.Encode(), tc.want.Encode())
			}
			// In id order, uncounted: the walk resumes after the last id written.
			if q.Count != exportPage || q.Total != "none" || !slices.Equal(q.Sort, []store.Sort{{Field: store.FieldID}}) {
				t.Fatalf("count %d total %q sort %v", q.Count, q.Total, q.Sort)
			}
		})
	}
}

func TestExportFailure(t *testing.T) {
	cases := []struct {
		name  string
		cause error
		want  string
	}{
		{"a refusal says why", fhir.ForbiddenText("The requester of the export is no longer a member of the project"), "The requester of the export is no longer a member of the project"},
		{"a wrapped refusal", fmt.Errorf("flush: %w", fhir.BadRequest("Invalid value")), "Invalid value"},
		{"a server error says nothing", fhir.Timeout("store timed out at db-3"), "The export failed; start it again"},
		{"any other error says nothing", errors.New("not queued: nats: timeout"), "The export failed; start it again"},
		{"a refusal without text", &fhir.Error{Status: 403, Outcome: fhir.OperationOutcome{Issue: []fhir.Issue{{Severity: "error"}}}}, "The export failed; start it again"},
		{"a refusal without issues", &fhir.Error{Status: 403}, "The export failed; start it again"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg := failureMessage(tc.cause)
			if msg != tc.want {
				t.Fatalf("%q, want %q", msg, tc.want)
			}
			// What is stored reads back as it was written.
			if got := failureText(jobWith(t, "error", failedOutput(msg))); got != msg {
				t.Fatalf("read back %q", got)
			}
		})
	}
	sameJSON(t, failedOutput("why"), `{"resourceType":"Parameters","parameter":[{"name":"outcome","resource":{"resourceType":"OperationOutcome","issue":[{"severity":"error","code":"processing","details":{"text":"why"}}]}}]}`)
	for name, job := range map[string]*resource.AsyncJob{
		"no output":     asJob(t, map[string]any{"status": "error"}),
		"no outcome":    jobWith(t, "error", exportState{}.output(true)),
		"no issues":     jobWith(t, "error", map[string]any{"parameter": []any{map[string]any{"name": "outcome", "resource": map[string]any{"issue": []any{}}}}}),
		"issue no text": jobWith(t, "error", map[string]any{"parameter": []any{map[string]any{"name": "outcome", "resource": map[string]any{"issue": []any{map[string]any{}}}}}}),
	} {
		if got := failureText(job); got != "The export failed" {
			t.Errorf("%s: %q", name, got)
		}
	}
}

func TestExportStatusAnswer(t *testing.T) {
	files := exportState{Files: []exportFile{{Type: "Patient", URL: "Binary/b1", Count: 500}, {Type: "Observation", URL: "Binary/b2", Count: 7}}, Step: 2}
	cases := []struct {
		name   string
		job    *resource.AsyncJob
		status int
		header map[string]string
		body   string
		text   string
	}{
		{name: "running", job: jobWith(t, "active", files.output(false)), status: 202,
			header: map[string]string{"Retry-After": "2", "X-Progress": "507 resources in 2 files"}},
		{name: "just started", job: jobWith(t, "active", nil), status: 202,
			header: map[string]string{"Retry-After": "2", "X-Progress": "0 resources in 0 files"}},
		{name: "completed", job: jobWith(t, "completed", files.output(true)), status: 200,
			header: map[string]string{"Content-Type": bus.JSONContentType},
			body: `{"transactionTime":"2024-01-01T00:00:00Z","request":"` + base + `fhir/R4/$export","requiresAccessToken":false,"error":[],"deleted":[],"output":[
				{"type":"Patient","url":"` + base + `fhir/R4/Binary/b1","count":500},{"type":"Observation","url":"` + base + `fhir/R4/Binary/b2","count":7}]}`},
		{name: "completed empty", job: jobWith(t, "completed", exportState{}.output(true)), status: 200,
			header: map[string]string{"Content-Type": bus.JSONContentType},
			body:   `{"transactionTime":"2024-01-01T00:00:00Z","request":"` + base + `fhir/R4/$export","requiresAccessToken":false,"error":[],"deleted":[],"output":[]}`},
		{name: "failed", job: jobWith(t, "error", failedOutput("Invalid value")), status: 500, text: "Invalid value"},
		{name: "failed without a reason", job: jobWith(t, "error", nil), status: 500, text: "The export failed"},
		{name: "cancelled", job: jobWith(t, "cancelled", exportState{}.output(true)), status: 404, text: "Not found"},
		{name: "no status", job: asJob(t, map[string]any{}), status: 404, text: "Not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := exportStatusAnswer(base, tc.job)
			if tc.text != "" {
				wantError(t, err, tc.status, tc.text, "")
				return
			}
			wantNoError(t, err)
			if resp.Status != tc.status || !equalMaps(resp.Header, tc.header) {
				t.Fatalf("%d %v, want %d %v", resp.Status, resp.Header, tc.status, tc.header)
			}
			if tc.body == "" {
				if len(resp.Body) != 0 {
					t.Fatalf("body %s", resp.Body)
				}
				return
			}
			sameJSON(t, resp.Body, tc.body)
		})
	}
}

func TestCancelled(t *testing.T) {
	cases := []struct {
		status any
		done   bool
		err    bool
	}{
		{"cancelled", true, false},
		{"active", false, false},
		{"completed", false, false},
		{"error", false, true},
		{"accepted", false, true},
		{nil, false, true},
		{7, false, true},
	}
	for _, tc := range cases {
		done, err := cancelled(asJob(t, map[string]any{"status": tc.status}))
		if done != tc.done {
			t.Errorf("%v: done %v", tc.status, done)
		}
		if tc.err {
			wantError(t, err, 404, "Not found", "")
		} else {
			wantNoError(t, err)
		}
	}
}

func TestIsExportJob(t *testing.T) {
	cases := []struct {
		job  *resource.AsyncJob
		want bool
	}{
		{asJob(t, map[string]any{"request": base + "fhir/R4/$export?_type=Patient"}), true},
		{asJob(t, map[string]any{"request": base + "fhir/R4/Group/g/$export"}), true},
		{asJob(t, map[string]any{"request": base + "fhir/R4/Bot/b/$execute"}), false},
		{asJob(t, map[string]any{"request": 5}), false},
		{asJob(t, map[string]any{}), false},
	}
	for _, tc := range cases {
		if got := isExportJob(tc.job); got != tc.want {
			t.Errorf("isExportJob(%v) = %v, want %v", tc.job, got, tc.want)
		}
	}
}
