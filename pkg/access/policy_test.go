package access

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
)

const project = "p1"

func member(profile string) *bus.Principal {
	return &bus.Principal{User: "User/u1", Profile: profile, Project: project, Membership: "m1"}
}

func js(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func ref(r string) map[string]any { return map[string]any{"reference": r} }

// stored makes a stored resource of the project.
func stored(typ, id, body string) *repo.Resource {
	return &repo.Resource{Type: typ, ID: id, VersionID: "1", Project: project,
		LastUpdated: time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC), JSON: []byte(body)}
}

func compile(t *testing.T, p *bus.Principal, membership map[string]any, policies map[string]any) *Policy {
	t.Helper()
	bodies := map[string][]byte{}
	for k, v := range policies {
		bodies[k] = js(v)
	}
	var m []byte
	if membership != nil {
		m = js(membership)
	}
	pol, err := Compile(p, m, bodies)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

func status(err error) int {
	if err == nil {
		return 0
	}
	var fe *fhir.Error
	if errors.As(err, &fe) {
		return fe.Status
	}
	return -1
}

var portal = map[string]any{
	"resourceType": "AccessPolicy",
	"resource": []any{
		map[string]any{"resourceType": "Patient", "criteria": "Patient?_id=%patient.id", "readonly": true},
		map[string]any{"resourceType": "Observation", "criteria": "Observation?subject=%patient",
			"interaction": []any{"read", "search", "create", "update"}},
	},
}

func TestParameterUnion(t *testing.T) {
	// The same policy twice, with two different patients: a union.
	m := map[string]any{
		"profile": ref("Practitioner/doc"),
		"access": []any{
			map[string]any{"policy": ref("AccessPolicy/portal"), "parameter": []any{
				map[string]any{"name": "patient", "valueReference": ref("Patient/a")}}},
			map[string]any{"policy": ref("AccessPolicy/portal"), "parameter": []any{
				map[string]any{"name": "patient", "valueReference": ref("Patient/b")}}},
		},
	}
	pol := compile(t, member("Practitioner/doc"), m, map[string]any{"AccessPolicy/portal": portal})
	for id, want := range map[string]bool{"a": true, "b": true, "c": false} {
		ok, err := pol.Readable(Read, stored("Patient", id, `{"resourceType":"Patient","id":"`+id+`"}`))
		if err != nil || ok != want {
			t.Errorf("Patient/%s readable %v (%v), want %v", id, ok, err, want)
		}
		obs := stored("Observation", "o-"+id, `{"resourceType":"Observation","status":"final","code":{"text":"x"},"subject":{"reference":"Patient/`+id+`"}}`)
		if ok, _ := pol.Readable(Read, obs); ok != want {
			t.Errorf("Observation of %s readable %v, want %v", id, ok, want)
		}
	}
	f, ok := pol.SearchFilter("Patient", Search)
	if !ok || len(f) != 1 || f[0].Op != store.OpOr || len(f[0].Sub) != 2 {
		t.Fatalf("search filter %v %v, want an $or of two", f, ok)
	}
	// A type the policy does not name, and a write a readonly entry does not grant.
	if s := status(pol.Allow("Practitioner", Read)); s != 403 {
		t.Errorf("Practitioner read: %d", s)
	}
	if s := status(pol.Allow("Patient", Update)); s != 403 {
		t.Errorf("Patient update: %d", s)
	}
	if s := status(pol.Allow("Observation", Patch)); s != 0 {
		t.Errorf("Observation patch (an update): %d", s)
	}
	if s := status(pol.Allow("Observation", Delete)); s != 403 {
		t.Errorf("Observation delete: %d", s)
	}
}

func TestPatientFromProfile(t *testing.T) {
	// %patient is the profile when it is a Patient; %profile always.
	m := map[string]any{"profile": ref("Patient/me"), "accessPolicy": ref("AccessPolicy/portal")}
	pol := compile(t, member("Patient/me"), m, map[string]any{"AccessPolicy/portal": portal})
	if ok, _ := pol.Readable(Read, stored("Patient", "me", `{"resourceType":"Patient"}`)); !ok {
		t.Error("own Patient not readable")
	}
	if ok, _ := pol.Readable(Read, stored("Patient", "other", `{"resourceType":"Patient"}`)); ok {
		t.Error("another Patient readable")
	}
	// A practitioner's profile is no patient: %patient stays unresolved and
	// the entries match nothing, though the types are named.
	m["profile"] = ref("Practitioner/doc")
	pol = compile(t, member("Practitioner/doc"), m, map[string]any{"AccessPolicy/portal": portal})
	if ok, _ := pol.Readable(Read, stored("Patient", "doc", `{"resourceType":"Patient"}`)); ok {
		t.Error("unresolved patient parameter matched")
	}
	if _, ok := pol.SearchFilter("Patient", Search); ok {
		t.Error("unresolved patient parameter searches")
	}
	if s := status(pol.Allow("Patient", Read)); s != 0 {
		t.Errorf("type named but unresolved: %d, want allowed (404s follow)", s)
	}
}

func TestStringParameterAndEscaping(t *testing.T) {
	pol := compile(t, member("Practitioner/doc"), map[string]any{
		"access": []any{map[string]any{"policy": ref("AccessPolicy/tasks"), "parameter": []any{
			map[string]any{"name": "status", "valueString": "ready"},
			map[string]any{"name": "owner", "valueString": "a,b"},
		}}},
	}, map[string]any{"AccessPolicy/tasks": map[string]any{"resource": []any{
		map[string]any{"resourceType": "Task", "criteria": "Task?status=%status"},
		map[string]any{"resourceType": "Patient", "criteria": "Patient?family=%owner"},
	}}})
	task := func(st string) *repo.Resource {
		return stored("Task", "t", `{"resourceType":"Task","status":"`+st+`","intent":"order"}`)
	}
	if ok, _ := pol.Readable(Read, task("ready")); !ok {
		t.Error("ready task hidden")
	}
	if ok, _ := pol.Readable(Read, task("completed")); ok {
		t.Error("completed task visible")
	}
	// A comma in a value is one value, not two alternatives.
	f, _ := pol.SearchFilter("Patient", Search)
	if s := fmt.Sprint(f); !strings.Contains(s, `a,b`) || strings.Contains(s, ` in `) {
		t.Errorf("comma split the value: %v", f)
	}
}

func TestAdminAndFixedRules(t *testing.T) {
	clinician := map[string]any{"resource": []any{
		map[string]any{"resourceType": "Patient"},
		map[string]any{"resourceType": "ProjectMembership"}, // never granted by a policy
		map[string]any{"resourceType": "Login"},
	}}
	m := map[string]any{"profile": ref("Practitioner/doc"), "accessPolicy": ref("AccessPolicy/c")}
	pols := map[string]any{"AccessPolicy/c": clinician}

	nonAdmin := compile(t, member("Practitioner/doc"), m, pols)
	admin := member("Practitioner/doc")
	admin.Admin = true
	adm := compile(t, admin, m, pols)
	noPolicy := compile(t, member("Practitioner/doc"), nil, nil)
	adminNoPolicy := compile(t, admin, nil, nil)
	auditor := compile(t, member("Practitioner/aud"), map[string]any{"profile": ref("Practitioner/aud"), "accessPolicy": ref("AccessPolicy/a")},
		map[string]any{"AccessPolicy/a": map[string]any{"resource": []any{map[string]any{"resourceType": "AuditEvent"}}}})
	super := compile(t, &bus.Principal{SuperAdmin: true, Project: "sp"}, nil, nil)

	cases := []struct {
		name   string
		pol    *Policy
		typ    string
		id     string
		i      Interaction
		status int
	}{
		{"policy grants Patient", nonAdmin, "Patient", "", Create, 0},
		{"policy lacks Observation", nonAdmin, "Observation", "", Read, 403},
		{"non-admin: membership entry dropped", nonAdmin, "ProjectMembership", "", Search, 403},
		{"protected type", nonAdmin, "Login", "", Read, 403},
		{"non-admin reads own User", nonAdmin, "User", "u1", Read, 0},
		{"non-admin updates own User", nonAdmin, "User", "u1", Update, 0},
		{"non-admin reads another User", nonAdmin, "User", "u2", Read, 403},
		{"non-admin searches User", nonAdmin, "User", "", Search, 403},
		{"non-admin reads Project", nonAdmin, "Project", project, Read, 403},
		{"no policy: the audit trail unread", noPolicy, "AuditEvent", "", Search, 403},
		{"no policy: an audit event unread", noPolicy, "AuditEvent", "e1", Read, 403},
		{"no policy: an audit event written (as Medplum's apps do)", noPolicy, "AuditEvent", "", Create, 0},
		{"admin without a policy reads the audit trail", adminNoPolicy, "AuditEvent", "", Search, 0},
		{"an admin's policy without AuditEvent", adm, "AuditEvent", "", Search, 403},
		{"a policy naming AuditEvent", auditor, "AuditEvent", "", Search, 0},
		{"super admin reads the audit trail", super, "AuditEvent", "", Search, 0},
		{"admin's policy still applies", adm, "Observation", "", Read, 403},
		{"admin reads memberships", adm, "ProjectMembership", "m2", Read, 0},
		{"admin searches users", adm, "User", "", Search, 0},
		{"admin cannot write memberships", adm, "ProjectMembership", "m2", Update, 403},
		{"admin cannot write another User", adm, "User", "u2", Patch, 403},
		{"admin updates own User", adm, "User", "u1", Update, 0},
		{"admin reads Project", adm, "Project", project, Read, 0},
		{"admin cannot delete Project", adm, "Project", project, Delete, 403},
		{"no policy: ordinary types", noPolicy, "Observation", "", Delete, 0},
		{"no policy: AccessPolicy is read, not written", noPolicy, "AccessPolicy", "", Create, 403},
		{"no policy: Bot is read", noPolicy, "Bot", "b1", Read, 0},
		{"no policy: no memberships", noPolicy, "ProjectMembership", "", Read, 403},
		{"super admin", super, "ProjectMembership", "x", Delete, 0},
		{"super admin protected", super, "Login", "x", Read, 0},
	}
	for _, tc := range cases {
		if got := status(tc.pol.AllowResource(tc.typ, tc.id, tc.i)); got != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.status)
		}
	}
	// The admin sees only its own project's Project, with secrets hidden.
	proj := stored("Project", project, `{"resourceType":"Project","name":"P","superAdmin":false,"strictMode":true,"systemSecret":[{"name":"k"}]}`)
	proj.Project = project
	if ok, _ := adm.Readable(Read, proj); !ok {
		t.Fatal("admin cannot read own project")
	}
	other := stored("Project", "p2", `{"resourceType":"Project","name":"Q"}`)
	other.Project = "p2"
	if ok, _ := adm.Readable(Read, other); ok {
		t.Error("admin reads another project")
	}
	red, err := adm.Redact(proj)
	if err != nil || strings.Contains(string(red.JSON), "systemSecret") || strings.Contains(string(red.JSON), "strictMode") || !strings.Contains(string(red.JSON), `"name":"P"`) {
		t.Errorf("redacted project: %s %v", red.JSON, err)
	}
	if string(proj.JSON) == string(red.JSON) {
		t.Error("the stored resource was changed")
	}
	// Own User: the scope reaches a server-scoped user; email is read-only.
	if sc := nonAdmin.Scope("User", "u1"); !sc.AllProjects {
		t.Error("own User not reachable outside the project")
	}
	if sc := nonAdmin.Scope("User", "u2"); sc.AllProjects || sc.Project != project {
		t.Errorf("another User's scope: %+v", sc)
	}
	me := &repo.Resource{Type: "User", ID: "u1", VersionID: "1", JSON: []byte(`{"resourceType":"User","id":"u1","email":"a@x","firstName":"A"}`)}
	after := map[string]any{"resourceType": "User", "id": "u1", "email": "b@x", "firstName": "A"}
	if err := nonAdmin.Write(Update, "User", me, after, ""); status(err) != 400 || !strings.Contains(err.Error(), "email") {
		t.Errorf("email change: %v", err)
	}
	after = map[string]any{"resourceType": "User", "id": "u1", "email": "a@x", "firstName": "B"}
	if err := nonAdmin.Write(Update, "User", me, after, ""); err != nil {
		t.Errorf("name change: %v", err)
	}
}

