package account

import (
	"reflect"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// issues are a 400's field issues as "expression: text".
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
		out = append(out, strings.Join(i.Expression, ",")+": "+i.Details.Text)
	}
	return out
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
