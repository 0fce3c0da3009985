package membership

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/invite"
)

const baseInvite = `{"resourceType":"Practitioner","firstName":"Ada","lastName":"Lovelace","email":"ada@example.com"}`

// inviteOf is the base invite with the fields of set (a JSON object)
// replaced and those named in drop removed.
func inviteOf(t *testing.T, set string, drop ...string) map[string]any {
	t.Helper()
	body := decode(t, baseInvite)
	if set != "" {
		for k, v := range decode(t, set) {
			body[k] = v
		}
	}
	for _, k := range drop {
		delete(body, k)
	}
	return body
}

func TestCheckInviteIssues(t *testing.T) {
	long := strings.Repeat("x", 100_000)
	cases := []struct {
		name string
		set  string
		drop []string
		want []string
	}{
		{"valid", "", nil, nil},
		{"empty body", "", []string{"resourceType", "firstName", "lastName", "email"}, []string{
			"resourceType: Resource type is required",
			"firstName: First name is required",
			"lastName: Last name is required",
			"email: Either email or externalId is required",
		}},

		// Unknown fields come first, in name order.
		{"unknown field", `{"superAdmin":true}`, nil, []string{"superAdmin: Unknown field: superAdmin"}},
		{"unknown fields sorted", `{"zeta":1,"alpha":null,"Mid":"x"}`, nil, []string{
			"Mid: Unknown field: Mid", "alpha: Unknown field: alpha", "zeta: Unknown field: zeta",
		}},
		{"unknown before the rest", `{"project":"x","resourceType":"Bot"}`, nil, []string{
			"project: Unknown field: project", "resourceType: Resource type is required",
		}},
		{"field names are case-sensitive", `{"FirstName":"Ada"}`, nil, []string{"FirstName: Unknown field: FirstName"}},
		// fhir.FieldIssue leaves out an empty expression.
		{"empty field name", `{"":1}`, nil, []string{": Unknown field: "}},
		{"very long unknown name", `{"` + long + `":1}`, nil, []string{long + ": Unknown field: " + long}},

		{"resource type not a profile type", `{"resourceType":"Observation"}`, nil, []string{"resourceType: Resource type is required"}},
		{"resource type lower case", `{"resourceType":"patient"}`, nil, []string{"resourceType: Resource type is required"}},
		{"resource type empty", `{"resourceType":""}`, nil, []string{"resourceType: Resource type is required"}},
		{"resource type a number", `{"resourceType":5}`, nil, []string{"resourceType: Resource type is required"}},
		{"resource type an object", `{"resourceType":{"value":"Patient"}}`, nil, []string{"resourceType: Resource type is required"}},
		{"resource type absent", "", []string{"resourceType"}, []string{"resourceType: Resource type is required"}},
		{"resource type padded", `{"resourceType":"  RelatedPerson  "}`, nil, nil},

		{"first name empty", `{"firstName":""}`, nil, []string{"firstName: First name is required"}},
		{"first name blank", `{"firstName":" \t\n"}`, nil, []string{"firstName: First name is required"}},
		{"first name null", `{"firstName":null}`, nil, []string{"firstName: First name is required"}},
		{"first name a number", `{"firstName":1}`, nil, []string{"firstName: First name is required"}},
		{"first name an array", `{"firstName":["Ada"]}`, nil, []string{"firstName: First name is required"}},
		{"first name very long", `{"firstName":"` + long + `"}`, nil, nil},
		{"last name absent", "", []string{"lastName"}, []string{"lastName: Last name is required"}},
		{"last name false", `{"lastName":false}`, nil, []string{"lastName: Last name is required"}},

		{"email not an address", `{"email":"not-an-email"}`, nil, []string{"email: Either email or externalId is required"}},
		{"email with a display name", `{"email":"Ada <ada@example.com>"}`, nil, []string{"email: Either email or externalId is required"}},
		{"email two addresses", `{"email":"a@example.com, b@example.com"}`, nil, []string{"email: Either email or externalId is required"}},
		{"email a number", `{"email":42}`, nil, []string{"email: Either email or externalId is required"}},
		{"email and externalId absent", "", []string{"email"}, []string{"email: Either email or externalId is required"}},
		{"externalId blank", `{"externalId":"  "}`, []string{"email"}, []string{"email: Either email or externalId is required"}},
		{"externalId stands in", `{"externalId":"ext-1"}`, []string{"email"}, nil},
		{"externalId covers a bad email", `{"externalId":"ext-1","email":"nope"}`, nil, nil},
		{"email very long", `{"email":"` + strings.Repeat("a", 10_000) + `@example.com"}`, nil, nil},

		{"scope other", `{"scope":"other"}`, nil, []string{"scope: Scope must be project or server"}},
		{"scope capitalised", `{"scope":"Project"}`, nil, []string{"scope: Scope must be project or server"}},
		{"scope a number", `{"scope":1}`, nil, nil}, // not a string: read as absent
		{"scope project", `{"scope":"project"}`, nil, nil},
		{"scope server", `{"scope":" server "}`, nil, nil},

		{"password short", `{"password":"short"}`, nil, []string{"password: Invalid password, must be at least 8 characters"}},
		{"password seven", `{"password":"1234567"}`, nil, []string{"password: Invalid password, must be at least 8 characters"}},
		{"password eight", `{"password":"12345678"}`, nil, nil},
		{"password empty", `{"password":""}`, nil, []string{"password: Invalid password, must be at least 8 characters"}},
		{"password null", `{"password":null}`, nil, []string{"password: Invalid password, must be at least 8 characters"}},
		{"password a number", `{"password":123456789}`, nil, []string{"password: Invalid password, must be at least 8 characters"}},
		{"password very long", `{"password":"` + long + `"}`, nil, nil},

		{"sendEmail maybe", `{"sendEmail":"maybe"}`, nil, []string{"sendEmail: sendEmail must be a boolean"}},
		{"sendEmail TRUE", `{"sendEmail":"TRUE"}`, nil, []string{"sendEmail: sendEmail must be a boolean"}},
		{"sendEmail a number", `{"sendEmail":1}`, nil, []string{"sendEmail: sendEmail must be a boolean"}},
		{"sendEmail an object", `{"sendEmail":{}}`, nil, []string{"sendEmail: sendEmail must be a boolean"}},
		{"sendEmail null", `{"sendEmail":null}`, nil, nil},
		{"sendEmail text", `{"sendEmail":"false"}`, nil, nil},
		{"upsert yes", `{"upsert":"yes"}`, nil, []string{"upsert: upsert must be a boolean"}},
		{"forceNewMembership zero", `{"forceNewMembership":0}`, nil, []string{"forceNewMembership: forceNewMembership must be a boolean"}},
		{"mfaRequired x", `{"mfaRequired":"x"}`, nil, []string{"mfaRequired: mfaRequired must be a boolean"}},
		{"mfaRequired true", `{"mfaRequired":true}`, nil, nil},
		{"admin yes", `{"admin":"yes"}`, nil, []string{"admin: admin must be a boolean"}},
		{"admin a list", `{"admin":[true]}`, nil, []string{"admin: admin must be a boolean"}},
		{"admin text", `{"admin":"true"}`, nil, nil},

		{"membership text", `{"membership":"admin"}`, nil, []string{"membership: membership must be an object"}},
		{"membership null", `{"membership":null}`, nil, []string{"membership: membership must be an object"}},
		{"membership a list", `{"membership":[{"admin":true}]}`, nil, []string{"membership: membership must be an object"}},
		{"membership empty", `{"membership":{}}`, nil, nil},
		{"membership sets the project", `{"membership":{"project":{"reference":"Project/other"}}}`, nil, []string{
			"membership.project: An invite cannot set membership.project",
		}},
		{"membership sets several", `{"membership":{"user":{},"admin":true,"project":{},"invitedBy":{}}}`, nil, []string{
			"membership.invitedBy: An invite cannot set membership.invitedBy",
			"membership.project: An invite cannot set membership.project",
			"membership.user: An invite cannot set membership.user",
		}},
		{"membership admin text", `{"membership":{"admin":"true"}}`, nil, []string{"membership.admin: admin must be a boolean"}},
		{"membership admin null", `{"membership":{"admin":null}}`, nil, []string{"membership.admin: admin must be a boolean"}},
		{"membership admin overrides a good one", `{"admin":true,"membership":{"admin":1}}`, nil, []string{
			"membership.admin: admin must be a boolean",
		}},
		{"bad top-level admin is not reported twice", `{"admin":"yes","membership":{}}`, nil, []string{"admin: admin must be a boolean"}},
		// Its shape is checked with the policies, after the project's data.
		{"membership access not a list", `{"membership":{"access":"x"}}`, nil, nil},
		{"membership every allowed field", `{"membership":{"admin":false,"access":[],"accessPolicy":null,"externalId":"e","profile":null,"active":true,"userName":"u"}}`, nil, nil},

		{"patient for a Practitioner", `{"patient":{"reference":"Patient/1"}}`, nil, []string{"patient: patient is only for RelatedPerson invites"}},
		{"patient null for a Patient", `{"resourceType":"Patient","patient":null}`, nil, []string{"patient: patient is only for RelatedPerson invites"}},
		{"patient valid", `{"resourceType":"RelatedPerson","patient":{"reference":"Patient/1"}}`, nil, nil},
		{"patient as text", `{"resourceType":"RelatedPerson","patient":"Patient/1"}`, nil, []string{"patient: patient must be a Patient reference"}},
		{"patient of another type", `{"resourceType":"RelatedPerson","patient":{"reference":"Practitioner/1"}}`, nil, []string{"patient: patient must be a Patient reference"}},
		{"patient without id", `{"resourceType":"RelatedPerson","patient":{"reference":"Patient/"}}`, nil, []string{"patient: patient must be a Patient reference"}},
		{"patient without reference", `{"resourceType":"RelatedPerson","patient":{"display":"Pat"}}`, nil, []string{"patient: patient must be a Patient reference"}},
		{"patient reference a number", `{"resourceType":"RelatedPerson","patient":{"reference":7}}`, nil, []string{"patient: patient must be a Patient reference"}},
		{"patient null", `{"resourceType":"RelatedPerson","patient":null}`, nil, []string{"patient: patient must be a Patient reference"}},

		{"every rule at once, in order", `{
			"zz":1, "resourceType":"Observation", "firstName":"", "lastName":" ", "email":"x", "scope":"all",
			"password":"short", "sendEmail":"x", "upsert":"x", "forceNewMembership":"x", "mfaRequired":"x", "admin":"x",
			"membership":{"admin":"x","user":{}}, "patient":{"reference":"Patient/1"}}`, nil, []string{
			"zz: Unknown field: zz",
			"resourceType: Resource type is required",
			"firstName: First name is required",
			"lastName: Last name is required",
			"email: Either email or externalId is required",
			"scope: Scope must be project or server",
			"password: Invalid password, must be at least 8 characters",
			"sendEmail: sendEmail must be a boolean",
			"upsert: upsert must be a boolean",
			"forceNewMembership: forceNewMembership must be a boolean",
			"mfaRequired: mfaRequired must be a boolean",
			"admin: admin must be a boolean",
			"membership.user: An invite cannot set membership.user",
			"membership.admin: admin must be a boolean",
			"patient: patient is only for RelatedPerson invites",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, issues := checkInvite(readInvite(inviteOf(t, tc.set, tc.drop...)))
			wantLines(t, issueLines(t, issues), tc.want)
			if (d == nil) != (len(tc.want) > 0) {
				t.Errorf("draft %v with %d issues: want exactly one of them", d, len(issues))
			}
		})
	}
}

