package account

import (
	"reflect"
	"testing"

	"github.com/pinion-health/pinion/services/identity/internal/outcometest"
)

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
			if got := outcometest.Issues(t, in.check()); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%q, want %q", got, tc.want)
			}
		})
	}
}
