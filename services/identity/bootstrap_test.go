package identity

import (
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/auth"
)

// A client's current secret works, and after a rotation the old one for
// the grace period only.
func TestClientCredMatches(t *testing.T) {
	const current, retiring = "current-secret", "retiring-secret"
	cases := []struct {
		name     string
		cred     clientCred
		secret   string
		matches  bool
		retiring bool
	}{
		{"current", clientCred{Digest: auth.SecretDigest(current)}, current, true, false},
		{"wrong", clientCred{Digest: auth.SecretDigest(current)}, "guess", false, false},
		{"empty", clientCred{Digest: auth.SecretDigest(current)}, "", false, false},
		{"retiring, in its grace", clientCred{Digest: auth.SecretDigest(current), Retiring: auth.SecretDigest(retiring),
			RetiringUntil: time.Now().Add(time.Hour)}, retiring, true, true},
		{"current, while another retires", clientCred{Digest: auth.SecretDigest(current), Retiring: auth.SecretDigest(retiring),
			RetiringUntil: time.Now().Add(time.Hour)}, current, true, false},
		{"retiring, past its grace", clientCred{Digest: auth.SecretDigest(current), Retiring: auth.SecretDigest(retiring),
			RetiringUntil: time.Now().Add(-time.Hour)}, retiring, false, false},
		{"retiring, no end set", clientCred{Digest: auth.SecretDigest(current), Retiring: auth.SecretDigest(retiring)}, retiring, false, false},
		{"a digest is not a secret", clientCred{Digest: auth.SecretDigest(current)}, auth.SecretDigest(current), false, false},
		{"no credentials", clientCred{}, "", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cred.matches(tc.secret); got != tc.matches {
				t.Fatalf("matches = %v, want %v", got, tc.matches)
			}
			if got := tc.cred.retiringMatches(tc.secret); got != tc.retiring {
				t.Fatalf("retiringMatches = %v, want %v", got, tc.retiring)
			}
		})
	}
}

// The bootstrap's ids are fixed: a changed one would make a second super
// admin project beside the stored one at the next start.
func TestBootstrapIDsAreFixed(t *testing.T) {
	if SuperAdminProjectID != "404b95f2-28ac-54bd-a2f4-fda6b3685961" {
		t.Fatalf("super-admin project %s", SuperAdminProjectID)
	}
	if got := membershipIDFor("ClientApplication/c1"); got != "ba2bfe74-cc87-57d9-99e0-4e7a9a9e13cc" {
		t.Fatalf("membership %s", got)
	}
	if membershipIDFor("ClientApplication/c1") == membershipIDFor("ClientApplication/c2") {
		t.Fatal("two clients share a membership id")
	}
}
