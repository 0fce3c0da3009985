package standalone

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/presign"
	"github.com/pinion-health/pinion/pkg/repo"
)

// startExport kicks off an export and returns its status URL (a path).
func startExport(t *testing.T, tok, path string) string {
	t.Helper()
	r := do(t, "POST", path, tok, "", nil, "Prefer", "respond-async")
	expect(t, r, 202)
	loc := r.header.Get("Content-Location")
	if !strings.Contains(loc, "/fhir/R4/bulkdata/export/") {
		t.Fatalf("Content-Location %q", loc)
	}
	return loc[strings.Index(loc, "fhir/R4/"):]
}

// exportManifest polls a status URL until the export is done.
func exportManifest(t *testing.T, tok, status string) map[string]any {
	t.Helper()
	var r *response
	eventually(t, 60*time.Second, "the export to finish", func() bool {
		r = do(t, "GET", status, tok, "", nil)
		if r.status == 202 && r.header.Get("X-Progress") == "" {
			t.Fatal("202 without progress")
		}
		return r.status != 202
	})
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	return r.json(t)
}

// exported downloads every file of a manifest, as a Bulk Data client
// does when requiresAccessToken is false (Medplum's manifests carry
// presigned URLs): a signed URL without the token. A caller who may not
// read a file's securityContext (its own profile, for a client whose
// policy does not grant ClientApplication) is answered the reference, as
// by Medplum, and reads it with its token. It returns resources by type,
// and the number of files of each type.
func exported(t *testing.T, tok string, manifest map[string]any) (map[string][]map[string]any, map[string]int) {
	t.Helper()
	if manifest["requiresAccessToken"] != false || manifest["transactionTime"] == nil || manifest["request"] == nil {
		t.Fatalf("manifest: %v", manifest)
	}
	out, files := map[string][]map[string]any{}, map[string]int{}
	for _, o := range manifest["output"].([]any) {
		f := o.(map[string]any)
		typ, link := f["type"].(string), f["url"].(string)
		var r *response
		switch {
		case strings.Contains(link, "/storage/") && strings.Contains(link, "Signature="):
			r = fetchStorage(t, link)
		case strings.HasPrefix(link, "Binary/"):
			r = do(t, "GET", "fhir/R4/"+link, tok, "", nil, "Accept", "*/*")
		default:
			t.Fatalf("file url %q", link)
		}
		expect(t, r, 200)
		if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/fhir+ndjson") {
			t.Fatalf("file content type %q", ct)
		}
		sc := bufio.NewScanner(bytes.NewReader(r.body))
		sc.Buffer(nil, 1<<20)
		n := 0
		for sc.Scan() {
			var res map[string]any
			if err := json.Unmarshal(sc.Bytes(), &res); err != nil || res["resourceType"] != typ {
				t.Fatalf("line of %s file: %s", typ, sc.Bytes())
			}
			out[typ] = append(out[typ], res)
			n++
		}
		if f["count"] != float64(n) {
			t.Fatalf("%s file says %v resources, holds %d", typ, f["count"], n)
		}
		files[typ]++
	}
	return out, files
}

func idsOf(list []map[string]any) []string {
	var out []string
	for _, r := range list {
		out = append(out, r["id"].(string))
	}
	slices.Sort(out)
	return out
}

