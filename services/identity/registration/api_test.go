package registration

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/services/identity/internal/outcometest"
)

func TestNewUserRequestCheck(t *testing.T) {
	const (
		badFirst    = "firstName: First name must be between 1 and 128 characters"
		badLast     = "lastName: Last name must be between 1 and 128 characters"
		badEmail    = "email: Valid email address between 3 and 72 characters is required"
		badPassword = "password: Password must be between 8 and 72 characters"
	)
	ok := newUserRequest{FirstName: "Ada", LastName: "Lovelace", Email: "ada@example.com", Password: "12345678"}
	cases := []struct {
		name string
		edit func(*newUserRequest)
		want []string
	}{
		{"valid", nil, nil},
		{"spaces and capitals in the address", func(in *newUserRequest) { in.Email = "  Ada@Example.COM " }, nil},
		{"no first name", func(in *newUserRequest) { in.FirstName = "" }, []string{badFirst}},
		{"a long last name", func(in *newUserRequest) { in.LastName = strings.Repeat("é", 129) }, []string{badLast}},
		{"128 characters of a name, more bytes", func(in *newUserRequest) { in.LastName = strings.Repeat("é", 128) }, nil},
		{"not an address", func(in *newUserRequest) { in.Email = "ada" }, []string{badEmail}},
		{"an address with a name", func(in *newUserRequest) { in.Email = "Ada <ada@example.com>" }, []string{badEmail}},
		{"a long address", func(in *newUserRequest) { in.Email = strings.Repeat("a", 61) + "@example.com" }, []string{badEmail}},
		{"a short password", func(in *newUserRequest) { in.Password = "1234567" }, []string{badPassword}},
		{"eight characters, more bytes", func(in *newUserRequest) { in.Password = "ééééééé" }, []string{badPassword}},
		{"72 characters of more bytes", func(in *newUserRequest) { in.Password = strings.Repeat("é", 72) }, nil},
		{"a long password", func(in *newUserRequest) { in.Password = strings.Repeat("p", 73) }, []string{badPassword}},
		{"everything", func(in *newUserRequest) { *in = newUserRequest{} }, []string{badFirst, badLast, badEmail, badPassword}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := ok
			if tc.edit != nil {
				tc.edit(&in)
			}
			if got := outcometest.Issues(t, in.check()); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%v, want %v", got, tc.want)
			}
		})
	}
}

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
		{"a provider's, names given", providerUser("p1", "Grace", "Hopper", "g@example.com"), map[string]any{
			"resourceType": "User", "email": "g@example.com", "emailVerified": true, "firstName": "Grace", "lastName": "Hopper",
			"project": map[string]any{"reference": "Project/p1"},
		}},
		{"a provider's, no names", providerUser("", "", "", "g@example.com"), map[string]any{
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
