package membership

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
)

const storedMember = `{
	"resourceType":"ProjectMembership","id":"m-1",
	"meta":{"versionId":"1","lastUpdated":"2026-11-25T12:00:00Z"},
	"project":{"reference":"Project/p-1","display":"Clinic"},
	"user":{"reference":"User/u-1","display":"ada@example.com"},
	"profile":{"reference":"Practitioner/pr-1","display":"Ada Lovelace"},
	"admin":false,
	"extension":[{"url":"https://example.com/rank","valueDecimal":1.50}]
}`

func TestCheckMemberChange(t *testing.T) {
	const notHere = " of a membership cannot be changed here; only admin, accessPolicy, access and active can"
	cases := []struct {
		name       string
		next       string // fields set on the stored membership; null removes
		text, expr string
	}{
		{"unchanged", `{}`, "", ""},
		{"promote", `{"admin":true}`, "", ""},
		{"policies", `{"accessPolicy":{"reference":"AccessPolicy/1"},"access":[{"policy":{"reference":"AccessPolicy/2"}}]}`, "", ""},
		{"deactivate", `{"active":false}`, "", ""},
		{"meta, which the server keeps", `{"meta":{"versionId":"9"}}`, "", ""},
		{"meta removed", `{"meta":null}`, "", ""},
		{"admin removed", `{"admin":null}`, "", ""},
		// Numbers compare by value: a client re-sends 1.5 for the stored 1.50.
		{"number respelled", `{"extension":[{"url":"https://example.com/rank","valueDecimal":1.5}]}`, "", ""},

		{"profile", `{"profile":{"reference":"Practitioner/someone-else"}}`, "Field profile" + notHere, "profile"},
		{"profile display", `{"profile":{"reference":"Practitioner/pr-1","display":"Someone"}}`, "Field profile" + notHere, "profile"},
		{"user", `{"user":{"reference":"User/someone-else"}}`, "Field user" + notHere, "user"},
		{"project", `{"project":{"reference":"Project/other"}}`, "Field project" + notHere, "project"},
		{"id", `{"id":"m-2"}`, "Field id" + notHere, "id"},
		{"resource type", `{"resourceType":"Patient"}`, "Field resourceType" + notHere, "resourceType"},
		{"field removed", `{"user":null}`, "Field user" + notHere, "user"},
		{"field added", `{"externalId":"e-1"}`, "Field externalId" + notHere, "externalId"},
		{"invitedBy added", `{"invitedBy":{"reference":"User/x"}}`, "Field invitedBy" + notHere, "invitedBy"},
		{"number changed", `{"extension":[{"url":"https://example.com/rank","valueDecimal":1.51}]}`, "Field extension" + notHere, "extension"},
		{"first field by name", `{"user":{"reference":"User/x"},"profile":{"reference":"Practitioner/x"},"extension":[]}`, "Field extension" + notHere, "extension"},

		{"admin as text", `{"admin":"true"}`, "admin must be a boolean", "admin"},
		{"admin a number", `{"admin":1}`, "admin must be a boolean", "admin"},
		{"a forbidden change is named before a bad admin", `{"admin":"yes","user":{"reference":"User/x"}}`, "Field user" + notHere, "user"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := decode(t, storedMember)
			next := decode(t, storedMember)
			for k, v := range decode(t, tc.next) {
				if v == nil {
					delete(next, k)
				} else {
					next[k] = v
				}
			}
			err := checkMemberChange(old, next)
			if tc.text == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			wantError(t, err, 400, tc.text, tc.expr)
		})
	}
}

// An explicit null admin is not a boolean.
func TestCheckMemberChangeNullAdmin(t *testing.T) {
	old := decode(t, storedMember)
	next := decode(t, storedMember)
	next["admin"] = nil
	wantError(t, checkMemberChange(old, next), 400, "admin must be a boolean", "admin")
}