// The Bulk Data export, as Medplum's client drives it: kick-off, status,
// manifest, NDJSON files; only the caller's project, only what its policy
// lets it read.
func TestBulkExport(t *testing.T) {
	pid, su := adminProject(t, "Export clinic")
	// Exports are of the caller's project: a project admin's.
	admin := projectAdmin(t, su, pid, "export-admin@example.com")
	_, other := project(t, "Export elsewhere")
	expect(t, do(t, "POST", "fhir/R4/Patient", other, "application/fhir+json", patient("Elsewhere")), 201)

	create := func(body []byte, typ string) string {
		r := do(t, "POST", "fhir/R4/"+typ, su, "application/fhir+json", body)
		expect(t, r, 201)
		return r.json(t)["id"].(string)
	}
	inProject := func(res map[string]any) []byte {
		res["meta"] = map[string]any{"project": pid}
		return mustJSON(res)
	}
	var patients, observations []string
	for i := range 12 {
		patients = append(patients, create(inProject(map[string]any{"resourceType": "Patient", "name": []any{map[string]any{"family": fmt.Sprint("Export", i)}}}), "Patient"))
	}
	for i, p := range patients[:6] {
		observations = append(observations, create(inProject(map[string]any{"resourceType": "Observation", "status": "final",
			"code": map[string]any{"text": fmt.Sprint("obs ", i)}, "subject": map[string]any{"reference": "Patient/" + p}}), "Observation"))
	}
	create(inProject(map[string]any{"resourceType": "Organization", "name": "Export org"}), "Organization")
	slices.Sort(patients)
	slices.Sort(observations)

	// System level, two types.
	got, _ := exported(t, admin, exportManifest(t, admin, startExport(t, admin, "fhir/R4/$export?_type=Patient,Observation")))
	if ids := idsOf(got["Patient"]); !slices.Equal(ids, patients) {
		t.Errorf("patients %v, want %v", ids, patients)
	}
	if ids := idsOf(got["Observation"]); !slices.Equal(ids, observations) {
		t.Errorf("observations %v, want %v", ids, observations)
	}
	if len(got) != 2 {
		t.Errorf("types %v, want Patient and Observation", len(got))
	}

	// Everything of the project: the organization too, and the audit
	// trail (the admin's sign-in is in it by now), never a Binary or a
	// membership.
	eventually(t, 15*time.Second, "the admin's sign-in in the trail", func() bool {
		return len(auditEvents(t, admin, "sign-in")) > 0
	})
	got, _ = exported(t, admin, exportManifest(t, admin, startExport(t, admin, "fhir/R4/$export")))
	if len(got["Organization"]) != 1 || len(got["Patient"]) != 12 || got["ProjectMembership"] != nil || got["Binary"] != nil || len(got["AuditEvent"]) == 0 {
		t.Errorf("system export: %d organizations, %d patients, %d audit events, types %d", len(got["Organization"]), len(got["Patient"]), len(got["AuditEvent"]), len(got))
	}
	// The exports so far read every patient's record: the trail names them.
	eventually(t, 15*time.Second, "the exported patients in the trail", func() bool {
		named := map[string]bool{}
		for _, ev := range auditEvents(t, admin, "patient-export") {
			for _, e := range ev["entity"].([]any) {
				if m := e.(map[string]any); m["role"] != nil {
					named[m["what"].(map[string]any)["reference"].(string)] = true
				}
			}
		}
		return len(named) == 12
	})

	// _since leaves out what changed before. The clock must pass on either
	// side of since, as writes are stamped to the millisecond: a clock to
	// pass, not an event to wait for.
	time.Sleep(5 * time.Millisecond)
	since := time.Now().UTC().Format(time.RFC3339Nano)
	time.Sleep(5 * time.Millisecond)
	late := create(inProject(map[string]any{"resourceType": "Patient", "name": []any{map[string]any{"family": "Late"}}}), "Patient")
	got, _ = exported(t, admin, exportManifest(t, admin, startExport(t, admin, "fhir/R4/$export?_type=Patient&_since="+since)))
	if ids := idsOf(got["Patient"]); !slices.Equal(ids, []string{late}) {
		t.Errorf("since: %v, want only %s", ids, late)
	}

	// Patient level: the patients' compartment, not the organization.
	got, _ = exported(t, admin, exportManifest(t, admin, startExport(t, admin, "fhir/R4/Patient/$export")))
	if len(got["Patient"]) != 13 || len(got["Observation"]) != 6 || got["Organization"] != nil {
		t.Errorf("patient export: %d patients, %d observations, organizations %v", len(got["Patient"]), len(got["Observation"]), got["Organization"])
	}

	// Group level: the members and what is about them.
	group := create(inProject(map[string]any{"resourceType": "Group", "type": "person", "actual": true, "member": []any{
		map[string]any{"entity": map[string]any{"reference": "Patient/" + patients[0]}},
		map[string]any{"entity": map[string]any{"reference": "Patient/" + patients[11]}},
	}}), "Group")
	got, _ = exported(t, admin, exportManifest(t, admin, startExport(t, admin, "fhir/R4/Group/"+group+"/$export")))
	wantObs := 0
	for _, o := range got["Observation"] {
		if ref := o["subject"].(map[string]any)["reference"]; ref != "Patient/"+patients[0] && ref != "Patient/"+patients[11] {
			t.Errorf("group export has an observation of %v", ref)
		}
		wantObs++
	}
	if ids := idsOf(got["Patient"]); !slices.Equal(ids, []string{patients[0], patients[11]}) {
		t.Errorf("group patients %v", ids)
	}
	expect(t, do(t, "POST", "fhir/R4/Group/00000000-0000-0000-0000-000000000000/$export", admin, "", nil), 404)

	// A client whose policy grants only Patient exports only patients.
	r := do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", inProject(map[string]any{
		"resourceType": "AccessPolicy", "name": "patients only", "resource": []any{map[string]any{"resourceType": "Patient"}, map[string]any{"resourceType": "AsyncJob"}, map[string]any{"resourceType": "Binary"}}}))
	expect(t, r, 201)
	policy := r.json(t)["id"].(string)
	r = do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "exporter", "accessPolicy": map[string]any{"reference": "AccessPolicy/" + policy}}))
	expect(t, r, 201)
	limited := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	got, _ = exported(t, limited, exportManifest(t, limited, startExport(t, limited, "fhir/R4/$export")))
	if len(got["Patient"]) != 13 || len(got) != 1 {
		t.Errorf("limited export: %d types, %d patients", len(got), len(got["Patient"]))
	}

	// A policy without AsyncJob: the caller could never poll, so no job starts.
	r = do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", inProject(map[string]any{
		"resourceType": "AccessPolicy", "name": "patients, no jobs", "resource": []any{map[string]any{"resourceType": "Patient"}, map[string]any{"resourceType": "Binary"}}}))
	expect(t, r, 201)
	r = do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "no jobs", "accessPolicy": map[string]any{"reference": "AccessPolicy/" + r.json(t)["id"].(string)}}))
	expect(t, r, 201)
	noJobs := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	expectOutcome(t, do(t, "POST", "fhir/R4/$export", noJobs, "", nil), 403, "An export needs read access to AsyncJob, which your access policy does not give")

	// Bad kick-offs.
	for path, text := range map[string]string{
		"fhir/R4/$export?_type=Foo":                           "Unknown resource type: Foo",
		"fhir/R4/$export?_type=Binary":                        "Binary cannot be exported at this level",
		"fhir/R4/Patient/$export?_type=Organization":          "Organization cannot be exported at this level",
		"fhir/R4/$export?_since=yesterday":                    "Invalid _since: want an instant such as 2024-01-02T03:04:05Z",
		"fhir/R4/$export?_typeFilter=Patient%3Factive%3Dtrue": "Unsupported export parameter: _typeFilter",
		"fhir/R4/$export?_outputFormat=text/csv":              "Unsupported _outputFormat: text/csv (only application/fhir+ndjson)",
	} {
		expectOutcome(t, do(t, "POST", path, admin, "", nil), 400, text)
	}
	expect(t, do(t, "GET", "fhir/R4/bulkdata/export/00000000-0000-0000-0000-000000000000", admin, "", nil), 404)
}

