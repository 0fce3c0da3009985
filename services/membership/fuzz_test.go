package membership

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// inviteTexts are the only things the field rules may say, by prefix.
var inviteTexts = []string{
	"Unknown field: ", "Resource type is required", "First name is required", "Last name is required",
	"Either email or externalId is required", "Scope must be project or server",
	"Invalid password, must be at least 8 characters", " must be a boolean", "membership must be an object",
	"An invite cannot set membership.", "patient is only for RelatedPerson invites", "patient must be a Patient reference",
}

// FuzzCheckInvite: whatever the body, the rules answer with a valid draft
// or with issues, never both; each issue names one field and says one of
// the known things; a draft meets every rule and can be stored as JSON.
func FuzzCheckInvite(f *testing.F) {
	for _, seed := range []string{
		baseInvite,
		`{}`,
		`{"":""}`,
		`{"resourceType":"RelatedPerson","firstName":"R","lastName":"P","email":"r@example.com","patient":{"reference":"Patient/1"}}`,
		`{"resourceType":"Patient","firstName":"P","lastName":"Q","externalId":"e","scope":"server","password":"12345678","sendEmail":"false"}`,
		`{"resourceType":"Practitioner","firstName":"A","lastName":"B","email":"a@b.co","membership":{"admin":"x","profile":{"reference":"Practitioner/1"},"project":1}}`,
		`{"resourceType":"Practitioner","firstName":"A","lastName":"B","email":"a@b.co","admin":1e400,"access":[{"policy":null}],"membership":[]}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, js string) {
		body, err := fhir.Decode([]byte(js))
		if err != nil {
			return
		}
		d, issues := checkInvite(readInvite(body))
		if (d == nil) == (len(issues) == 0) {
			t.Fatalf("draft %v and %d issues", d, len(issues))
		}
		for _, i := range issues {
			// A field named "" is reported without an expression (fhir.FieldIssue).
			named := len(i.Expression) == 1 || i.Details != nil && i.Details.Text == "Unknown field: "
			if !named || i.Details == nil || !knownInviteText(i.Details.Text) {
				t.Fatalf("unexpected issue %+v", i)
			}
		}
		if d == nil {
			return
		}
		r := d.Request
		switch {
		case r.ResourceType != "Patient" && r.ResourceType != "Practitioner" && r.ResourceType != "RelatedPerson":
			t.Fatalf("resource type %q", r.ResourceType)
		case r.FirstName == "" || r.LastName == "" || r.FirstName != strings.TrimSpace(r.FirstName):
			t.Fatalf("names %q %q", r.FirstName, r.LastName)
		case r.Email == "" && r.ExternalID == "":
			t.Fatal("neither email nor externalId")
		case r.Email != strings.ToLower(r.Email):
			t.Fatalf("email %q not lower-case", r.Email)
		case d.Password != "" && len(d.Password) < 8:
			t.Fatalf("password %q", d.Password)
		case r.Patient != "" && r.ResourceType != "RelatedPerson":
			t.Fatal("patient on a", r.ResourceType)
		}
		if _, isBool := r.Membership["admin"].(bool); !isBool {
			t.Fatalf("template admin %#v", r.Membership["admin"])
		}
		for k := range r.Membership {
			if !membershipTemplateFields[k] || k == "profile" {
				t.Fatalf("template field %q", k)
			}
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("request cannot be stored: %v", err)
		}
	})
}

func knownInviteText(s string) bool {
	for _, k := range inviteTexts {
		if strings.HasPrefix(s, k) || strings.HasSuffix(s, k) {
			return true
		}
	}
	return false
}

// FuzzParseSecrets: what is accepted is a list of named secrets, names
// unique, each with exactly one well-typed value; what is refused is a 400.
func FuzzParseSecrets(f *testing.F) {
	for _, seed := range []string{
		`[]`, `[]]`, `null`, `[{"name":"a","valueString":"x"}]`, `[{"name":"a","valueInteger":2147483648}]`,
		`[{"name":"a","valueDecimal":1e999,"note":1},{"name":"a"}]`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, js string) {
		list, err := parseSecrets([]byte(js))
		if err != nil {
			if fe, ok := err.(*fhir.Error); !ok || fe.Status != 400 {
				t.Fatalf("error %v, want a 400", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, e := range list {
			sec := e.(map[string]any)
			name, _ := sec["name"].(string)
			if strings.TrimSpace(name) == "" || seen[name] || len(sec) != 2 {
				t.Fatalf("accepted %v", sec)
			}
			seen[name] = true
			for k, v := range sec {
				if k != "name" && !validSecretValue(k, v) {
					t.Fatalf("accepted %s %v", k, v)
				}
			}
		}
	})
}