func TestWriteChecks(t *testing.T) {
	m := map[string]any{"profile": ref("Patient/me"), "accessPolicy": ref("AccessPolicy/portal")}
	pol := compile(t, member("Patient/me"), m, map[string]any{"AccessPolicy/portal": portal})
	obs := func(subject string) map[string]any {
		return map[string]any{"resourceType": "Observation", "status": "final", "code": map[string]any{"text": "x"},
			"subject": ref(subject)}
	}
	storedObs := func(id, subject string) *repo.Resource {
		return stored("Observation", id, string(js(obs(subject))))
	}
	cases := []struct {
		name   string
		i      Interaction
		typ    string
		before *repo.Resource
		after  map[string]any
		status int
	}{
		{"create own", Create, "Observation", nil, obs("Patient/me"), 0},
		{"create for another", Create, "Observation", nil, obs("Patient/other"), 403},
		{"update own", Update, "Observation", storedObs("o1", "Patient/me"), obs("Patient/me"), 0},
		{"update moves it away", Update, "Observation", storedObs("o1", "Patient/me"), obs("Patient/other"), 403},
		{"update another's", Update, "Observation", storedObs("o2", "Patient/other"), obs("Patient/me"), 404},
		{"delete not granted", Delete, "Observation", storedObs("o1", "Patient/me"), nil, 403},
		{"readonly entry", Update, "Patient", stored("Patient", "me", `{"resourceType":"Patient"}`), map[string]any{"resourceType": "Patient", "id": "me"}, 403},
	}
	for _, tc := range cases {
		if got := status(pol.Write(tc.i, tc.typ, tc.before, tc.after, project)); got != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.status)
		}
	}
}