// Files are cut where one would no longer download in one answer (about
// 750 KiB with the tests' 1 MiB bus, 4 MiB at most); a cancelled
// export answers 404 and leaves no files.
func TestBulkExportFilesAndCancel(t *testing.T) {
	pid, su := adminProject(t, "Export large")
	admin := projectAdmin(t, su, pid, "export-large@example.com")
	// About 5 MiB of patients: several files.
	for i := range 90 {
		body := bigPatient(fmt.Sprint("Large", i), 58_000)
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		m["meta"] = map[string]any{"project": pid}
		expect(t, do(t, "POST", "fhir/R4/Patient", su, "application/fhir+json", mustJSON(m)), 201)
	}
	manifest := exportManifest(t, admin, startExport(t, admin, "fhir/R4/$export?_type=Patient"))
	got, files := exported(t, admin, manifest)
	if len(got["Patient"]) != 90 || files["Patient"] < 2 {
		t.Fatalf("%d patients in %d files", len(got["Patient"]), files["Patient"])
	}
	if ids := idsOf(got["Patient"]); len(slices.Compact(ids)) != 90 {
		t.Fatalf("a patient exported twice")
	}
	resumeExport(t, admin, pid, manifest, got["Patient"])

	binaries := count(t, su, "Binary", pid)
	status := startExport(t, admin, "fhir/R4/$export?_type=Patient")
	expect(t, do(t, "DELETE", status, admin, "", nil), 202)
	expect(t, do(t, "GET", status, admin, "", nil), 404)
	// The job may have written a file before the cancel: none is left.
	if !waitUntil(10*time.Second, func() bool { return count(t, su, "Binary", pid) == binaries }) {
		t.Fatalf("a cancelled export left %d files", count(t, su, "Binary", pid)-binaries)
	}
}

