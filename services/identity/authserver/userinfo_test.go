package authserver

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
)

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
			resp, err := s.Userinfo(context.Background(), &bus.Request{Principal: tc.p})
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