func TestHiddenAndReadonlyFields(t *testing.T) {
	pol := compile(t, member("Practitioner/doc"), map[string]any{"accessPolicy": ref("AccessPolicy/f")},
		map[string]any{"AccessPolicy/f": map[string]any{"resource": []any{
			map[string]any{"resourceType": "Patient", "criteria": "Patient?gender=female",
				"hiddenFields": []any{"birthDate", "identifier.value"}, "readonlyFields": []any{"name", "meta.tag"}},
			// A later entry's field rules never apply where the first matches.
			map[string]any{"resourceType": "Patient", "hiddenFields": []any{"gender"}},
		}}})
	body := `{"resourceType":"Patient","id":"a","gender":"female","birthDate":"1990-01-01","name":[{"family":"X"}],` +
		`"identifier":[{"system":"s","value":"secret"}],"meta":{"versionId":"1","tag":[{"code":"t"}]}}`
	cur := stored("Patient", "a", body)
	red, err := pol.Redact(cur)
	if err != nil {
		t.Fatal(err)
	}
	got := string(red.JSON)
	if strings.Contains(got, "birthDate") || strings.Contains(got, "secret") || !strings.Contains(got, `"system":"s"`) || !strings.Contains(got, "gender") {
		t.Fatalf("redacted: %s", got)
	}
	// A male patient falls to the second entry: gender hidden, birthDate shown.
	male := stored("Patient", "b", `{"resourceType":"Patient","gender":"male","birthDate":"1980-01-01"}`)
	if red, _ := pol.Redact(male); strings.Contains(string(red.JSON), "gender") || !strings.Contains(string(red.JSON), "birthDate") {
		t.Fatalf("second entry: %s", red.JSON)
	}

	// An update as the caller saw it keeps the hidden fields.
	after, _ := fhir.Decode(red.JSON)
	after["active"] = true
	delete(after, "meta")
	after["meta"] = map[string]any{"tag": []any{map[string]any{"code": "t"}}}
	if err := pol.Write(Update, "Patient", cur, after, project); err != nil {
		t.Fatal(err)
	}
	if after["birthDate"] != "1990-01-01" || valueAt(after, splitPath("identifier.value")).([]any)[0] != "secret" {
		t.Fatalf("hidden fields not restored: %v", after)
	}
	// Setting a hidden field is undone, not refused.
	after["birthDate"] = "2000-01-01"
	if err := pol.Write(Update, "Patient", cur, after, project); err != nil || after["birthDate"] != "1990-01-01" {
		t.Fatalf("hidden field overwritten: %v %v", after["birthDate"], err)
	}
	// Read-only fields: a change is 400 naming the field.
	after["name"] = []any{map[string]any{"family": "Y"}}
	err = pol.Write(Update, "Patient", cur, after, project)
	var fe *fhir.Error
	if !errors.As(err, &fe) || fe.Status != 400 || fe.Outcome.Issue[0].Expression[0] != "name" || !strings.Contains(fe.Message(), "Medplum") {
		t.Fatalf("read-only name: %v", err)
	}
	after["name"] = []any{map[string]any{"family": "X"}}
	after["meta"] = map[string]any{}
	if err := pol.Write(Update, "Patient", cur, after, project); status(err) != 400 || !strings.Contains(err.Error(), "meta.tag") {
		t.Fatalf("read-only meta.tag: %v", err)
	}
	// A create cannot set hidden fields, nor read-only ones.
	create := map[string]any{"resourceType": "Patient", "gender": "female", "birthDate": "2001-01-01"}
	if err := pol.Write(Create, "Patient", nil, create, project); err != nil || create["birthDate"] != nil {
		t.Fatalf("create with a hidden field: %v %v", create, err)
	}
	create["name"] = []any{map[string]any{"family": "Z"}}
	if err := pol.Write(Create, "Patient", nil, create, project); status(err) != 400 {
		t.Fatalf("create with a read-only field: %v", err)
	}
}

func TestCompileErrors(t *testing.T) {
	bad := []map[string]any{
		{"resourceType": "Patient", "criteria": "Observation?status=final"},
		{"resourceType": "Patient", "criteria": "Patient?colour=blue"},
		{"resourceType": "Patient", "interaction": []any{"fly"}},
		{"criteria": "Patient?_id=1"},
	}
	for _, r := range bad {
		_, err := Compile(member("Practitioner/doc"), js(map[string]any{"accessPolicy": ref("AccessPolicy/x")}),
			map[string][]byte{"AccessPolicy/x": js(map[string]any{"resource": []any{r}})})
		if err == nil {
			t.Errorf("%v compiled", r)
		}
	}
	// '*' with criteria is an entry for the criteria's type.
	pol := compile(t, member("Practitioner/doc"), map[string]any{"accessPolicy": ref("AccessPolicy/x")},
		map[string]any{"AccessPolicy/x": map[string]any{"resource": []any{
			map[string]any{"resourceType": "*", "criteria": "Patient?gender=male"}}}})
	if pol.Allow("Patient", Read) != nil || pol.Allow("Observation", Read) == nil {
		t.Errorf("'*' with criteria: %s", pol)
	}
}
