package access

import (
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

const labCategory = "http://terminology.hl7.org/CodeSystem/observation-category|laboratory"

func TestParseSmartScope(t *testing.T) {
	cases := []struct {
		name, in, ctx, typ string
		allow              uint8
		constrained        bool
		bad                bool
	}{
		{name: "v1 read, every type", in: "patient/*.read", ctx: "patient", typ: "*", allow: readBits},
		{name: "v1 write", in: "user/Observation.write", ctx: "user", typ: "Observation", allow: bitCreate | bitUpdate | bitDelete},
		{name: "v1 star", in: "system/*.*", ctx: "system", typ: "*", allow: allBits},
		{name: "v2 cruds", in: "user/*.cruds", ctx: "user", typ: "*", allow: allBits},
		{name: "v2 rs", in: "patient/Observation.rs", ctx: "patient", typ: "Observation", allow: readBits},
		{name: "v2 r alone is no search", in: "user/Patient.r", ctx: "user", typ: "Patient", allow: bitRead | bitVRead | bitHistory},
		{name: "v2 c", in: "user/Patient.c", ctx: "user", typ: "Patient", allow: bitCreate},
		{name: "v2 ud", in: "user/Patient.ud", ctx: "user", typ: "Patient", allow: bitUpdate | bitDelete},
		{name: "v2 constraint", in: "patient/Observation.rs?category=" + labCategory, ctx: "patient", typ: "Observation", allow: readBits, constrained: true},
		{name: "common constraint on every type", in: "user/*.rs?_tag=http://example.org|x", ctx: "user", typ: "*", allow: readBits, constrained: true},
		{name: "no permissions", in: "patient/Observation.", bad: true},
		{name: "letters out of order", in: "patient/Observation.sr", bad: true},
		{name: "repeated letter", in: "patient/Observation.rr", bad: true},
		{name: "unknown letter", in: "patient/Observation.x", bad: true},
		{name: "unknown type", in: "patient/Foo.read", bad: true},
		{name: "unknown context", in: "clinic/Patient.read", bad: true},
		{name: "no type", in: "user/.read", bad: true},
		{name: "result parameter", in: "patient/Observation.rs?_count=5", bad: true},
		{name: "unknown parameter", in: "patient/Observation.rs?bogus=1", bad: true},
		{name: "empty constraint", in: "patient/Observation.rs?", bad: true},
		{name: "bad escape", in: "patient/Observation.rs?category=%zz", bad: true},
		{name: "chained parameter", in: "patient/Observation.rs?subject.name=x", bad: true},
		{name: "type parameter on every type", in: "patient/*.rs?category=x", bad: true},
		{name: "too long", in: "user/Patient.rs?_id=" + string(make([]byte, maxScopeTermLen)), bad: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseSmartScope(tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("%q parsed: %+v", tc.in, s)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.context != tc.ctx || s.typ != tc.typ || s.allow != tc.allow || (s.query != nil) != tc.constrained {
				t.Fatalf("%q: %s %s %s constrained %v", tc.in, s.context, s.typ, allowString(s.allow), s.query != nil)
			}
		})
	}
}

func TestGrantedScope(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"oidc only", "openid profile email", "openid profile email"},
		{"drops launch, unknown and malformed", "openid launch launch/patient patient/*.read foo user/Foo.read patient/Observation.sr fhirUser offline_access",
			"openid patient/*.read fhirUser offline_access"},
		{"duplicates once, request order", "user/*.cruds openid user/*.cruds offline online_access offline", "user/*.cruds openid offline online_access"},
		{"constraint kept as written", "patient/Observation.rs?category=" + labCategory, "patient/Observation.rs?category=" + labCategory},
		{"empty", "", ""},
	}
	for _, tc := range cases {
		if got := GrantedScope(tc.in); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func scopedMember(profile, scope string) *bus.Principal {
	p := member(profile)
	p.Scope = scope
	return p
}

// forbiddenText is the text of a 403, or "" for another answer.
func forbiddenText(err error) string {
	fe := fhir.AsError(err)
	if err == nil || fe.Status != 403 {
		return ""
	}
	return fe.Message()
}

func obsBody(category, subject string) string {
	return `{"resourceType":"Observation","status":"final","code":{"text":"x"},` +
		`"category":[{"coding":[{"system":"http://terminology.hl7.org/CodeSystem/observation-category","code":"` + category + `"}]}],` +
		`"subject":{"reference":"` + subject + `"}}`
}

func TestScopesNarrowPolicy(t *testing.T) {
	finalOnly := map[string]any{"resource": []any{
		map[string]any{"resourceType": "Observation", "criteria": "Observation?status=final"},
		map[string]any{"resourceType": "Patient", "readonly": true},
	}}
	withPolicy := map[string]any{"profile": ref("Practitioner/doc"), "accessPolicy": ref("AccessPolicy/final")}
	policies := map[string]any{"AccessPolicy/final": finalOnly}
	noPolicy := map[string]any{"profile": ref("Practitioner/doc")}
	obs := func(status string) string {
		return `{"resourceType":"Observation","status":"` + status + `","code":{"text":"x"}}`
	}

	type check struct {
		typ    string
		i      Interaction
		status int    // of Allow: 0 or 403
		text   string // the 403's text, when it says something
	}
	type read struct {
		typ, id, body string
		want          bool
	}
	cases := []struct {
		name       string
		profile    string
		scope      string
		membership map[string]any
		checks     []check
		reads      []read
	}{
		{
			name: "no SMART scopes leaves the policy", profile: "Practitioner/doc", scope: "openid profile offline_access",
			membership: withPolicy,
			checks:     []check{{typ: "Observation", i: Create}, {typ: "Patient", i: Read}, {typ: "Patient", i: Create, status: 403, text: "Forbidden"}},
			reads:      []read{{"Observation", "o", obs("final"), true}, {"Observation", "o", obs("preliminary"), false}},
		},
		{
			name: "scope keeps the policy's criteria", profile: "Practitioner/doc", scope: "openid user/Observation.rs",
			membership: withPolicy,
			checks: []check{
				{typ: "Observation", i: Search},
				{typ: "Observation", i: Create, status: 403, text: "Insufficient scope: Observation create needs user/Observation.c or user/Observation.write"},
				{typ: "Patient", i: Read, status: 403, text: "Insufficient scope: Patient read needs user/Patient.r or user/Patient.read"},
			},
			reads: []read{{"Observation", "o", obs("final"), true}, {"Observation", "o", obs("preliminary"), false}},
		},
		{
			name: "scope cannot add a type or an interaction the policy lacks", profile: "Practitioner/doc", scope: "user/*.*",
			membership: withPolicy,
			checks: []check{
				{typ: "Practitioner", i: Read, status: 403, text: "Forbidden"},
				{typ: "Patient", i: Update, status: 403, text: "Forbidden"},
				{typ: "Observation", i: Delete},
			},
		},
		{
			name: "v2 letters", profile: "Practitioner/doc", scope: "user/Patient.cu", membership: noPolicy,
			checks: []check{
				{typ: "Patient", i: Create}, {typ: "Patient", i: Update}, {typ: "Patient", i: Patch},
				{typ: "Patient", i: Delete, status: 403, text: "Insufficient scope: Patient delete needs user/Patient.d or user/Patient.write"},
				{typ: "Patient", i: Search, status: 403, text: "Insufficient scope: Patient search needs user/Patient.s or user/Patient.read"},
				{typ: "Observation", i: Read, status: 403, text: "Insufficient scope: Observation read needs user/Observation.r or user/Observation.read"},
			},
		},
		{
			name: "v1 write", profile: "Practitioner/doc", scope: "user/Observation.write", membership: noPolicy,
			checks: []check{
				{typ: "Observation", i: Create}, {typ: "Observation", i: Delete},
				{typ: "Observation", i: VRead, status: 403, text: "Insufficient scope: Observation vread needs user/Observation.r or user/Observation.read"},
			},
		},
		{
			name: "v2 constraint is ANDed in", profile: "Practitioner/doc", scope: "user/Observation.rs?category=" + labCategory, membership: noPolicy,
			checks: []check{{typ: "Observation", i: Search}},
			reads: []read{
				{"Observation", "o", obsBody("laboratory", "Patient/a"), true},
				{"Observation", "o", obsBody("vital-signs", "Patient/a"), false},
			},
		},
		{
			name: "patient scopes on a Patient's token reach its compartment", profile: "Patient/me", scope: "openid patient/*.read",
			membership: map[string]any{"profile": ref("Patient/me")},
			checks: []check{
				{typ: "Observation", i: Search},
				{typ: "Patient", i: Create, status: 403, text: "Insufficient scope: Patient create needs patient/Patient.c or patient/Patient.write"},
			},
			reads: []read{
				{"Patient", "me", `{"resourceType":"Patient","id":"me"}`, true},
				{"Patient", "other", `{"resourceType":"Patient","id":"other"}`, false},
				{"Observation", "o", obsBody("laboratory", "Patient/me"), true},
				{"Observation", "o", obsBody("laboratory", "Patient/other"), false},
			},
		},
		{
			name: "user scopes act on the type only", profile: "Patient/me", scope: "user/Patient.rs",
			membership: map[string]any{"profile": ref("Patient/me")},
			reads:      []read{{"Patient", "other", `{"resourceType":"Patient","id":"other"}`, true}},
		},
		{
			name: "only malformed resource scopes grant nothing", profile: "Practitioner/doc", scope: "openid user/Foo.read",
			membership: noPolicy,
			checks:     []check{{typ: "Patient", i: Read, status: 403}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := compile(t, scopedMember(tc.profile, tc.scope), tc.membership, policies)
			for _, c := range tc.checks {
				err := pol.Allow(c.typ, c.i)
				if s := status(err); s != c.status {
					t.Errorf("%s %s: %d, want %d (%v); policy %s", c.typ, c.i, s, c.status, err, pol)
				}
				if c.text != "" && forbiddenText(err) != c.text {
					t.Errorf("%s %s: %q, want %q", c.typ, c.i, forbiddenText(err), c.text)
				}
			}
			for _, r := range tc.reads {
				ok, err := pol.Readable(Read, stored(r.typ, r.id, r.body))
				if err != nil || ok != r.want {
					t.Errorf("%s %s readable %v (%v), want %v; policy %s", r.typ, r.body, ok, err, r.want, pol)
				}
			}
		})
	}
}

func TestScopesKeepFixedEntriesAndSuperAdmin(t *testing.T) {
	// An admin's fixed entries hold whatever the scope says, as in Medplum.
	admin := scopedMember("Practitioner/doc", "user/Patient.rs")
	admin.Admin = true
	pol := compile(t, admin, map[string]any{"profile": ref("Practitioner/doc")}, nil)
	if err := pol.Allow("ProjectMembership", Read); err != nil {
		t.Errorf("admin membership read under a scope: %v", err)
	}
	if s := status(pol.Allow("Observation", Read)); s != 403 {
		t.Errorf("admin Observation read outside the scope: %d", s)
	}

	// A super admin is narrowed too: tokens mean what they say.
	su := &bus.Principal{User: "ClientApplication/su", SuperAdmin: true, Scope: "system/Patient.read"}
	pol = compile(t, su, nil, nil)
	if err := pol.Allow("Patient", Read); err != nil {
		t.Errorf("super admin Patient read: %v", err)
	}
	for _, typ := range []string{"Patient", "Project"} {
		if s := status(pol.Allow(typ, Create)); s != 403 {
			t.Errorf("super admin %s create under system/Patient.read: %d", typ, s)
		}
	}
	su.Scope = "system/*.*"
	pol = compile(t, su, nil, nil)
	for _, typ := range []string{"Patient", "Project", "Login"} {
		if err := pol.Allow(typ, Create); err != nil {
			t.Errorf("super admin %s create under system/*.*: %v", typ, err)
		}
	}
	su.Scope = "openid"
	if pol = compile(t, su, nil, nil); !pol.unrestricted {
		t.Errorf("super admin without SMART scopes: %s", pol)
	}
}
