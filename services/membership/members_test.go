package membership

import "testing"

const storedMember = `{
	"resourceType":"ProjectMembership","id":"m-1",
	"meta":{"versionId":"1","lastUpdated":"2026-11-25T12:00:00Z"},
	"project":{"reference":"Project/p-1","display":"Clinic"},
	"user":{"reference":"User/u-1","display":"ada@example.com"},
	"profile":{"reference":"Practitioner/pr-1","display":"Ada Lovelace"},
	"admin":false,
	"extension":[{"url":"https://example.com/rank","valueDecimal":1.50}]
}`

func TestCheckMemberChange(t *testing.T) {
	const notHere = " of a membership cannot be changed here; only admin, accessPolicy, access and active can"
	cases := []struct {
		name       string
		next       string // fields set on the stored membership; null removes
		text, expr string
	}{
		{"unchanged", `{}`, "", ""},
		{"promote", `{"admin":true}`, "", ""},
		{"policies", `{"accessPolicy":{"reference":"AccessPolicy/1"},"access":[{"policy":{"reference":"AccessPolicy/2"}}]}`, "", ""},
		{"deactivate", `{"active":false}`, "", ""},
		{"meta, which the server keeps", `{"meta":{"versionId":"9"}}`, "", ""},
		{"meta removed", `{"meta":null}`, "", ""},
		{"admin removed", `{"admin":null}`, "", ""},
		// Numbers compare by value: a client re-sends 1.5 for the stored 1.50.
		{"number respelled", `{"extension":[{"url":"https://example.com/rank","valueDecimal":1.5}]}`, "", ""},

		{"profile", `{"profile":{"reference":"Practitioner/someone-else"}}`, "Field profile" + notHere, "profile"},
		{"profile display", `{"profile":{"reference":"Practitioner/pr-1","display":"Someone"}}`, "Field profile" + notHere, "profile"},
		{"user", `{"user":{"reference":"User/someone-else"}}`, "Field user" + notHere, "user"},
		{"project", `{"project":{"reference":"Project/other"}}`, "Field project" + notHere, "project"},
		{"id", `{"id":"m-2"}`, "Field id" + notHere, "id"},
		{"resource type", `{"resourceType":"Patient"}`, "Field resourceType" + notHere, "resourceType"},
		{"field removed", `{"user":null}`, "Field user" + notHere, "user"},
		{"field added", `{"externalId":"e-1"}`, "Field externalId" + notHere, "externalId"},
		{"invitedBy added", `{"invitedBy":{"reference":"User/x"}}`, "Field invitedBy" + notHere, "invitedBy"},
		{"number changed", `{"extension":[{"url":"https://example.com/rank","valueDecimal":1.51}]}`, "Field extension" + notHere, "extension"},
		{"first field by name", `{"user":{"reference":"User/x"},"profile":{"reference":"Practitioner/x"},"extension":[]}`, "Field extension" + notHere, "extension"},

		{"admin as text", `{"admin":"true"}`, "admin must be a boolean", "admin"},
		{"admin a number", `{"admin":1}`, "admin must be a boolean", "admin"},
		{"a forbidden change is named before a bad admin", `{"admin":"yes","user":{"reference":"User/x"}}`, "Field user" + notHere, "user"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := decode(t, storedMember)
			next := decode(t, storedMember)
			for k, v := range decode(t, tc.next) {
				if v == nil {
					delete(next, k)
				} else {
					next[k] = v
				}
			}
			err := checkMemberChange(old, next)
			if tc.text == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			wantError(t, err, 400, tc.text, tc.expr)
		})
	}
}

// An explicit null admin is not a boolean.
func TestCheckMemberChangeNullAdmin(t *testing.T) {
	old := decode(t, storedMember)
	next := decode(t, storedMember)
	next["admin"] = nil
	wantError(t, checkMemberChange(old, next), 400, "admin must be a boolean", "admin")
}

func TestNormalize(t *testing.T) {
	cases := []struct {
		name  string
		a, b  string
		equal bool
	}{
		{"same number, other spelling", `{"v":1.0}`, `{"v":1}`, true},
		{"exponent", `{"v":1e2}`, `{"v":100}`, true},
		{"different number", `{"v":1}`, `{"v":2}`, false},
		{"number and text", `{"v":1}`, `{"v":"1"}`, false},
		{"key order", `{"v":{"a":1,"b":2}}`, `{"v":{"b":2,"a":1}}`, true},
		{"list order matters", `{"v":[1,2]}`, `{"v":[2,1]}`, false},
		{"null and absent", `{"v":null}`, `{}`, true},
		{"empty list and absent", `{"v":[]}`, `{}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := decode(t, tc.a)["v"], decode(t, tc.b)["v"]
			err := checkMemberChange(map[string]any{"v": a}, map[string]any{"v": b})
			if (err == nil) != tc.equal {
				t.Errorf("%s vs %s: equal %v, want %v", tc.a, tc.b, err == nil, tc.equal)
			}
		})
	}
}
