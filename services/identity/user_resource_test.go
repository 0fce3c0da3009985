package identity

import (
	"encoding/json"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
)

// The typed Users are stored as the maps they replaced were (issue 31,
// finding 3): the same JSON once the repository's check has dropped empty
// values.
func TestUserJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		u    *resource.User
		want map[string]any
	}{
		{"invited, in a project", resource.NewUser("p1", "Ada", "Lovelace", "ada@example.com"), map[string]any{
			"resourceType": "User", "firstName": "Ada", "lastName": "Lovelace", "email": "ada@example.com",
			"project": map[string]any{"reference": "Project/p1"},
		}},
		{"invited by external id, server user", resource.NewUser("", "Ada", "", ""), map[string]any{
			"resourceType": "User", "firstName": "Ada", "lastName": "",
		}},
		{"registered", resource.NewUser("", "Ada", "Lovelace", "ada@example.com"), map[string]any{
			"resourceType": "User", "firstName": "Ada", "lastName": "Lovelace", "email": "ada@example.com",
		}},
		{"Google, names given", googleUser("p1", "g@example.com", &googleClaims{GivenName: "Grace", FamilyName: "Hopper"}), map[string]any{
			"resourceType": "User", "email": "g@example.com", "emailVerified": true, "firstName": "Grace", "lastName": "Hopper",
			"project": map[string]any{"reference": "Project/p1"},
		}},
		{"Google, no names", googleUser("", "g@example.com", &googleClaims{}), map[string]any{
			"resourceType": "User", "email": "g@example.com", "emailVerified": true,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := resource.Map(tc.u)
			if err != nil {
				t.Fatal(err)
			}
			fhir.DropEmpty(m)
			fhir.DropEmpty(tc.want)
			got, _ := json.Marshal(m)
			want, _ := json.Marshal(tc.want)
			if string(got) != string(want) {
				t.Fatalf("%s\nwant %s", got, want)
			}
		})
	}
}