// resumeExport sets up what a crash after an export's first file leaves
// (the job active, its first file recorded, the walk's position after that
// file's last resource) and delivers the job again, as the stream does
// after a crash: the job goes on from there, keeping the file it had.
func resumeExport(t *testing.T, tok, pid string, done map[string]any, all []map[string]any) {
	t.Helper()
	first := done["output"].([]any)[0].(map[string]any)
	k := int(first["count"].(float64))
	binary := binaryIDOf(first["url"].(string))
	ids := idsOf(all)
	ctx := context.Background()
	job, err := stack.conns.Repo.Create(ctx, repo.Scope{Project: pid}, map[string]any{
		"resourceType": "AsyncJob", "status": "active", "requestTime": time.Now().UTC().Format(time.RFC3339Nano),
		"request": base + "fhir/R4/$export?_type=Patient",
		"output": map[string]any{"resourceType": "Parameters", "parameter": []any{
			map[string]any{"name": "output", "part": []any{
				map[string]any{"name": "type", "valueCode": "Patient"},
				map[string]any{"name": "url", "valueUri": "Binary/" + binary},
				map[string]any{"name": "count", "valueInteger": k},
			}},
			map[string]any{"name": "cursor", "part": []any{
				map[string]any{"name": "step", "valueInteger": 0},
				map[string]any{"name": "after", "valueString": ids[k-1]},
			}},
		}},
	}, repo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	me := do(t, "GET", "auth/me", tok, "", nil).json(t)
	membership := me["membership"].(map[string]any)
	spec := mustJSON(map[string]any{
		"job": job.ID, "project": pid, "types": []string{"Patient"},
		"principal": map[string]any{
			"membership": membership["id"], "project": pid, "admin": true,
			"user": membership["user"].(map[string]any)["reference"], "profile": membership["profile"].(map[string]any)["reference"],
		},
	})
	if _, err := stack.conns.JS.Publish(ctx, "pinion.jobs.export", spec); err != nil {
		t.Fatal(err)
	}
	manifest := exportManifest(t, tok, "fhir/R4/bulkdata/export/"+job.ID)
	if got := manifest["output"].([]any)[0].(map[string]any)["url"].(string); binaryIDOf(got) != binary {
		t.Errorf("the resumed export's first file is %v, want the one written before: Binary/%s", got, binary)
	}
	got, _ := exported(t, tok, manifest)
	if resumed := idsOf(got["Patient"]); !slices.Equal(resumed, ids) {
		t.Fatalf("the resumed export has %d patients (%d distinct), want each of the %d once", len(resumed), len(slices.Compact(resumed)), len(ids))
	}
}

// A manifest's file URLs are signed, as Medplum's are presigned: whoever
// holds one downloads the file without a token until it expires; an
// altered or expired one is refused with an OperationOutcome.
func TestBulkExportManifestSigned(t *testing.T) {
	pid, su := adminProject(t, "Export signed")
	admin := projectAdmin(t, su, pid, "export-signed-admin@example.com")
	expect(t, do(t, "POST", "fhir/R4/Patient", admin, "application/fhir+json", patient("Signed")), 201)
	manifest := exportManifest(t, admin, startExport(t, admin, "fhir/R4/$export?_type=Patient"))
	got, _ := exported(t, admin, manifest)
	if len(got["Patient"]) != 1 {
		t.Fatalf("exported %v", got)
	}
	link := manifest["output"].([]any)[0].(map[string]any)["url"].(string)
	if !strings.Contains(link, "/storage/") {
		t.Fatalf("the requester's file url %q is not signed", link)
	}
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	path := strings.TrimPrefix(u.Path, "/")
	for name, change := range map[string]func(q url.Values){
		"signature altered": func(q url.Values) { q.Set("Signature", strings.Repeat("A", len(q.Get("Signature")))) },
		"expiry moved":      func(q url.Values) { q.Set("Expires", q.Get("Expires")+"0") },
		"no signature":      func(q url.Values) { q.Del("Signature") },
	} {
		t.Run(name, func(t *testing.T) {
			q := u.Query()
			change(q)
			expectOutcome(t, do(t, "GET", path+"?"+q.Encode(), "", "", nil), 403, "Invalid signature")
		})
	}
	t.Run("expired", func(t *testing.T) {
		past := presign.New("http://localhost/", stack.conns.Repo)
		past.Now = func() time.Time { return time.Now().Add(-presign.Lifetime - time.Minute) }
		id, vid, _ := strings.Cut(strings.TrimPrefix(path, "storage/"), "/")
		old, err := past.URL(context.Background(), id, vid)
		if err != nil {
			t.Fatal(err)
		}
		expectOutcome(t, fetchStorage(t, old), 403, "URL has expired")
	})
}
