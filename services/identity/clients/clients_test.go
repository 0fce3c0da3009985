package clients

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/services/identity/internal/testkit"
)

// A client's current secret works, and after a rotation the old one for
// the grace period only.
func TestClientCredMatches(t *testing.T) {
	const current, retiring = "current-secret", "retiring-secret"
	cases := []struct {
		name     string
		cred     Cred
		secret   string
		matches  bool
		retiring bool
	}{
		{"current", Cred{Digest: auth.SecretDigest(current)}, current, true, false},
		{"wrong", Cred{Digest: auth.SecretDigest(current)}, "guess", false, false},
		{"empty", Cred{Digest: auth.SecretDigest(current)}, "", false, false},
		{"retiring, in its grace", Cred{Digest: auth.SecretDigest(current), Retiring: auth.SecretDigest(retiring),
			RetiringUntil: time.Now().Add(time.Hour)}, retiring, true, true},
		{"current, while another retires", Cred{Digest: auth.SecretDigest(current), Retiring: auth.SecretDigest(retiring),
			RetiringUntil: time.Now().Add(time.Hour)}, current, true, false},
		{"retiring, past its grace", Cred{Digest: auth.SecretDigest(current), Retiring: auth.SecretDigest(retiring),
			RetiringUntil: time.Now().Add(-time.Hour)}, retiring, false, false},
		{"retiring, no end set", Cred{Digest: auth.SecretDigest(current), Retiring: auth.SecretDigest(retiring)}, retiring, false, false},
		{"a digest is not a secret", Cred{Digest: auth.SecretDigest(current)}, auth.SecretDigest(current), false, false},
		{"no credentials", Cred{}, "", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cred.Matches(tc.secret); got != tc.matches {
				t.Fatalf("matches = %v, want %v", got, tc.matches)
			}
			if got := tc.cred.RetiringMatches(tc.secret); got != tc.retiring {
				t.Fatalf("retiringMatches = %v, want %v", got, tc.retiring)
			}
		})
	}
}

func TestOperationInput(t *testing.T) {
	const jsonCT = "application/json"
	cases := []struct {
		name, contentType, body string
		want                    map[string]string
		status                  int
		text, expr              string
	}{
		{"plain object", jsonCT, `{"secret":"abc"}`, map[string]string{"secret": "abc"}, 0, "", ""},
		{"FHIR JSON", "application/fhir+json; charset=utf-8", `{"retiringSecret":"abc"}`, map[string]string{"retiringSecret": "abc"}, 0, "", ""},
		{"empty object", jsonCT, `{}`, map[string]string{}, 0, "", ""},
		{"empty string", jsonCT, `{"secret":""}`, map[string]string{"secret": ""}, 0, "", ""},
		{"Parameters", jsonCT, `{"resourceType":"Parameters","parameter":[{"name":"secret","valueString":"abc"}]}`,
			map[string]string{"secret": "abc"}, 0, "", ""},
		{"Parameters, both", jsonCT, `{"resourceType":"Parameters","parameter":[{"name":"secret","valueString":"a"},{"name":"retiringSecret","valueString":"b"}]}`,
			map[string]string{"secret": "a", "retiringSecret": "b"}, 0, "", ""},
		{"Parameters without any", jsonCT, `{"resourceType":"Parameters"}`, map[string]string{}, 0, "", ""},

		{"not JSON", "text/plain", `{"secret":"abc"}`, nil, 415, "Unsupported media type", ""},
		{"no content type", "", `{"secret":"abc"}`, nil, 415, "Unsupported media type", ""},
		{"bad JSON", jsonCT, `{"secret":`, nil, 400, "Content could not be parsed", ""},
		{"an array", jsonCT, `[]`, nil, 400, "Content could not be parsed", ""},
		{"two objects", jsonCT, `{}{}`, nil, 400, "Content could not be parsed", ""},
		{"unknown parameter", jsonCT, `{"password":"x"}`, nil, 400, "Unknown parameter: password", "password"},
		{"another resource type", jsonCT, `{"resourceType":"Patient"}`, nil, 400, "Unknown parameter: resourceType", "resourceType"},
		{"not a string", jsonCT, `{"secret":5}`, nil, 400, "Parameter secret must be a string", "secret"},
		{"null", jsonCT, `{"secret":null}`, nil, 400, "Parameter secret must be a string", "secret"},
		{"Parameters, unknown", jsonCT, `{"resourceType":"Parameters","parameter":[{"name":"secret","valueString":"a"},{"name":"x","valueString":"b"}]}`,
			nil, 400, "Unknown parameter: x", "Parameters.parameter[1]"},
		{"Parameters, not a string", jsonCT, `{"resourceType":"Parameters","parameter":[{"name":"secret","valueInteger":1}]}`,
			nil, 400, "Parameter secret must be a string", "Parameters.parameter[0]"},
		{"Parameters, parameter not a list", jsonCT, `{"resourceType":"Parameters","parameter":{"name":"secret"}}`,
			nil, 400, "Content could not be parsed", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &bus.Request{Header: map[string]string{"Content-Type": tc.contentType}, Body: []byte(tc.body)}
			got, err := operationInput(r, "secret", "retiringSecret")
			expectOutcome(t, err, tc.status, tc.text, tc.expr)
			if tc.status == 0 && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%v, want %v", got, tc.want)
			}
		})
	}
}

