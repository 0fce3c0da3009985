package standalone

import (
	"strings"
	"testing"
)

// An export's AsyncJob and files hold all its requester may read: another
// member who is not an admin neither reads them (404) nor finds them; the
// requester and the project's admins do. Ordinary Binaries stay shared.
func TestExportKeptForItsRequester(t *testing.T) {
	pid, su := adminProject(t, "Export owners")
	admin := projectAdmin(t, su, pid, "export-owner-admin@example.com")
	memberToken := func(name string) string {
		r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": name}))
		expect(t, r, 201)
		return clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	}
	requester, other := memberToken("requester"), memberToken("other")
	r := do(t, "POST", "fhir/R4/Patient", admin, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "Patient", "name": []any{map[string]any{"family": "Exported"}}, "birthDate": "1970-01-01"}))
	expect(t, r, 201)

	// export runs one and returns its job's id and its files' ids, having
	// downloaded them as the requester.
	export := func(tok string) (string, []string) {
		t.Helper()
		status := startExport(t, tok, "fhir/R4/$export?_type=Patient")
		manifest := exportManifest(t, tok, status)
		got, _ := exported(t, tok, manifest)
		if len(got["Patient"]) != 1 {
			t.Fatalf("the requester's own download: %v", got)
		}
		var files []string
		for _, o := range manifest["output"].([]any) {
			files = append(files, binaryIDOf(o.(map[string]any)["url"].(string)))
		}
		return status[strings.LastIndex(status, "/")+1:], files
	}
	found := func(tok, typ, id string) bool {
		t.Helper()
		r := do(t, "GET", "fhir/R4/"+typ+"?_count=1000", tok, "", nil)
		expect(t, r, 200)
		_, entries := bundleOf(t, r)
		for _, e := range entries {
			if e["id"] == id {
				return true
			}
		}
		r = do(t, "GET", "fhir/R4/"+typ+"?_id="+id, tok, "", nil)
		expect(t, r, 200)
		_, entries = bundleOf(t, r)
		return len(entries) > 0
	}
	// reaches checks what tok may do with an export's job and files.
	reaches := func(who, tok, job string, files []string, want bool) {
		t.Helper()
		status := map[bool]int{true: 200, false: 404}[want]
		for _, c := range []struct{ typ, id string }{{"AsyncJob", job}, {"Binary", files[0]}} {
			if r := do(t, "GET", "fhir/R4/"+c.typ+"/"+c.id, tok, "", nil); r.status != status {
				t.Errorf("%s reads %s/%s: %d, want %d", who, c.typ, c.id, r.status, status)
			}
			if r := do(t, "GET", "fhir/R4/"+c.typ+"/"+c.id+"/_history", tok, "", nil); r.status != status {
				t.Errorf("%s reads the history of %s/%s: %d, want %d", who, c.typ, c.id, r.status, status)
			}
			if got := found(tok, c.typ, c.id); got != want {
				t.Errorf("%s finds %s/%s: %v, want %v", who, c.typ, c.id, got, want)
			}
		}
		if r := do(t, "GET", "fhir/R4/Binary/"+files[0], tok, "", nil, "Accept", "*/*"); r.status != status {
			t.Errorf("%s downloads Binary/%s: %d, want %d", who, files[0], r.status, status)
		}
		if r := do(t, "GET", "fhir/R4/bulkdata/export/"+job, tok, "", nil); r.status != status {
			t.Errorf("%s asks the status of export %s: %d, want %d", who, job, r.status, status)
		}
	}

	adminJob, adminFiles := export(admin)
	reaches("another member", other, adminJob, adminFiles, false)
	reaches("a member who exports too", requester, adminJob, adminFiles, false)

	job, files := export(requester)
	reaches("the requester", requester, job, files, true)
	reaches("an admin", admin, job, files, true)
	reaches("another member", other, job, files, false)
	// Nor can another member change or remove them.
	expect(t, do(t, "DELETE", "fhir/R4/Binary/"+files[0], other, "", nil), 404)
	expect(t, do(t, "DELETE", "fhir/R4/bulkdata/export/"+job, other, "", nil), 404)
	r = do(t, "GET", "fhir/R4/Binary/"+files[0], requester, "", nil)
	expect(t, r, 200)
	if sc := r.json(t)["securityContext"]; sc == nil {
		t.Errorf("an export file's securityContext: %v, want the requester", sc)
	}

	// An ordinary Binary is every member's, as before.
	r = do(t, "POST", "fhir/R4/Binary", other, "text/plain", []byte("shared"))
	expect(t, r, 201)
	shared := r.json(t)["id"].(string)
	expect(t, do(t, "GET", "fhir/R4/Binary/"+shared, requester, "", nil), 200)
	if !found(requester, "Binary", shared) {
		t.Errorf("an ordinary Binary is not found by another member")
	}
	// A member cannot make a Binary kept for someone else.
	expect(t, do(t, "POST", "fhir/R4/Binary", other, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "Binary", "contentType": "text/plain", "data": "eA==",
		"meta": map[string]any{"security": []any{map[string]any{"system": "https://pinion.health/fhir/CodeSystem/owner", "code": "Practitioner/x"}}}})), 403)
}