// The issues become the 400 the caller sees, in this order (Medplum's
// client shows them by field).
func TestCheckInviteOutcome(t *testing.T) {
	_, issues := checkInvite(readInvite(decode(t, `{"resourceType":"Practitioner","email":"x"}`)))
	got := string(fhir.Invalid(issues...).JSON())
	want := `{"resourceType":"OperationOutcome","issue":[` +
		`{"severity":"error","code":"invalid","details":{"text":"First name is required"},"expression":["firstName"]},` +
		`{"severity":"error","code":"invalid","details":{"text":"Last name is required"},"expression":["lastName"]},` +
		`{"severity":"error","code":"invalid","details":{"text":"Either email or externalId is required"},"expression":["email"]}]}`
	if got != want {
		t.Errorf("outcome\n %s\nwant\n %s", got, want)
	}
}

func TestCheckInviteRequest(t *testing.T) {
	base := func(f func(r *invite.Request)) invite.Request {
		r := invite.Request{
			ResourceType: "Practitioner", FirstName: "Ada", LastName: "Lovelace", Email: "ada@example.com",
			SendEmail: true, Membership: map[string]any{"admin": false},
		}
		if f != nil {
			f(&r)
		}
		return r
	}
	cases := []struct {
		name     string
		set      string
		drop     []string
		want     invite.Request
		password string
		profile  optional
	}{
		{"defaults", "", nil, base(nil), "", optional{}},
		{"names and type trimmed", `{"resourceType":" Patient ","firstName":"  Ada ","lastName":"\tLovelace\n"}`, nil, base(func(r *invite.Request) {
			r.ResourceType, r.ProjectScoped = "Patient", true
		}), "", optional{}},
		{"email lower-cased and trimmed", `{"email":"  Ada.L@Example.COM "}`, nil, base(func(r *invite.Request) { r.Email = "ada.l@example.com" }), "", optional{}},
		{"bad email dropped for externalId", `{"email":"nope","externalId":" ext-1 "}`, nil, base(func(r *invite.Request) {
			r.Email, r.ExternalID, r.ProjectScoped = "", "ext-1", true
			r.Membership["externalId"] = "ext-1"
		}), "", optional{}},

		// Who is a user of this project only (Medplum's rule).
		{"patient is project-scoped", `{"resourceType":"Patient"}`, nil, base(func(r *invite.Request) {
			r.ResourceType, r.ProjectScoped = "Patient", true
		}), "", optional{}},
		{"patient at server scope", `{"resourceType":"Patient","scope":"server"}`, nil, base(func(r *invite.Request) {
			r.ResourceType = "Patient"
		}), "", optional{}},
		{"practitioner at project scope", `{"scope":"project"}`, nil, base(func(r *invite.Request) { r.ProjectScoped = true }), "", optional{}},
		{"externalId wins over server scope", `{"scope":"server","externalId":"e"}`, nil, base(func(r *invite.Request) {
			r.ExternalID, r.ProjectScoped = "e", true
			r.Membership["externalId"] = "e"
		}), "", optional{}},
		{"related person at server scope", `{"resourceType":"RelatedPerson"}`, nil, base(func(r *invite.Request) {
			r.ResourceType = "RelatedPerson"
		}), "", optional{}},

		{"sendEmail false", `{"sendEmail":false}`, nil, base(func(r *invite.Request) { r.SendEmail = false }), "", optional{}},
		{"sendEmail text false", `{"sendEmail":"false"}`, nil, base(func(r *invite.Request) { r.SendEmail = false }), "", optional{}},
		{"sendEmail text true", `{"sendEmail":"true"}`, nil, base(nil), "", optional{}},
		{"sendEmail null is the default", `{"sendEmail":null}`, nil, base(nil), "", optional{}},
		{"upsert and force", `{"upsert":"true","forceNewMembership":true}`, nil, base(func(r *invite.Request) {
			r.Upsert, r.ForceNewMembership = true, true
		}), "", optional{}},
		{"mfaRequired kept", `{"mfaRequired":true}`, nil, base(func(r *invite.Request) { r.MFARequired = true }), "", optional{}},
		{"password kept as sent", `{"password":"  spaced pass  "}`, nil, base(nil), "  spaced pass  ", optional{}},

		// The membership template.
		{"admin", `{"admin":true}`, nil, base(func(r *invite.Request) { r.Membership["admin"] = true }), "", optional{}},
		{"admin as text", `{"admin":"true"}`, nil, base(func(r *invite.Request) { r.Membership["admin"] = true }), "", optional{}},
		{"admin null is absent", `{"admin":null}`, nil, base(nil), "", optional{}},
		{"membership admin wins", `{"admin":true,"membership":{"admin":false}}`, nil, base(nil), "", optional{}},
		{"top-level policies", `{"accessPolicy":{"reference":"AccessPolicy/1"},"access":[{"policy":{"reference":"AccessPolicy/2"}}]}`, nil,
			base(func(r *invite.Request) {
				r.Membership["accessPolicy"] = map[string]any{"reference": "AccessPolicy/1"}
				r.Membership["access"] = []any{map[string]any{"policy": map[string]any{"reference": "AccessPolicy/2"}}}
			}), "", optional{}},
		{"null policies are kept, to be refused later", `{"accessPolicy":null,"access":null}`, nil, base(func(r *invite.Request) {
			r.Membership["accessPolicy"], r.Membership["access"] = nil, nil
		}), "", optional{}},
		{"membership policy wins", `{"accessPolicy":{"reference":"AccessPolicy/1"},"membership":{"accessPolicy":{"reference":"AccessPolicy/2"}}}`, nil,
			base(func(r *invite.Request) { r.Membership["accessPolicy"] = map[string]any{"reference": "AccessPolicy/2"} }), "", optional{}},
		{"membership externalId is the membership's only", `{"externalId":"top","membership":{"externalId":"inner"}}`, nil,
			base(func(r *invite.Request) {
				r.ExternalID, r.ProjectScoped = "top", true
				r.Membership["externalId"] = "inner"
			}), "", optional{}},
		{"membership fields passed on", `{"membership":{"active":false,"userName":"ada"}}`, nil, base(func(r *invite.Request) {
			r.Membership["active"], r.Membership["userName"] = false, "ada"
		}), "", optional{}},
		{"profile taken out of the template", `{"membership":{"profile":{"reference":"Practitioner/1"}}}`, nil, base(nil), "",
			optional{Set: true, Value: map[string]any{"reference": "Practitioner/1"}}},
		{"null profile is still a profile", `{"membership":{"profile":null}}`, nil, base(nil), "", optional{Set: true}},
		{"patient", `{"resourceType":"RelatedPerson","patient":{"reference":"Patient/p1","display":"Pat"}}`, nil, base(func(r *invite.Request) {
			r.ResourceType, r.Patient = "RelatedPerson", "Patient/p1"
		}), "", optional{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, issues := checkInvite(readInvite(inviteOf(t, tc.set, tc.drop...)))
			if len(issues) > 0 {
				t.Fatalf("issues: %v", issueLines(t, issues))
			}
			if !reflect.DeepEqual(d.Request, tc.want) {
				got, _ := json.Marshal(d.Request)
				want, _ := json.Marshal(tc.want)
				t.Errorf("request\n %s\nwant\n %s", got, want)
			}
			if d.Password != tc.password {
				t.Errorf("password %q, want %q", d.Password, tc.password)
			}
			if !reflect.DeepEqual(d.Profile, tc.profile) {
				t.Errorf("profile %+v, want %+v", d.Profile, tc.profile)
			}
		})
	}
}

