package signin

import (
	"reflect"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/services/identity/internal/outcometest"
)

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
			if got := outcometest.Issues(t, in.check()); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%q, want %q", got, tc.want)
			}
		})
	}
}
