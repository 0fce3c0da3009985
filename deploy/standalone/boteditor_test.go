package standalone

import (
	"strings"
	"testing"
)

// What Medplum's web app (5.0.10) sends from its admin pages and bot editor
// (issue 37, item 7).

// editorSave is the bot editor's Save: medplum.createAttachment for the
// TypeScript source and for the compiled JavaScript (a raw Binary each,
// with _filename), then one JSON Patch that adds both attachments.
func editorSave(t *testing.T, token, id, source, compiled, outName string) *response {
	t.Helper()
	attach := func(data, filename, contentType string) map[string]any {
		r := do(t, "POST", "fhir/R4/Binary?_filename="+filename, token, contentType, []byte(data))
		expect(t, r, 201)
		bin := r.json(t)
		if bin["contentType"] != contentType {
			t.Fatalf("Binary content type %v, want %s", bin["contentType"], contentType)
		}
		return map[string]any{"contentType": contentType, "url": bin["url"], "title": filename}
	}
	src := attach(source, "index.ts", "text/typescript")
	exe := attach(compiled, outName, "text/javascript")
	return do(t, "PATCH", "fhir/R4/Bot/"+id, token, "application/json-patch+json", mustJSON([]any{
		map[string]any{"op": "add", "path": "/sourceCode", "value": src},
		map[string]any{"op": "add", "path": "/executableCode", "value": exe},
	}))
}

// binaryIDOf is the Binary an attachment url names, as the bot editor finds
// it ("Binary/<id>", or a signed storage URL).
func binaryIDOf(u string) string {
	if _, rest, ok := strings.Cut(u, "/storage/"); ok {
		id, _, _ := strings.Cut(rest, "/")
		return id
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(u, "Binary/"), "/")
	return id
}

// The editor's Save, Deploy (a POST without a body or a content type) and
// Execute, in that order, as a project admin; a member who is no admin
// changes neither the code nor the deployment.
func TestBotEditorSaveDeployExecute(t *testing.T) {
	pid, su := adminProject(t, "Bot editor")
	admin := projectAdmin(t, su, pid, "bot-editor-admin@example.com")
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "editor plain member"}))
	expect(t, r, 201)
	plain := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))

	// CreateBotPage's body: the description field left empty.
	r = do(t, "POST", "admin/projects/"+pid+"/bot", admin, "application/json", []byte(`{"name":"edited","description":""}`))
	expect(t, r, 201)
	id := r.json(t)["id"].(string)
	execute := func(token string) *response {
		return do(t, "POST", "fhir/R4/Bot/"+id+"/$execute", token, "application/fhir+json",
			[]byte(`{"resourceType":"Patient","name":[{"given":["Alice"],"family":"Smith"}]}`))
	}
	deploy := func(token string) *response {
		return do(t, "POST", "fhir/R4/Bot/"+id+"/$deploy", token, "", nil)
	}
	expectOutcome(t, deploy(admin), 400, "Bot missing executable code")

	// What the editor's TypeScript compiler makes of the source for a
	// vmcontext bot: CommonJS.
	source := "export async function handler(medplum: MedplumClient, event: BotEvent): Promise<any> {\n  return 'saved ' + event.input.name[0].family;\n}\n"
	compiled := "\"use strict\";\nObject.defineProperty(exports, \"__esModule\", { value: true });\nexports.handler = handler;\nasync function handler(medplum, event) {\n    return 'saved ' + event.input.name[0].family;\n}\n"
	r = editorSave(t, admin, id, source, compiled, "index.cjs")
	expect(t, r, 200)
	saved := r.json(t)
	src, _ := saved["sourceCode"].(map[string]any)
	if src["contentType"] != "text/typescript" || src["title"] != "index.ts" || src["url"] == nil {
		t.Fatalf("sourceCode: %v", src)
	}
	r = do(t, "GET", "fhir/R4/Binary/"+binaryIDOf(src["url"].(string)), admin, "", nil, "Accept", "*/*")
	expect(t, r, 200)
	if string(r.body) != source {
		t.Fatalf("source read back: %q", r.body)
	}

	expect(t, deploy(admin), 200)
	r = execute(admin)
	expect(t, r, 200)
	if !strings.Contains(string(r.body), "saved Smith") {
		t.Fatalf("execute after deploy: %s", r.body)
	}

	// Code saved as an ES module (the editor's output for other runtimes)
	// runs once deployed: Deploy compiles what was saved.
	esm := "export async function handler(medplum, event) {\n  return 'module ' + event.input.name[0].family;\n}\n"
	expect(t, editorSave(t, admin, id, source, esm, "index.mjs"), 200)
	expect(t, deploy(admin), 200)
	r = execute(admin)
	expect(t, r, 200)
	if !strings.Contains(string(r.body), "module Smith") {
		t.Fatalf("execute after deploying a module: %s", r.body)
	}
	// Saved code that does not compile is refused at Deploy, saying where.
	expect(t, editorSave(t, admin, id, source, "exports.handler = async () => {", "index.cjs"), 200)
	expectOutcome(t, deploy(admin), 400, "Syntax error at line 1")

	// A deploy with code inline works as before.
	expect(t, do(t, "POST", "fhir/R4/Bot/"+id+"/$deploy", admin, "application/json",
		mustJSON(map[string]any{"code": "exports.handler = async () => 'inline';", "filename": "inline.js"})), 200)
	r = execute(admin)
	expect(t, r, 200)
	if string(r.body) != "inline" {
		t.Fatalf("execute after an inline deploy: %s", r.body)
	}

	// A member who is no admin may not change the code, nor deploy it.
	r = do(t, "GET", "fhir/R4/Bot/"+id, admin, "", nil)
	expect(t, r, 200)
	version := r.json(t)["meta"].(map[string]any)["versionId"]
	expectOutcome(t, do(t, "PATCH", "fhir/R4/Bot/"+id, plain, "application/json-patch+json", mustJSON([]any{
		map[string]any{"op": "add", "path": "/executableCode", "value": map[string]any{"contentType": "text/javascript", "url": "Binary/x", "title": "index.cjs"}},
	})), 403, "Only project administrators can change Bot resources")
	expectOutcome(t, deploy(plain), 403, "Only project administrators can change Bot resources")
	r = do(t, "GET", "fhir/R4/Bot/"+id, admin, "", nil)
	if v := r.json(t)["meta"].(map[string]any)["versionId"]; v != version {
		t.Fatal("a member who is no admin changed the bot")
	}
}