// A new secret is shown in the answer once; a retirement shows none.
func TestClientResponse(t *testing.T) {
	res := &repo.Resource{Type: "ClientApplication", ID: "c1", JSON: []byte(`{"resourceType":"ClientApplication","id":"c1","name":"app"}`)}
	for _, tc := range []struct {
		name, secret string
		status       int
		want         string
	}{
		{"new secret", "s3cret", 201, `{"id":"c1","name":"app","resourceType":"ClientApplication","secret":"s3cret"}`},
		{"no secret", "", 200, `{"id":"c1","name":"app","resourceType":"ClientApplication"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := clientResponse(tc.status, res, tc.secret)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != tc.status || string(resp.Body) != tc.want || resp.Header["Content-Type"] != bus.FHIRContentType {
				t.Fatalf("%d %s %v", resp.Status, resp.Body, resp.Header)
			}
		})
	}
}

func expectOutcome(t *testing.T, err error, status int, text, expr string) {
	t.Helper()
	testkit.Outcome(t, err, status, text, expr)
}

// The bootstrap's ids are fixed: a changed one would make a second super
// admin project beside the stored one at the next start.
func TestBootstrapIDsAreFixed(t *testing.T) {
	if SuperAdminProjectID != "404b95f2-28ac-54bd-a2f4-fda6b3685961" {
		t.Fatalf("super-admin project %s", SuperAdminProjectID)
	}
	if got := SuperAdminMembershipID("ClientApplication/c1"); got != "ba2bfe74-cc87-57d9-99e0-4e7a9a9e13cc" {
		t.Fatalf("membership %s", got)
	}
	if SuperAdminMembershipID("ClientApplication/c1") == SuperAdminMembershipID("ClientApplication/c2") {
		t.Fatal("two clients share a membership id")
	}
}

// A client known without credentials (or without a membership) is refused
// as unknown, and a failed proof as a wrong secret, before the session
// bucket is asked.
func TestAuthenticateClientRefusals(t *testing.T) {
	s := New(Config{BaseURL: testkit.Base}, nil, nil, nil, nil, nil, testkit.Quiet)
	s.cache.Add("no-cred", &Client{Membership: "m1"})
	s.cache.Add("no-member", &Client{Cred: &Cred{Digest: auth.SecretDigest("s")}})
	s.cache.Add("app", &Client{Cred: &Cred{Digest: auth.SecretDigest("s")}, Membership: "m1"})
	never := func(*Client) bool { return false }
	for _, tc := range []struct {
		id   string
		want error
	}{
		{"no-cred", ErrUnknown},
		{"no-member", ErrUnknown},
		{"app", ErrSecret},
	} {
		c, m, err := s.Authenticate(context.Background(), tc.id, "10.0.0.1", 0, never)
		if !errors.Is(err, tc.want) || c != nil || m != nil {
			t.Fatalf("%s: %v %v %v, want %v", tc.id, c, m, err, tc.want)
		}
	}
}

// The client cache forgets a changed client, and every client when a
// membership or policy changes (what a client may do may have changed).
func TestClientCacheEvents(t *testing.T) {
	s := New(Config{BaseURL: testkit.Base}, nil, nil, nil, nil, nil, testkit.Quiet)
	fill := func() {
		for _, id := range []string{"c1", "c2"} {
			s.cache.Add(id, &Client{})
		}
	}
	event := func(typ, id string) *nats.Msg {
		b, _ := json.Marshal(repo.Event{Op: "update", Type: typ, ID: id})
		return &nats.Msg{Data: b}
	}
	for _, tc := range []struct {
		name string
		msg  *nats.Msg
		kept []string
	}{
		{"a client changed", event("ClientApplication", "c1"), []string{"c2"}},
		{"another client changed", event("ClientApplication", "c9"), []string{"c1", "c2"}},
		{"a membership changed", event("ProjectMembership", "m1"), nil},
		{"a policy changed", event("AccessPolicy", "a1"), nil},
		{"a patient changed", event("Patient", "c1"), []string{"c1", "c2"}},
		{"not an event", &nats.Msg{Data: []byte("c1")}, []string{"c1", "c2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.cache.Purge()
			fill()
			s.onResourceEvent(tc.msg)
			keys := s.cache.Keys()
			slices.Sort(keys)
			if !slices.Equal(keys, tc.kept) {
				t.Fatalf("kept %v, want %v", keys, tc.kept)
			}
		})
	}
}
