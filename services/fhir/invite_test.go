package fhirsvc

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/saga"
)

func TestProfileID(t *testing.T) {
	// The id must not change between releases: a step delivered again
	// after an upgrade has to find the profile its first attempt made.
	if got := profileID("inv-1"); got != "2e06d061-3bcf-5a04-af5c-a9def36c4911" {
		t.Fatalf("profileID(inv-1) = %s", got)
	}
	a, b := profileID("inv-1"), profileID("inv-2")
	if a != profileID("inv-1") || a == b {
		t.Fatalf("ids %s and %s", a, b)
	}
	if u, err := uuid.Parse(a); err != nil || u.Version() != 5 {
		t.Fatalf("%s is not a name-based UUID: %v", a, err)
	}
}

func TestNewProfile(t *testing.T) {
	cases := []struct {
		name string
		req  invite.Request
		want string
	}{
		{"practitioner with e-mail", invite.Request{ResourceType: "Practitioner", FirstName: "Ada", LastName: "Lovelace", Email: "ada@example.com"},
			`{"resourceType":"Practitioner","name":[{"given":["Ada"],"family":"Lovelace"}],"telecom":[{"system":"email","use":"work","value":"ada@example.com"}]}`},
		{"patient without e-mail", invite.Request{ResourceType: "Patient", FirstName: "Bo", LastName: "Li"},
			`{"resourceType":"Patient","name":[{"given":["Bo"],"family":"Li"}]}`},
		{"related person of a patient", invite.Request{ResourceType: "RelatedPerson", FirstName: "Cy", LastName: "Ng", Email: "cy@example.com", Patient: "Patient/p1"},
			`{"resourceType":"RelatedPerson","name":[{"given":["Cy"],"family":"Ng"}],"telecom":[{"system":"email","use":"work","value":"cy@example.com"}],"patient":{"reference":"Patient/p1"}}`},
		{"what the profile does not hold", invite.Request{ResourceType: "Patient", FirstName: "D", LastName: "E", ProjectID: "p", ExternalID: "x", PasswordHash: "h", Profile: "Patient/z"},
			`{"resourceType":"Patient","name":[{"given":["D"],"family":"E"}]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sameJSON(t, newProfile(tc.req), tc.want)
		})
	}
}

// isPermanent reports an error saga.Permanent marked.
func isPermanent(err error) bool {
	return reflect.TypeOf(err) == reflect.TypeOf(saga.Permanent(errors.New("")))
}

func TestProfileCreateError(t *testing.T) {
	store := errors.New("connection refused")
	cases := []struct {
		name      string
		err       error
		ok        bool // the step goes on
		permanent bool
	}{
		{"created", nil, true, false},
		{"made by an earlier attempt", fhir.Conflict("exists"), true, false},
		{"made by an earlier attempt, wrapped", fmt.Errorf("create: %w", fhir.Conflict("exists")), true, false},
		{"invalid", fhir.BadRequest("Invalid value", "Patient.name"), false, true},
		{"forbidden", fhir.Forbidden(), false, true},
		{"a lost race", fhir.PreconditionFailed(), false, true},
		{"a server error", fhir.Internal(), false, false},
		{"unavailable", fhir.Unavailable("x"), false, false},
		{"the store", store, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := profileCreateError(tc.err)
			if tc.ok {
				wantNoError(t, got)
				return
			}
			if got == nil || isPermanent(got) != tc.permanent || !errors.Is(got, tc.err) {
				t.Fatalf("%v (permanent %v), want permanent %v wrapping %v", got, isPermanent(got), tc.permanent, tc.err)
			}
			if !tc.permanent && got.Error() != "create profile: "+tc.err.Error() {
				t.Fatalf("error %q", got)
			}
		})
	}
}