// The template is the invite's own: checking does not change the body.
func TestCheckInviteLeavesBodyAlone(t *testing.T) {
	body := inviteOf(t, `{"membership":{"profile":{"reference":"Practitioner/1"},"admin":true}}`)
	d, issues := checkInvite(readInvite(body))
	if len(issues) > 0 {
		t.Fatal(issueLines(t, issues))
	}
	d.Request.Membership["invitedBy"] = "x"
	m := body["membership"].(map[string]any)
	if len(m) != 2 || m["profile"] == nil || m["invitedBy"] != nil {
		t.Errorf("body's membership changed: %v", m)
	}
}

func TestReadInvite(t *testing.T) {
	pw := func(s string) *string { return &s }
	cases := []struct {
		name string
		body string
		want inviteInput
	}{
		{"empty", `{}`, inviteInput{}},
		{"texts trimmed, wrong types empty", `{"resourceType":" Patient ","firstName":1,"lastName":null,"email":" A@B.C ","externalId":["e"],"scope":" server"}`,
			inviteInput{ResourceType: "Patient", Email: "A@B.C", Scope: "server"}},
		{"password untrimmed", `{"password":" secret "}`, inviteInput{Password: pw(" secret ")}},
		{"password not text", `{"password":12345678}`, inviteInput{Password: pw("")}},
		{"flags", `{"sendEmail":"false","upsert":true,"forceNewMembership":"true","mfaRequired":null,"admin":"no"}`, inviteInput{
			SendEmail: flag{Set: true}, Upsert: flag{Set: true, Value: true}, ForceNewMembership: flag{Set: true, Value: true},
			Admin: flag{Invalid: true},
		}},
		{"passed on as sent, null included", `{"accessPolicy":null,"access":"x","membership":{"admin":true},"patient":{"reference":"Patient/1"}}`, inviteInput{
			AccessPolicy: optional{Set: true}, Access: optional{Set: true, Value: "x"},
			Membership: optional{Set: true, Value: map[string]any{"admin": true}},
			Patient:    optional{Set: true, Value: map[string]any{"reference": "Patient/1"}},
		}},
		{"unknown fields sorted", `{"b":1,"a":2,"firstName":"x"}`, inviteInput{Unknown: []string{"a", "b"}, FirstName: "x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := readInvite(decode(t, tc.body)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestFlagOf(t *testing.T) {
	cases := []struct {
		in   any
		want flag
	}{
		{nil, flag{}},
		{true, flag{Set: true, Value: true}},
		{false, flag{Set: true}},
		{"true", flag{Set: true, Value: true}},
		{"false", flag{Set: true}},
		{"True", flag{Invalid: true}},
		{" true", flag{Invalid: true}},
		{"", flag{Invalid: true}},
		{"1", flag{Invalid: true}},
		{json.Number("1"), flag{Invalid: true}},
		{map[string]any{}, flag{Invalid: true}},
		{[]any{true}, flag{Invalid: true}},
	}
	for _, tc := range cases {
		if got := flagOf(tc.in); got != tc.want {
			t.Errorf("flagOf(%#v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestPolicyRefs(t *testing.T) {
	cases := []struct {
		name     string
		m        string
		want     []policyRef
		errText  string
		errField string
	}{
		{"none", `{"admin":true}`, nil, "", ""},
		{"accessPolicy", `{"accessPolicy":{"reference":"AccessPolicy/1"}}`, []policyRef{{"membership.accessPolicy", "AccessPolicy/1"}}, "", ""},
		{"accessPolicy null", `{"accessPolicy":null}`, []policyRef{{"membership.accessPolicy", ""}}, "", ""},
		{"accessPolicy as text", `{"accessPolicy":"AccessPolicy/1"}`, []policyRef{{"membership.accessPolicy", ""}}, "", ""},
		{"access empty", `{"access":[]}`, nil, "", ""},
		{"access entries", `{"access":[{"policy":{"reference":"AccessPolicy/1"}},{"policy":{"reference":"AccessPolicy/2"},"parameter":[]}]}`,
			[]policyRef{{"membership.access[0].policy", "AccessPolicy/1"}, {"membership.access[1].policy", "AccessPolicy/2"}}, "", ""},
		{"access entry not an object", `{"access":[1,"x",null]}`, []policyRef{
			{"membership.access[0].policy", ""}, {"membership.access[1].policy", ""}, {"membership.access[2].policy", ""},
		}, "", ""},
		{"accessPolicy then access", `{"access":[{"policy":{"reference":"AccessPolicy/2"}}],"accessPolicy":{"reference":"AccessPolicy/1"}}`,
			[]policyRef{{"membership.accessPolicy", "AccessPolicy/1"}, {"membership.access[0].policy", "AccessPolicy/2"}}, "", ""},
		{"access text", `{"access":"x"}`, nil, "access must be an array", "membership.access"},
		{"access null", `{"access":null}`, nil, "access must be an array", "membership.access"},
		{"access object", `{"access":{"policy":{"reference":"AccessPolicy/1"}}}`, nil, "access must be an array", "membership.access"},
		{"parameter object", `{"access":[{"policy":{"reference":"AccessPolicy/1"},"parameter":{"name":"patient"}}]}`, nil,
			"parameter must be an array", "membership.access[0].parameter"},
		{"parameter null", `{"access":[{"policy":{"reference":"AccessPolicy/1"},"parameter":null}]}`, nil,
			"parameter must be an array", "membership.access[0].parameter"},
		// A malformed list is refused whole, before any policy is looked up.
		{"shape before references", `{"accessPolicy":"bad","access":[{"policy":"bad"},{"parameter":"x"}]}`, nil,
			"parameter must be an array", "membership.access[1].parameter"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			refs, err := policyRefs(decode(t, tc.m))
			if tc.errText != "" {
				wantError(t, err, 400, tc.errText, tc.errField)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(refs, tc.want) {
				t.Errorf("refs %+v, want %+v", refs, tc.want)
			}
		})
	}
}

func TestProfileRef(t *testing.T) {
	cases := []struct {
		name    string
		v       any
		typ, id string
	}{
		{"reference", map[string]any{"reference": "Practitioner/1"}, "Practitioner", "1"},
		{"with history", map[string]any{"reference": "Patient/1/_history/3"}, "Patient", "1"},
		{"absolute", map[string]any{"reference": "https://example.com/fhir/R4/RelatedPerson/r"}, "RelatedPerson", "r"},
		{"text", "Practitioner/1", "", ""},
		{"null", nil, "", ""},
		{"no id", map[string]any{"reference": "Practitioner/"}, "", ""},
		{"no slash", map[string]any{"reference": "Practitioner"}, "", ""},
		{"reference a number", map[string]any{"reference": json.Number("1")}, "", ""},
		{"identifier only", map[string]any{"identifier": map[string]any{"value": "x"}}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			typ, id, err := profileRef(tc.v)
			if tc.typ == "" {
				wantError(t, err, 400, "Invalid profile reference", "membership.profile")
				return
			}
			if err != nil || typ != tc.typ || id != tc.id {
				t.Errorf("profileRef = %q, %q, %v; want %q, %q", typ, id, err, tc.typ, tc.id)
			}
		})
	}
}

func TestRefOf(t *testing.T) {
	cases := []struct {
		v    any
		ref  string
		isOK bool
	}{
		{map[string]any{"reference": "Patient/1"}, "Patient/1", true},
		{map[string]any{"reference": ""}, "", true},
		{map[string]any{"reference": 1}, "", false},
		{map[string]any{}, "", false},
		{"Patient/1", "", false},
		{nil, "", false},
		{[]any{map[string]any{"reference": "Patient/1"}}, "", false},
	}
	for _, tc := range cases {
		if ref, ok := refOf(tc.v); ref != tc.ref || ok != tc.isOK {
			t.Errorf("refOf(%#v) = %q, %v; want %q, %v", tc.v, ref, ok, tc.ref, tc.isOK)
		}
	}
}