// A super admin's editor saves the code in the super admin's own project;
// Deploy reads it as the caller and copies it into the bot's project. An
// admin's deploy never reads another project's Binary.
func TestBotEditorAcrossProjects(t *testing.T) {
	pid, su := adminProject(t, "Bot editor, super admin")
	admin := projectAdmin(t, su, pid, "bot-editor-across@example.com")
	r := do(t, "POST", "admin/projects/"+pid+"/bot", su, "application/json", []byte(`{"name":"edited by the super admin"}`))
	expect(t, r, 201)
	id := r.json(t)["id"].(string)
	expect(t, editorSave(t, su, id, "", "exports.handler = async () => 'from the super admin';", "index.cjs"), 200)
	expect(t, do(t, "POST", "fhir/R4/Bot/"+id+"/$deploy", su, "", nil), 200)
	r = do(t, "POST", "fhir/R4/Bot/"+id+"/$execute", admin, "text/plain", []byte("x"))
	expect(t, r, 200)
	if string(r.body) != "from the super admin" {
		t.Fatalf("execute: %s", r.body)
	}

	// The super admin's Binary is not the project admin's to deploy.
	r = do(t, "POST", "fhir/R4/Binary", su, "text/javascript", []byte("exports.handler = async () => 'elsewhere';"))
	expect(t, r, 201)
	elsewhere := r.json(t)["url"].(string)
	expect(t, do(t, "PATCH", "fhir/R4/Bot/"+id, admin, "application/json-patch+json", mustJSON([]any{
		map[string]any{"op": "add", "path": "/executableCode", "value": map[string]any{"contentType": "text/javascript", "url": elsewhere, "title": "index.cjs"}},
	})), 200)
	expectOutcome(t, do(t, "POST", "fhir/R4/Bot/"+id+"/$deploy", admin, "", nil), 400, "Bot missing executable code")
}
