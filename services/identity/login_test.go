package identity

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
)

// issues lists an error's issues as "expression: text", for comparison;
// nil for no error.
func issues(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	fe := fhir.AsError(err)
	if fe.Status != 400 {
		t.Fatalf("status %d, want 400: %v", fe.Status, err)
	}
	var out []string
	for _, i := range fe.Outcome.Issue {
		if i.Severity != "error" || i.Code != "invalid" || i.Details == nil {
			t.Fatalf("issue %+v", i)
		}
		out = append(out, strings.Join(i.Expression, ",")+": "+i.Details.Text)
	}
	return out
}

func TestLoginRequestCheck(t *testing.T) {
	const (
		badEmail    = "email: Valid email address is required"
		badPassword = "password: Invalid password, must be at least 8 characters"
		badMethod   = "codeChallengeMethod: Invalid code challenge method"
	)
	ok := loginRequest{Email: "a@example.com", Password: "12345678"}
	cases := []struct {
		name string
		edit func(*loginRequest)
		want []string
	}{
		{"valid", nil, nil},
		{"S256", func(in *loginRequest) { in.CodeChallenge, in.CodeChallengeMethod = "c", "S256" }, nil},
		{"plain", func(in *loginRequest) { in.CodeChallenge, in.CodeChallengeMethod = "c", "plain" }, nil},
		{"a method without a challenge is not read", func(in *loginRequest) { in.CodeChallengeMethod = "MD5" }, nil},
		{"capitals in the address", func(in *loginRequest) { in.Email = "A@Example.COM" }, nil},
		{"an address with a name", func(in *loginRequest) { in.Email = "Alice <a@example.com>" }, nil},
		{"a long password", func(in *loginRequest) { in.Password = strings.Repeat("p", 200) }, nil},

		{"no email", func(in *loginRequest) { in.Email = "" }, []string{badEmail}},
		{"no @", func(in *loginRequest) { in.Email = "alice" }, []string{badEmail}},
		{"no domain", func(in *loginRequest) { in.Email = "alice@" }, []string{badEmail}},
		{"no local part", func(in *loginRequest) { in.Email = "@example.com" }, []string{badEmail}},
		{"spaces around", func(in *loginRequest) { in.Email = " a@example.com " }, nil},
		{"two addresses", func(in *loginRequest) { in.Email = "a@example.com, b@example.com" }, []string{badEmail}},
		{"no password", func(in *loginRequest) { in.Password = "" }, []string{badPassword}},
		{"seven characters", func(in *loginRequest) { in.Password = "1234567" }, []string{badPassword}},
		{"no challenge method", func(in *loginRequest) { in.CodeChallenge = "c" }, []string{badMethod}},
		{"lower-case method", func(in *loginRequest) { in.CodeChallenge, in.CodeChallengeMethod = "c", "s256" }, []string{badMethod}},
		{"every field at once, in order", func(in *loginRequest) {
			in.Email, in.Password, in.CodeChallenge, in.CodeChallengeMethod = "x", "short", "c", "MD5"
		}, []string{badEmail, badPassword, badMethod}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := ok
			if tc.edit != nil {
				tc.edit(&in)
			}
			if got := issues(t, in.check()); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%q, want %q", got, tc.want)
			}
		})
	}
}

func TestSetPasswordRequestCheck(t *testing.T) {
	const (
		badID       = "id: Invalid request ID"
		noSecret    = "secret: Missing secret"
		badPassword = "password: Invalid password, must be at least 8 characters"
	)
	ok := setPasswordRequest{ID: "6f1c2a0e-7a44-4d8e-9a55-3c1f0b2d9e11", Secret: "s", Password: "12345678"}
	cases := []struct {
		name string
		edit func(*setPasswordRequest)
		want []string
	}{
		{"valid", nil, nil},
		{"no id", func(in *setPasswordRequest) { in.ID = "" }, []string{badID}},
		{"not a uuid", func(in *setPasswordRequest) { in.ID = "../x" }, []string{badID}},
		{"no secret", func(in *setPasswordRequest) { in.Secret = "" }, []string{noSecret}},
		{"short password", func(in *setPasswordRequest) { in.Password = "1234567" }, []string{badPassword}},
		{"all, in order", func(in *setPasswordRequest) { *in = setPasswordRequest{} }, []string{badID, noSecret, badPassword}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := ok
			if tc.edit != nil {
				tc.edit(&in)
			}
			if got := issues(t, in.check()); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%q, want %q", got, tc.want)
			}
		})
	}
}

