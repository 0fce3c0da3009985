package identity

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// /auth/me shows only what Medplum's client reads of the project and the
// membership: never a project's secrets or settings.
func TestMeFields(t *testing.T) {
	project := map[string]any{"resourceType": "Project", "id": "p1", "name": "Clinic", "strictMode": true,
		"secret": []any{map[string]any{"name": "API_KEY"}}, "site": []any{}, "setting": []any{}}
	if got, want := pick(project, meProjectFields...), map[string]any{"resourceType": "Project", "id": "p1", "name": "Clinic", "strictMode": true}; !reflect.DeepEqual(got, want) {
		t.Fatalf("project %v, want %v", got, want)
	}
	membership := map[string]any{"resourceType": "ProjectMembership", "id": "m1", "admin": true, "user": map[string]any{"reference": "User/u1"},
		"accessPolicy": map[string]any{"reference": "AccessPolicy/a1"}, "externalId": "x"}
	if got, want := pick(membership, meMembershipFields...), map[string]any{"resourceType": "ProjectMembership", "id": "m1", "admin": true,
		"user": map[string]any{"reference": "User/u1"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("membership %v, want %v", got, want)
	}
	if got := pick(nil, meProjectFields...); len(got) != 0 || got == nil {
		t.Fatalf("nothing read: %v", got)
	}
}

func TestHumanNameClaims(t *testing.T) {
	cases := []struct {
		name humanName
		want map[string]any
	}{
		{humanName{Given: []string{"Ada", "Maria"}, Family: "Lovelace"}, map[string]any{"given_name": "Ada Maria", "family_name": "Lovelace", "name": "Ada Maria Lovelace"}},
		{humanName{Family: "Lovelace"}, map[string]any{"given_name": "", "family_name": "Lovelace", "name": "Lovelace"}},
		{humanName{Given: []string{"Ada"}}, map[string]any{"given_name": "Ada", "family_name": "", "name": "Ada"}},
		{humanName{}, map[string]any{"given_name": "", "family_name": "", "name": ""}},
	}
	for _, tc := range cases {
		out := map[string]any{}
		tc.name.addClaims(out)
		if !reflect.DeepEqual(out, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.name, out, tc.want)
		}
	}
}

// UserInfo answers sub and fhirUser always; the name and e-mail need their
// scopes (and the e-mail a user), and without them nothing is read.
func TestUserinfoWithoutLookups(t *testing.T) {
	s := unwired(t)
	cases := []struct {
		name string
		p    *bus.Principal
		want map[string]any
	}{
		{"openid", &bus.Principal{User: "User/u1", Profile: "Practitioner/x", Scope: "openid"},
			map[string]any{"sub": "u1", "fhirUser": "Practitioner/x"}},
		{"a client asks for e-mail", &bus.Principal{User: "ClientApplication/c1", Profile: "ClientApplication/c1", Scope: "openid email"},
			map[string]any{"sub": "c1", "fhirUser": "ClientApplication/c1"}},
		{"a scope like email is not email", &bus.Principal{User: "User/u1", Profile: "Practitioner/x", Scope: "openid emails profiles"},
			map[string]any{"sub": "u1", "fhirUser": "Practitioner/x"}},
		{"profile, without one", &bus.Principal{User: "User/u1", Scope: "profile"},
			map[string]any{"sub": "u1", "fhirUser": ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := s.userinfo(context.Background(), &bus.Request{Principal: tc.p})
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(resp.Body, &got); err != nil {
				t.Fatal(err)
			}
			if resp.Status != 200 || !reflect.DeepEqual(got, tc.want) || resp.Header["Cache-Control"] != "no-store" {
				t.Fatalf("%d %v %v, want %v", resp.Status, got, resp.Header, tc.want)
			}
		})
	}
}

func TestMeAndUserinfoNeedAPrincipal(t *testing.T) {
	s := unwired(t)
	for name, h := range map[string]bus.Handler{"me": s.me, "userinfo": s.userinfo} {
		if _, err := h(context.Background(), &bus.Request{}); fhir.AsError(err).Status != 401 || err == nil {
			t.Errorf("%s without a principal: %v", name, err)
		}
	}
}
