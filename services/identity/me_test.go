package identity

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

func TestMeAndUserinfoNeedAPrincipal(t *testing.T) {
	s := unwired(t)
	for name, h := range map[string]bus.Handler{"me": s.signins.Me, "userinfo": s.oauth.Userinfo} {
		if _, err := h(context.Background(), &bus.Request{}); fhir.AsError(err).Status != 401 || err == nil {
			t.Errorf("%s without a principal: %v", name, err)
		}
	}
}

// /auth/me for a user: the profile and user as stored, the project and
// membership cut down, the membership's access policy.
func TestMe(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "me")
	policy := newResource(t, p.project, map[string]any{"resourceType": "AccessPolicy", "name": "one patient",
		"resource": []any{
			map[string]any{"resourceType": "Patient", "criteria": "Patient?_id=%patient.id"},
			map[string]any{"resourceType": "Observation", "readonly": true, "hiddenFields": []any{"note"}},
		}})
	patientParam := func(id string) map[string]any {
		return map[string]any{"policy": map[string]any{"reference": policy},
			"parameter": []any{map[string]any{"name": "patient", "valueReference": map[string]any{"reference": "Patient/" + id}}}}
	}
	setMembership(t, p.membership, func(m map[string]any) {
		m["access"] = []any{patientParam("p1"), patientParam("p2")}
		m["admin"] = true
	})
	principal := &bus.Principal{User: p.user, Profile: p.profile, Project: p.project, Membership: p.membership, Admin: true}
	resp, err := live.svc.signins.Me(ctx, &bus.Request{Principal: principal})
	body := decoded(t, resp, err, 200)
	if resp.Header["Content-Type"] != bus.JSONContentType {
		t.Fatalf("headers %v", resp.Header)
	}
	keys := slices.Sorted(maps.Keys(body))
	if want := []string{"accessPolicy", "config", "membership", "profile", "project", "security", "user"}; !slices.Equal(keys, want) {
		t.Fatalf("fields %v, want %v", keys, want)
	}
	if prof := body["profile"].(map[string]any); prof["resourceType"] != "Practitioner" || "Practitioner/"+prof["id"].(string) != p.profile {
		t.Fatalf("profile %v", prof)
	}
	// The user is cut to who signed in: no password hash, names or settings.
	if got, want := body["user"], map[string]any{"resourceType": "User", "id": p.userID, "email": p.email}; !reflect.DeepEqual(got, want) {
		t.Fatalf("user %v, want %v", got, want)
	}
	if got, want := body["project"], map[string]any{"resourceType": "Project", "id": p.project, "name": "Clinic of me"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("project %v, want %v", got, want)
	}
	m := body["membership"].(map[string]any)
	if m["id"] != p.membership || m["admin"] != true || m["accessPolicy"] != nil || m["project"] != nil {
		t.Fatalf("membership %v", m)
	}
	// The policy Medplum computes for the login, which its React
	// components read: each access[] entry's policy with its parameters
	// in, one after the other, and the admin's own entries.
	ap := body["accessPolicy"].(map[string]any)
	rules := map[string]any{}
	for _, r := range ap["resource"].([]any) {
		r := r.(map[string]any)
		key, _ := r["resourceType"].(string)
		if c, ok := r["criteria"].(string); ok {
			key = c
		}
		rules[key] = r
	}
	readOnly := []any{"read", "vread", "history", "search"}
	for key, want := range map[string]any{
		"Patient?_id=p1": map[string]any{"resourceType": "Patient", "criteria": "Patient?_id=p1"},
		"Patient?_id=p2": map[string]any{"resourceType": "Patient", "criteria": "Patient?_id=p2"},
		"Observation":    map[string]any{"resourceType": "Observation", "readonly": true, "interaction": readOnly, "hiddenFields": []any{"note"}},
		"Project?_id=" + p.project: map[string]any{"resourceType": "Project", "criteria": "Project?_id=" + p.project,
			"interaction": append(readOnly, "update"), "hiddenFields": []any{"superAdmin", "systemSecret", "strictMode", "site.recaptchaSecretKey"}},
	} {
		if !reflect.DeepEqual(rules[key], want) {
			t.Errorf("access policy entry %s: %v, want %v", key, rules[key], want)
		}
	}
	if ap["resourceType"] != "AccessPolicy" || rules["*"] != nil {
		t.Errorf("access policy %v", ap)
	}
	if got := body["config"].(map[string]any); got["resourceType"] != "UserConfiguration" || len(got["menu"].([]any)) != 2 {
		t.Fatalf("config %v", got)
	}

	// A client has no user to show, and a profile that is gone is a 404.
	project := newProject(t, "Me clients")
	id, _ := newClient(t, project, nil)
	c := cachedClient(t, id)
	resp, err = live.svc.signins.Me(ctx, &bus.Request{Principal: &bus.Principal{User: "ClientApplication/" + id, Profile: "ClientApplication/" + id,
		Project: project, Membership: c.Membership}})
	if body := decoded(t, resp, err, 200); body["user"] != nil || body["security"] != nil || body["profile"].(map[string]any)["id"] != id {
		t.Fatalf("a client's /auth/me %v", body)
	} else if got := body["accessPolicy"].(map[string]any)["resource"].([]any); !slices.ContainsFunc(got, func(r any) bool {
		return reflect.DeepEqual(r, map[string]any{"resourceType": "*"})
	}) {
		// A membership without a policy may do anything in its project.
		t.Fatalf("a client's access policy %v", got)
	}
	principal.Profile = "Practitioner/" + uuid.NewString()
	_, err = live.svc.signins.Me(ctx, &bus.Request{Principal: principal})
	expectOutcome(t, err, 404, "Not found", "")
}

// UserInfo reads the name from the profile and the e-mail from the user,
// each only with its scope.
func TestUserinfo(t *testing.T) {
	p := newPerson(t, "userinfo")
	info := func(scope string) map[string]any {
		t.Helper()
		resp, err := live.svc.oauth.Userinfo(context.Background(), &bus.Request{Principal: &bus.Principal{User: p.user, Profile: p.profile, Scope: scope}})
		return decoded(t, resp, err, 200)
	}
	base := map[string]any{"sub": p.userID, "fhirUser": p.profile}
	with := func(extra ...map[string]any) map[string]any {
		out := maps.Clone(base)
		for _, e := range extra {
			maps.Copy(out, e)
		}
		return out
	}
	name := map[string]any{"given_name": "Ada", "family_name": "userinfo", "name": "Ada userinfo"}
	email := map[string]any{"email": p.email, "email_verified": false}
	for _, tc := range []struct {
		scope string
		want  map[string]any
	}{
		{"openid", base},
		{"openid profile", with(name)},
		{"openid email", with(email)},
		{"openid profile email", with(name, email)},
	} {
		if got := info(tc.scope); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.scope, got, tc.want)
		}
	}
}