// The handlers refuse a bad body before any lookup or count.
func TestLoginHandlersRefuseBadInput(t *testing.T) {
	s := unwired(t)
	ctx := context.Background()
	req := func(ct, body string) *bus.Request {
		return &bus.Request{Method: "POST", Header: map[string]string{"Content-Type": ct}, Body: []byte(body), Remote: "10.0.0.1"}
	}
	cases := []struct {
		name    string
		handler bus.Handler
		r       *bus.Request
		status  int
		text    string
		expr    string
	}{
		{"login, a form", s.login, req("application/x-www-form-urlencoded", "email=a@example.com"), 415, "Unsupported media type", ""},
		{"login, bad JSON", s.login, req("application/json", "{"), 400, "Content could not be parsed", ""},
		{"login, bad e-mail", s.login, req("application/json", `{"email":"x","password":"12345678"}`), 400, "Valid email address is required", "email"},
		{"profile, no login", s.chooseProfile, req("application/json", `{"profile":"m1"}`), 400, "Missing login", "login"},
		{"profile, no profile", s.chooseProfile, req("application/json", `{"login":"l1"}`), 400, "Missing profile", "profile"},
		{"set password, short", s.setPassword, req("application/json",
			`{"id":"6f1c2a0e-7a44-4d8e-9a55-3c1f0b2d9e11","secret":"s","password":"short"}`), 400, shortPassword, "password"},
		{"reset, bad e-mail", s.resetPassword, req("application/json", `{"email":"nobody"}`), 400, "Valid email address is required", "email"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.handler(ctx, tc.r)
			expectOutcome(t, err, tc.status, tc.text, tc.expr)
		})
	}
	if n := s.limiter.failures.Len(); n != 0 {
		t.Fatalf("%d failures counted for refused input", n)
	}
}

func TestProfileOpen(t *testing.T) {
	cases := []struct {
		name string
		l    session.Login
		text string
	}{
		{"open", session.Login{User: "User/u1"}, ""},
		{"revoked", session.Login{Revoked: true, Granted: true, Membership: "m1"}, "Login revoked"},
		{"granted", session.Login{Granted: true, Membership: "m1"}, "Login granted"},
		{"chosen", session.Login{Membership: "m1"}, "Login profile already set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := profileOpen(&tc.l)
			if tc.text == "" {
				expectOutcome(t, err, 0, "", "")
				return
			}
			expectOutcome(t, err, 400, tc.text, "")
		})
	}
}

func TestActiveChoices(t *testing.T) {
	res := func(json string) *repo.Resource { return &repo.Resource{Type: "ProjectMembership", JSON: []byte(json)} }
	got, err := activeChoices([]*repo.Resource{
		res(`{"id":"m1","project":{"reference":"Project/p1","display":"One"},"profile":{"reference":"Practitioner/x"}}`),
		res(`{"id":"m2","active":false,"project":{"reference":"Project/p2"}}`),
		res(`{"id":"m3","active":true,"project":{"reference":"Project/p3"},"admin":true}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []memberChoice{
		{ID: "m1", Project: &fhir.Reference{Reference: "Project/p1", Display: "One"}, Profile: &fhir.Reference{Reference: "Practitioner/x"}},
		{ID: "m3", Project: &fhir.Reference{Reference: "Project/p3"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%+v, want %+v", got, want)
	}
	if got, err := activeChoices(nil); got != nil || err != nil {
		t.Fatalf("none: %v %v", got, err)
	}
	if _, err := activeChoices([]*repo.Resource{res(`{"id":`)}); err == nil {
		t.Fatal("a membership that cannot be read is skipped")
	}
}
