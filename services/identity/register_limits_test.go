package identity

import (
	"context"
	"fmt"
	"testing"
)

func TestRegistrationLimits(t *testing.T) {
	t.Run("per address, and a refusal counts nothing", func(t *testing.T) {
		l := newSigninLimiter()
		for i := range maxRegistrationsPerAddress {
			if err := l.register("10.4.0.1", fmt.Sprintf("p%d@d%d.example", i, i)); err != nil {
				t.Fatalf("registration %d: %v", i, err)
			}
		}
		for range 3 {
			expectOutcome(t, l.register("10.4.0.1", "late@other.example"), 429, "Too Many Requests", "")
		}
		// Another address, and the domains the refused ones named, are not spent.
		if err := l.register("10.4.0.2", "late@other.example"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("per domain, from many addresses", func(t *testing.T) {
		l := newSigninLimiter()
		for i := range maxRegistrationsPerDomain {
			if err := l.register(fmt.Sprintf("10.5.%d.%d", i/250, i%250), fmt.Sprintf("p%d@throwaway.example", i)); err != nil {
				t.Fatalf("registration %d: %v", i, err)
			}
		}
		expectOutcome(t, l.register("10.6.0.1", "one-more@throwaway.example"), 429, "Too Many Requests", "")
		if err := l.register("10.6.0.1", "someone@elsewhere.example"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("POST /auth/newuser", func(t *testing.T) {
		s := another(t, Config{BaseURL: testBase})
		body := func(i int) map[string]any {
			return map[string]any{"firstName": "Many", "lastName": "Accounts", "email": newEmail(fmt.Sprintf("many%d", i)), "password": "a long password"}
		}
		for i := range maxRegistrationsPerAddress {
			resp, err := s.newUser(context.Background(), jsonRequest("10.7.0.1", body(i)))
			decoded(t, resp, err, 200)
		}
		_, err := s.newUser(context.Background(), jsonRequest("10.7.0.1", body(-1)))
		expectOutcome(t, err, 429, "Too Many Requests", "")
	})
}
