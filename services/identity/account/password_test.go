package account

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/services/identity/internal/outcometest"
)

// New passwords: lengths in characters, a bound, and no leaked password,
// wherever one is set.
func TestNewPasswordRules(t *testing.T) {
	const (
		short = "password: Invalid password, must be at least 8 characters"
		long  = "password: Password must be between 8 and 72 characters"
	)
	ok := setPasswordRequest{ID: "6f1c2a0e-7a44-4d8e-9a55-3c1f0b2d9e11", Secret: "s", Password: "12345678"}
	for _, tc := range []struct {
		name, password string
		want           []string
	}{
		{"seven characters in fourteen bytes", "ééééééé", []string{short}},
		{"eight characters", "éééééééé", nil},
		{"72 characters", strings.Repeat("é", 72), nil},
		{"73 characters", strings.Repeat("p", 73), []string{long}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := ok
			in.Password = tc.password
			if got := outcometest.Issues(t, in.check()); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%q, want %q", got, tc.want)
			}
		})
	}

	ctx := context.Background()
	t.Run("a leaked password from a set-password link", func(t *testing.T) {
		p := newPerson(t, "leakedset")
		id, link, err := live.svc.NewPasswordRequest(ctx, p.userID, "reset", "")
		if err != nil {
			t.Fatal(err)
		}
		secret := link[strings.LastIndex(link, "/")+1:]
		set := func(password string) error {
			_, err := live.svc.SetPassword(ctx, jsonRequest("10.3.6.2", map[string]any{"id": id, "secret": secret, "password": password}))
			return err
		}
		expectOutcome(t, set("password1"), 400, "Password found in breach database", "")
		// The link is not spent by a refused password.
		if err := set("a password nobody leaked"); err != nil {
			t.Fatal(err)
		}
	})
}
