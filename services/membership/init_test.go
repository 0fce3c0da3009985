package membership

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestInitParams(t *testing.T) {
	cases := []struct {
		name       string
		body       string
		project    string // as JSON
		ownerEmail string
		text, expr string
	}{
		{"name only", `{"resourceType":"Parameters","parameter":[{"name":"name","valueString":"Clinic"}]}`,
			`{"name":"Clinic","resourceType":"Project"}`, "", "", ""},
		{"no parameters", `{"resourceType":"Parameters"}`, `{"resourceType":"Project"}`, "", "", ""},
		{"owner e-mail normalised", `{"resourceType":"Parameters","parameter":[{"name":"name","valueString":"Clinic"},{"name":"ownerEmail","valueString":"  Owner@Example.COM "}]}`,
			`{"name":"Clinic","resourceType":"Project"}`, "owner@example.com", "", ""},
		{"owner reference", `{"resourceType":"Parameters","parameter":[{"name":"owner","valueReference":{"reference":"User/u-1","display":"Ada"}}]}`,
			`{"owner":{"reference":"User/u-1"},"resourceType":"Project"}`, "", "", ""},
		{"owner without a reference is ignored", `{"resourceType":"Parameters","parameter":[{"name":"owner","valueString":"User/u-1"}]}`,
			`{"resourceType":"Project"}`, "", "", ""},
		{"blank owner e-mail is none", `{"resourceType":"Parameters","parameter":[{"name":"owner","valueReference":{"reference":"User/u-1"}},{"name":"ownerEmail","valueString":"  "}]}`,
			`{"owner":{"reference":"User/u-1"},"resourceType":"Project"}`, "", "", ""},
		{"last name wins", `{"resourceType":"Parameters","parameter":[{"name":"name","valueString":"A"},{"name":"name","valueString":"B"}]}`,
			`{"name":"B","resourceType":"Project"}`, "", "", ""},

		{"owner and owner e-mail", `{"resourceType":"Parameters","parameter":[{"name":"ownerEmail","valueString":"o@example.com"},{"name":"owner","valueReference":{"reference":"User/u-1"}}]}`,
			"", "", "Give owner or ownerEmail, not both", "parameter"},
		{"unknown parameter", `{"resourceType":"Parameters","parameter":[{"name":"name","valueString":"x"},{"name":"strict","valueString":"x"}]}`,
			"", "", "Unknown parameter: strict", "parameter"},
		{"unknown before both owners", `{"resourceType":"Parameters","parameter":[{"name":"ownerEmail","valueString":"o@example.com"},{"name":"owner","valueReference":{"reference":"User/u-1"}},{"name":"x"}]}`,
			"", "", "Unknown parameter: x", "parameter"},
		{"nameless parameter", `{"resourceType":"Parameters","parameter":[{"valueString":"x"}]}`, "", "", "Unknown parameter: ", "parameter"},
		{"not Parameters", `{"resourceType":"Project","name":"x"}`, "", "", "Expected a Parameters resource", "resourceType"},
		{"no resource type", `{"parameter":[]}`, "", "", "Expected a Parameters resource", "resourceType"},
		{"not JSON", `{"resourceType":`, "", "", "Expected a Parameters resource", "resourceType"},
		{"parameter not a list", `{"resourceType":"Parameters","parameter":{"name":"name"}}`, "", "", "Expected a Parameters resource", "resourceType"},
		{"value of the wrong type", `{"resourceType":"Parameters","parameter":[{"name":"name","valueString":5}]}`, "", "", "Expected a Parameters resource", "resourceType"},
		{"reference of the wrong shape", `{"resourceType":"Parameters","parameter":[{"name":"owner","valueReference":"User/u-1"}]}`, "", "", "Expected a Parameters resource", "resourceType"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			project, ownerEmail, err := initParams([]byte(tc.body))
			if tc.text != "" {
				wantError(t, err, 400, tc.text, tc.expr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := json.Marshal(project); string(got) != tc.project {
				t.Errorf("project %s, want %s", got, tc.project)
			}
			if ownerEmail != tc.ownerEmail {
				t.Errorf("owner e-mail %q, want %q", ownerEmail, tc.ownerEmail)
			}
		})
	}
}

// The owner's invite is an invite like any other: it must pass the rules,
// and make a server-scoped admin who is e-mailed the set-password link.
func TestOwnerInvite(t *testing.T) {
	for _, name := range []string{"Clinic", "  Padded  ", strings.Repeat("Long ", 1000)} {
		body := ownerInvite(name, "owner@example.com")
		d, issues := checkInvite(readInvite(body))
		if len(issues) > 0 {
			t.Fatalf("%q: %v", name, issueLines(t, issues))
		}
		r := d.Request
		if r.ResourceType != "Practitioner" || r.FirstName != strings.TrimSpace(name) || r.LastName != "Admin" ||
			r.Email != "owner@example.com" || !r.SendEmail || r.ProjectScoped || r.Membership["admin"] != true {
			t.Errorf("%q: owner invite %+v", name, r)
		}
	}
}