func TestNormalize(t *testing.T) {
	cases := []struct {
		name  string
		a, b  string
		equal bool
	}{
		{"same number, other spelling", `{"v":1.0}`, `{"v":1}`, true},
		{"exponent", `{"v":1e2}`, `{"v":100}`, true},
		{"different number", `{"v":1}`, `{"v":2}`, false},
		{"number and text", `{"v":1}`, `{"v":"1"}`, false},
		{"key order", `{"v":{"a":1,"b":2}}`, `{"v":{"b":2,"a":1}}`, true},
		{"list order matters", `{"v":[1,2]}`, `{"v":[2,1]}`, false},
		{"null and absent", `{"v":null}`, `{}`, true},
		{"empty list and absent", `{"v":[]}`, `{}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := decode(t, tc.a)["v"], decode(t, tc.b)["v"]
			err := checkMemberChange(map[string]any{"v": a}, map[string]any{"v": b})
			if (err == nil) != tc.equal {
				t.Errorf("%s vs %s: equal %v, want %v", tc.a, tc.b, err == nil, tc.equal)
			}
		})
	}
}

// memberParams are the route parameters of a membership.
func memberParams(projectID, id string) map[string]string {
	return map[string]string{"projectId": projectID, "membershipId": id}
}

// Every membership route reads the membership the same way: within the
// project in the path, for that project's admins.
func TestMemberAccess(t *testing.T) {
	a, b := fixtureProject(t, nil), fixtureProject(t, nil)
	inA := fixtureMember(t, a, "User/"+uuid.NewString(), fixturePractitioner(t, a), nil)
	inB := fixtureMember(t, b, "User/"+uuid.NewString(), fixturePractitioner(t, b), nil)
	gone := fixtureMember(t, a, "User/"+uuid.NewString(), fixturePractitioner(t, a), nil)
	if err := stack.repo.Delete(testCtx(t), repo.AllProjects, "ProjectMembership", gone); err != nil {
		t.Fatal(err)
	}
	handlers := map[string]bus.Handler{
		"get": stack.svc.getMember, "update": stack.svc.updateMember, "patch": stack.svc.patchMember, "delete": stack.svc.deleteMember,
	}
	cases := []struct {
		name        string
		by          *bus.Principal
		project, id string
		status      int
		text        string
	}{
		{"anonymous", nil, a, inA, 401, "Unauthorized"},
		{"a member, not an admin", memberOf(a), a, inA, 403, "Forbidden"},
		{"another project's admin", adminOf(b), a, inA, 403, "Forbidden"},
		{"a membership of another project, by its id", adminOf(a), a, inB, 404, "Not found"},
		{"a membership of another project, for a super admin", superAdmin(), a, inB, 404, "Not found"},
		{"no such membership", adminOf(a), a, uuid.NewString(), 404, "Not found"},
		{"a deleted membership", adminOf(a), a, gone, 410, "Gone"},
	}
	for _, tc := range cases {
		for name, h := range handlers {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				resp, err := call(t, h, request(tc.by, memberParams(tc.project, tc.id), "application/json-patch+json", `[]`))
				wantFHIRError(t, resp, err, tc.status, tc.text, "")
			})
		}
	}
	// Nothing above changed either membership.
	for _, id := range []string{inA, inB} {
		if v := readDoc(t, "ProjectMembership", id)["meta"].(map[string]any)["versionId"]; v == "" {
			t.Errorf("%s: no version", id)
		}
		if e := sessionEntry(t, id); e == nil || !e.Active {
			t.Errorf("%s: session entry %+v", id, e)
		}
	}

	resp, err := call(t, stack.svc.getMember, request(adminOf(a), memberParams(a, inA), "", ""))
	if err != nil {
		t.Fatal(err)
	}
	if stored, _ := stack.repo.Read(testCtx(t), repo.AllProjects, "ProjectMembership", inA); resp.Status != 200 || string(resp.Body) != string(stored.JSON) {
		t.Errorf("get: %d %s\nwant the stored %s", resp.Status, resp.Body, stored.JSON)
	}
}

func TestUpdateMember(t *testing.T) {
	project, other := fixtureProject(t, nil), fixtureProject(t, nil)
	policy, foreign := fixturePolicy(t, project), fixturePolicy(t, other)
	user, profile := "User/"+uuid.NewString(), fixturePractitioner(t, project)
	id := fixtureMember(t, project, user, profile, nil)
	by := adminOf(project)
	stored := func() map[string]any { return readDoc(t, "ProjectMembership", id) }
	// with is the stored membership as JSON, fields set (null removes).
	with := func(fields string) string {
		m := stored()
		for k, v := range decode(t, fields) {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		b, _ := json.Marshal(m)
		return string(b)
	}

	refusals := []struct {
		name, contentType, body string
		status                  int
		text, expr              string
	}{
		{"not JSON", "text/plain", with(`{"admin":true}`), 415, "Unsupported media type", ""},
		{"a JSON patch", "application/json-patch+json", with(`{"admin":true}`), 415, "Unsupported media type", ""},
		{"bad JSON", "application/json", `{"admin":`, 400, "Content could not be parsed", ""},
		{"the user", "application/json", with(`{"user":{"reference":"User/someone-else"}}`), 400,
			"Field user of a membership cannot be changed here; only admin, accessPolicy, access and active can", "user"},
		{"the profile removed", "application/json", with(`{"profile":null,"admin":true}`), 400,
			"Field profile of a membership cannot be changed here; only admin, accessPolicy, access and active can", "profile"},
		{"admin as text", "application/json", with(`{"admin":"true"}`), 400, "admin must be a boolean", "admin"},
		{"another project's policy", "application/json", with(`{"accessPolicy":{"reference":"` + foreign + `"}}`), 400,
			"Access policy " + foreign + " does not belong to this project", "membership.accessPolicy"},
		{"no such policy", "application/json", with(`{"access":[{"policy":{"reference":"AccessPolicy/` + uuid.NewString()[:8] + `x"}}]}`), 400,
			"", "membership.access[0].policy"},
		{"not a policy", "application/json", with(`{"accessPolicy":{"reference":"` + profile + `"}}`), 400,
			"Invalid access policy reference", "membership.accessPolicy"},
		{"access not a list", "application/json", with(`{"access":{"policy":{"reference":"` + policy + `"}}}`), 400,
			"access must be an array", "membership.access"},
	}
	before := stored()
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := call(t, stack.svc.updateMember, request(by, memberParams(project, id), tc.contentType, tc.body))
			if tc.text == "" { // a text naming a generated id
				var ap map[string]any
				_ = json.Unmarshal([]byte(tc.body), &ap)
				ref, _ := refOf(ap["access"].([]any)[0].(map[string]any)["policy"])
				tc.text = "Access policy " + ref + " does not exist"
			}
			wantFHIRError(t, resp, err, tc.status, tc.text, tc.expr)
		})
	}
	if after := stored(); !reflect.DeepEqual(after, before) {
		t.Fatalf("a refused update changed the membership:\n%v\n%v", before, after)
	}

	t.Run("admin and policy", func(t *testing.T) {
		body := with(`{"admin":true,"accessPolicy":{"reference":"` + policy + `"},"meta":{"versionId":"forged","author":{"reference":"Practitioner/forged"}}}`)
		resp, err := call(t, stack.svc.updateMember, request(by, memberParams(project, id), "application/fhir+json", body))
		if err != nil {
			t.Fatal(err)
		}
		got := decode(t, string(resp.Body))
		if resp.Status != 200 || got["admin"] != true {
			t.Fatalf("%d %s", resp.Status, resp.Body)
		}
		meta := got["meta"].(map[string]any)
		if meta["versionId"] == "forged" || meta["versionId"] == before["meta"].(map[string]any)["versionId"] ||
			meta["author"].(map[string]any)["reference"] != by.Profile {
			t.Errorf("meta %v: want a new version by the admin", meta)
		}
		if e := sessionEntry(t, id); e == nil || !e.Admin || !e.AccessPolicy || !e.Active {
			t.Errorf("session entry %+v, want an admin under a policy", e)
		}
		wantSessionRev(t, resp)
	})
}

func TestPatchMember(t *testing.T) {
	project, other := fixtureProject(t, nil), fixtureProject(t, nil)
	foreign := fixturePolicy(t, other)
	id := fixtureMember(t, project, "User/"+uuid.NewString(), fixturePractitioner(t, project), nil)
	by := adminOf(project)
	patch := func(body string) (*bus.Response, error) {
		return call(t, stack.svc.patchMember, request(by, memberParams(project, id), "application/json-patch+json", body))
	}

	refusals := []struct {
		name, contentType, body string
		text, expr              string
	}{
		{"plain JSON", "application/json", `[{"op":"replace","path":"/admin","value":true}]`, "Unsupported media type", ""},
		{"not a list", "application/json-patch+json", `{"op":"replace","path":"/admin","value":true}`, "Patch body must be an array", ""},
		{"empty", "application/json-patch+json", `[]`, "Empty patch body", ""},
		{"bad JSON", "application/json-patch+json", `[{"op":`, "Content could not be parsed", ""},
		{"the profile", "application/json-patch+json", `[{"op":"replace","path":"/profile/reference","value":"Practitioner/x"}]`,
			"Field profile of a membership cannot be changed here; only admin, accessPolicy, access and active can", "profile"},
		{"admin as text", "application/json-patch+json", `[{"op":"replace","path":"/admin","value":"yes"}]`, "admin must be a boolean", "admin"},
		{"another project's policy", "application/json-patch+json", `[{"op":"add","path":"/access","value":[{"policy":{"reference":"` + foreign + `"}}]}]`,
			"Access policy " + foreign + " does not belong to this project", "membership.access[0].policy"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := call(t, stack.svc.patchMember, request(by, memberParams(project, id), tc.contentType, tc.body))
			status := 400
			if tc.text == "Unsupported media type" {
				status = 415
			}
			wantFHIRError(t, resp, err, status, tc.text, tc.expr)
		})
	}
	// RFC 6902: replace needs the member to exist (invites store admin for this).
	resp, err := patch(`[{"op":"replace","path":"/active","value":false}]`)
	var fe *fhir.Error
	if !errors.As(err, &fe) || fe.Status != 400 || !strings.HasPrefix(fe.Message(), "Patch failed: replace operation does not apply") {
		t.Errorf("replace of an absent field: %v %v", resp, err)
	}
	if e := sessionEntry(t, id); e == nil || e.Admin || !e.Active {
		t.Fatalf("a refused patch changed the session entry: %+v", e)
	}

	// The documented patch, and its undoing: each answer waits for the entry.
	for _, step := range []struct {
		body          string
		admin, active bool
	}{
		{`[{"op":"replace","path":"/admin","value":true}]`, true, true},
		{`[{"op":"add","path":"/active","value":false}]`, true, false},
		{`[{"op":"replace","path":"/admin","value":false},{"op":"remove","path":"/active"}]`, false, true},
	} {
		resp, err := patch(step.body)
		if err != nil {
			t.Fatalf("%s: %v", step.body, err)
		}
		if resp.Status != 200 {
			t.Fatalf("%s: %d %s", step.body, resp.Status, resp.Body)
		}
		wantSessionRev(t, resp)
		if e := sessionEntry(t, id); e == nil || e.Admin != step.admin || e.Active != step.active {
			t.Errorf("after %s: session entry %+v, want admin %v, active %v", step.body, e, step.admin, step.active)
		}
	}
}

func TestDeleteMember(t *testing.T) {
	ctx := testCtx(t)
	del := func(t *testing.T, project, id string) (*bus.Response, error) {
		t.Helper()
		return call(t, stack.svc.deleteMember, request(adminOf(project), memberParams(project, id), "", ""))
	}
	claimed := func(t *testing.T, key string) string {
		t.Helper()
		owner, err := stack.repo.ClaimOwner(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return owner
	}
	wantGone := func(t *testing.T, typ, id string) {
		t.Helper()
		_, err := stack.repo.Read(ctx, repo.AllProjects, typ, id)
		wantError(t, err, 410, "Gone", "")
	}

	t.Run("the owner stays", func(t *testing.T) {
		owner := "User/" + uuid.NewString()
		project := fixtureProject(t, map[string]any{"owner": map[string]any{"reference": owner}})
		id := fixtureMember(t, project, owner, fixturePractitioner(t, project), map[string]any{"admin": true})
		resp, err := del(t, project, id)
		wantFHIRError(t, resp, err, 400, "Cannot delete the owner of the project", "")
		readDoc(t, "ProjectMembership", id)
		if e := sessionEntry(t, id); e == nil || !e.Active || !e.Admin {
			t.Errorf("session entry %+v", e)
		}
		if got := claimed(t, repo.MembershipKey(project, owner)); got != id {
			t.Errorf("membership claim held by %q", got)
		}
	})

	t.Run("a project's own user goes with its last membership", func(t *testing.T) {
		project := fixtureProject(t, nil)
		email := "patient-" + uuid.NewString()[:8] + "@example.com"
		user := fixtureUser(t, project, email)
		profile := fixture(t, project, map[string]any{"resourceType": "Patient"})
		id := fixtureMember(t, project, "User/"+user, profile, map[string]any{"externalId": "ext-" + user})
		resp, err := del(t, project, id)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := json.Marshal(fhir.AllOK()); resp.Status != 200 || string(resp.Body) != string(want) {
			t.Errorf("%d %s, want 200 %s", resp.Status, resp.Body, want)
		}
		wantSessionRev(t, resp)
		// The member's tokens stop at once: the answer came after the entry went.
		if e := sessionEntry(t, id); e != nil {
			t.Errorf("session entry %+v after the delete", e)
		}
		wantGone(t, "ProjectMembership", id)
		wantGone(t, "User", user)
		readDoc(t, "Patient", strings.TrimPrefix(profile, "Patient/"))
		for _, key := range []string{repo.MembershipKey(project, "User/"+user), repo.ExternalIDKey(project, "ext-"+user), repo.UserEmailKey(project, email)} {
			if got := claimed(t, key); got != "" {
				t.Errorf("%s still held by %q", key, got)
			}
		}
	})

	t.Run("a project's own user with another membership stays", func(t *testing.T) {
		project := fixtureProject(t, nil)
		email := "twice-" + uuid.NewString()[:8] + "@example.com"
		user := fixtureUser(t, project, email)
		first := fixtureMember(t, project, "User/"+user, fixturePractitioner(t, project), nil)
		// A second membership of one user, as forceNewMembership makes it (no claim).
		second := uuid.NewString()
		if _, err := stack.repo.Create(ctx, repo.AllProjects, map[string]any{"resourceType": "ProjectMembership",
			"project": map[string]any{"reference": "Project/" + project}, "user": map[string]any{"reference": "User/" + user},
			"profile": map[string]any{"reference": fixturePractitioner(t, project)}}, repo.WriteOptions{ID: second, Project: project}); err != nil {
			t.Fatal(err)
		}
		if _, err := del(t, project, first); err != nil {
			t.Fatal(err)
		}
		readDoc(t, "User", user)
		readDoc(t, "ProjectMembership", second)
		if got := claimed(t, repo.UserEmailKey(project, email)); got != user {
			t.Errorf("e-mail claim held by %q, want the user", got)
		}
		if _, err := del(t, project, second); err != nil {
			t.Fatal(err)
		}
		wantGone(t, "User", user)
	})

	t.Run("a server user stays", func(t *testing.T) {
		project := fixtureProject(t, nil)
		email := "server-" + uuid.NewString()[:8] + "@example.com"
		user := fixtureUser(t, "", email)
		id := fixtureMember(t, project, "User/"+user, fixturePractitioner(t, project), nil)
		if _, err := del(t, project, id); err != nil {
			t.Fatal(err)
		}
		wantGone(t, "ProjectMembership", id)
		readDoc(t, "User", user)
		if got := claimed(t, repo.UserEmailKey("", email)); got != user {
			t.Errorf("e-mail claim held by %q, want the user", got)
		}
		if got := claimed(t, repo.MembershipKey(project, "User/"+user)); got != "" {
			t.Errorf("membership claim held by %q", got)
		}
	})

	t.Run("another project's user stays", func(t *testing.T) {
		project, home := fixtureProject(t, nil), fixtureProject(t, nil)
		email := "visitor-" + uuid.NewString()[:8] + "@example.com"
		user := fixtureUser(t, home, email)
		id := fixtureMember(t, project, "User/"+user, fixturePractitioner(t, project), nil)
		if _, err := del(t, project, id); err != nil {
			t.Fatal(err)
		}
		wantGone(t, "ProjectMembership", id)
		readDoc(t, "User", user)
		if got := claimed(t, repo.UserEmailKey(home, email)); got != user {
			t.Errorf("e-mail claim held by %q, want the user", got)
		}
	})

	t.Run("a user that is gone already", func(t *testing.T) {
		project := fixtureProject(t, nil)
		user := fixtureUser(t, project, invitee("gone"))
		id := fixtureMember(t, project, "User/"+user, fixturePractitioner(t, project), nil)
		if err := stack.repo.Delete(ctx, repo.AllProjects, "User", user); err != nil {
			t.Fatal(err)
		}
		if _, err := del(t, project, id); err != nil {
			t.Fatal(err)
		}
		wantGone(t, "ProjectMembership", id)
	})

	t.Run("a client application's membership", func(t *testing.T) {
		project := fixtureProject(t, nil)
		id := fixtureMember(t, project, "ClientApplication/"+uuid.NewString(), "ClientApplication/x", nil)
		if _, err := del(t, project, id); err != nil {
			t.Fatal(err)
		}
		wantGone(t, "ProjectMembership", id)
	})
}
