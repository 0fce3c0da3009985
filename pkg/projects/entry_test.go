package projects

import (
	"reflect"
	"testing"

	"github.com/pinion-health/pinion/pkg/session"
)

func TestEntry(t *testing.T) {
	rules := []session.AddressRule{{Value: "10.0.0.0/8"}}
	cases := []struct {
		name       string
		doc        string
		superAdmin bool
		addresses  []session.AddressRule
		want       session.Membership
	}{
		{"plain member, active by default",
			`{"resourceType":"ProjectMembership","project":{"reference":"Project/p1"},"user":{"reference":"User/u1"},"profile":{"reference":"Patient/x"}}`,
			false, nil,
			session.Membership{Project: "p1", User: "User/u1", Profile: "Patient/x", Active: true}},
		{"admin, inactive",
			`{"project":{"reference":"Project/p1"},"user":{"reference":"User/u1"},"profile":{"reference":"Practitioner/y"},"admin":true,"active":false}`,
			false, nil,
			session.Membership{Project: "p1", User: "User/u1", Profile: "Practitioner/y", Admin: true}},
		{"super admin comes from the project, not the membership",
			`{"project":{"reference":"Project/sa"},"user":{"reference":"ClientApplication/c"},"profile":{"reference":"ClientApplication/c"},"admin":true,"superAdmin":false}`,
			true, nil,
			session.Membership{Project: "sa", User: "ClientApplication/c", Profile: "ClientApplication/c", Admin: true, SuperAdmin: true, Active: true}},
		{"a policy by reference, with its address rules",
			`{"project":{"reference":"Project/p1"},"user":{"reference":"User/u1"},"profile":{"reference":"Patient/x"},"accessPolicy":{"reference":"AccessPolicy/a"}}`,
			false, rules,
			session.Membership{Project: "p1", User: "User/u1", Profile: "Patient/x", Active: true, AccessPolicy: true, Addresses: rules}},
		{"a policy through access[]",
			`{"project":{"reference":"Project/p1"},"user":{"reference":"User/u1"},"profile":{"reference":"Patient/x"},"access":[{"policy":{"reference":"AccessPolicy/a"}}]}`,
			false, nil,
			session.Membership{Project: "p1", User: "User/u1", Profile: "Patient/x", Active: true, AccessPolicy: true}},
		{"an empty access[] names no policy",
			`{"project":{"reference":"Project/p1"},"user":{"reference":"User/u1"},"profile":{"reference":"Patient/x"},"access":[]}`,
			false, nil,
			session.Membership{Project: "p1", User: "User/u1", Profile: "Patient/x", Active: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Entry([]byte(c.doc), c.superAdmin, c.addresses)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, c.want) {
				t.Fatalf("got %+v\nwant %+v", *got, c.want)
			}
		})
	}
	if _, err := Entry([]byte(`{"project":"Project/p1"}`), false, nil); err == nil {
		t.Fatal("a project that is not a Reference was accepted")
	}
}
