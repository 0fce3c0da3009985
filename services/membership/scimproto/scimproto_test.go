package scimproto

import (
	"errors"
	"testing"

	"github.com/pinion-health/pinion/pkg/scimwire"
)

func bptr(b bool) *bool { return &b }

func ada() *User {
	return &User{
		Schemas: []string{UserSchema}, ID: "m1", ExternalID: "00u1AbC", UserName: "Ada.Lovelace@example.com",
		UserType: "Practitioner", Name: &Name{GivenName: "Ada", FamilyName: "Lovelace"},
		Emails: []Email{{Value: "ada.lovelace@example.com", Type: "work", Primary: true}, {Value: "ada@home.example", Type: "home"}},
		Active: bptr(true),
	}
}

func scimType(err error) (int, string) {
	var e *scimwire.Error
	if !errors.As(err, &e) {
		return 0, ""
	}
	return e.Status, e.ScimType
}

func TestFilter(t *testing.T) {
	u := ada()
	inactive := ada()
	inactive.Active = bptr(false)
	for _, tc := range []struct {
		name, filter string
		user         *User
		want         bool
	}{
		{"empty matches all", "", u, true},
		{"userName eq ignores case", `userName eq "ada.lovelace@EXAMPLE.com"`, u, true},
		{"userName eq other", `userName eq "bob@example.com"`, u, false},
		{"operator in capitals", `userName EQ "ada.lovelace@example.com"`, u, true},
		{"userName sw", `userName sw "ada."`, u, true},
		{"userName co", `userName co "LOVE"`, u, true},
		{"userName ew", `userName ew "@example.com"`, u, true},
		{"externalId is case-exact", `externalId eq "00u1abc"`, u, false},
		{"externalId eq", `externalId eq "00u1AbC"`, u, true},
		{"givenName", `name.givenName eq "ada"`, u, true},
		{"familyName sw", `name.familyName sw "Love"`, u, true},
		{"familyName co other", `name.familyName co "xyz"`, u, false},
		{"any e-mail", `emails.value eq "ada@home.example"`, u, true},
		{"emails alone means its value", `emails co "home"`, u, true},
		{"value path", `emails[type eq "work" and value co "lovelace"]`, u, true},
		{"value path needs one element to match both", `emails[type eq "home" and value co "lovelace"]`, u, false},
		{"active true", `active eq true`, u, true},
		{"active false", `active eq false`, inactive, true},
		{"active false on an active user", `active eq false`, u, false},
		{"and", `userName sw "ada" and active eq true`, u, true},
		{"or", `userName eq "bob" or externalId eq "00u1AbC"`, u, true},
		{"not", `not (userName eq "bob")`, u, true},
		{"present", `externalId pr`, u, true},
		{"ne", `userName ne "bob"`, u, true},
		{"JSON escapes in the value", `externalId eq "00u1\u0041bC"`, u, true},
		{"core schema prefix", `urn:ietf:params:scim:schemas:core:2.0:User:userName eq "ada.lovelace@example.com"`, u, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ParseFilter(tc.filter)
			if err != nil {
				t.Fatalf("ParseFilter(%q): %v", tc.filter, err)
			}
			if got := f.Match(tc.user); got != tc.want {
				t.Fatalf("%q matched %v, want %v", tc.filter, got, tc.want)
			}
		})
	}
}

func TestFilterRefused(t *testing.T) {
	long := `userName eq "` + string(make([]byte, MaxFilter)) + `"`
	for _, tc := range []struct{ name, filter string }{
		{"not a filter", `userName equals "x"`},
		{"unterminated", `userName eq "x`},
		{"unknown attribute", `password eq "x"`},
		{"ordering", `userName gt "a"`},
		{"extension attribute", `urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:employeeNumber eq "1"`},
		{"value path on a single-valued attribute", `name[givenName eq "Ada"]`},
		{"too long", long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseFilter(tc.filter)
			if status, typ := scimType(err); status != 400 || typ != scimwire.InvalidFilter {
				t.Fatalf("ParseFilter(%q): %v (%d %s), want 400 invalidFilter", tc.filter, err, status, typ)
			}
		})
	}
}

func TestFilterEquals(t *testing.T) {
	for _, tc := range []struct {
		filter, attr, want string
		ok                 bool
	}{
		{`userName eq "a@b.c"`, "userName", "a@b.c", true},
		{`userName eq "a@b.c" and active eq true`, "userName", "a@b.c", true},
		{`active eq true and externalId eq "x"`, "externalId", "x", true},
		{`userName eq "a" or userName eq "b"`, "userName", "", false},
		{`userName sw "a"`, "userName", "", false},
		{`not (userName eq "a")`, "userName", "", false},
	} {
		f, err := ParseFilter(tc.filter)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := f.Equals(tc.attr); got != tc.want || ok != tc.ok {
			t.Errorf("%q Equals(%s) = %q %v, want %q %v", tc.filter, tc.attr, got, ok, tc.want, tc.ok)
		}
	}
}

func TestPatch(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		check      func(t *testing.T, u *User)
	}{
		{"Okta deactivates with a value object",
			`{"schemas":["urn:ietf:params:scim:api:messages:2.0:PatchOp"],"Operations":[{"op":"replace","value":{"active":false}}]}`,
			func(t *testing.T, u *User) {
				if u.Active == nil || *u.Active {
					t.Fatalf("active %v", u.Active)
				}
			}},
		{"Entra deactivates with a path and the string False",
			`{"schemas":["urn:ietf:params:scim:api:messages:2.0:PatchOp"],"Operations":[{"op":"Replace","path":"active","value":"False"}]}`,
			func(t *testing.T, u *User) {
				if u.Active == nil || *u.Active {
					t.Fatalf("active %v", u.Active)
				}
			}},
		{"Entra reactivates with True",
			`{"schemas":["urn:ietf:params:scim:api:messages:2.0:PatchOp"],"Operations":[{"op":"Replace","path":"active","value":"True"}]}`,
			func(t *testing.T, u *User) {
				if u.Active == nil || !*u.Active {
					t.Fatalf("active %v", u.Active)
				}
			}},
		{"name sub-attribute path",
			`{"schemas":["urn:ietf:params:scim:api:messages:2.0:PatchOp"],"Operations":[{"op":"replace","path":"name.familyName","value":"Byron"},{"op":"add","path":"name.givenName","value":"Augusta"}]}`,
			func(t *testing.T, u *User) {
				if u.Name.FamilyName != "Byron" || u.Name.GivenName != "Augusta" {
					t.Fatalf("name %+v", u.Name)
				}
			}},
		{"Entra's filtered e-mail path",
			`{"schemas":["urn:ietf:params:scim:api:messages:2.0:PatchOp"],"Operations":[{"op":"Replace","path":"emails[type eq \"work\"].value","value":"ada@new.example"}]}`,
			func(t *testing.T, u *User) {
				if u.Emails[0].Value != "ada@new.example" || u.Emails[1].Value != "ada@home.example" {
					t.Fatalf("emails %+v", u.Emails)
				}
			}},
		{"a filtered path that selects nothing adds an element",
			`{"schemas":["urn:ietf:params:scim:api:messages:2.0:PatchOp"],"Operations":[{"op":"add","path":"emails[type eq \"other\"].value","value":"ada@other.example"}]}`,
			func(t *testing.T, u *User) {
				if len(u.Emails) != 3 || u.Emails[2].Type != "other" || u.Emails[2].Value != "ada@other.example" {
					t.Fatalf("emails %+v", u.Emails)
				}
			}},
		{"remove by filter",
			`{"schemas":["urn:ietf:params:scim:api:messages:2.0:PatchOp"],"Operations":[{"op":"remove","path":"emails[type eq \"home\"]"}]}`,
			func(t *testing.T, u *User) {
				if len(u.Emails) != 1 || u.Emails[0].Type != "work" {
					t.Fatalf("emails %+v", u.Emails)
				}
			}},
		{"remove externalId",
			`{"schemas":["urn:ietf:params:scim:api:messages:2.0:PatchOp"],"Operations":[{"op":"remove","path":"externalId"}]}`,
			func(t *testing.T, u *User) {
				if u.ExternalID != "" {
					t.Fatalf("externalId %q", u.ExternalID)
				}
			}},
		{"value object of several attributes, names in any case",
			`{"schemas":["urn:ietf:params:scim:api:messages:2.0:PatchOp"],"Operations":[{"op":"replace","value":{"UserName":"ada@new.example","name.givenName":"Augusta","externalId":"00u2"}}]}`,
			func(t *testing.T, u *User) {
				if u.UserName != "ada@new.example" || u.Name.GivenName != "Augusta" || u.ExternalID != "00u2" {
					t.Fatalf("user %+v %+v", u, u.Name)
				}
			}},
		{"attributes Pinion does not keep are dropped",
			`{"schemas":["urn:ietf:params:scim:api:messages:2.0:PatchOp"],"Operations":[{"op":"Add","path":"displayName","value":"Ada"},{"op":"Replace","path":"urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:employeeNumber","value":"7"}]}`,
			func(t *testing.T, u *User) {
				if u.UserName != "Ada.Lovelace@example.com" {
					t.Fatalf("user %+v", u)
				}
			}},
		{"the same id is no change",
			`{"schemas":["urn:ietf:params:scim:api:messages:2.0:PatchOp"],"Operations":[{"op":"replace","value":{"id":"m1","active":false}}]}`,
			func(t *testing.T, u *User) {
				if *u.Active {
					t.Fatal("still active")
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := DecodePatch([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			u, err := p.Apply(ada())
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, u)
		})
	}
}

func TestPatchRefused(t *testing.T) {
	const schema = `"schemas":["urn:ietf:params:scim:api:messages:2.0:PatchOp"]`
	for _, tc := range []struct {
		name, body string
		status     int
		scimType   string
	}{
		{"not JSON", `{`, 400, scimwire.InvalidSyntax},
		{"no PatchOp schema", `{"Operations":[{"op":"replace","path":"active","value":false}]}`, 400, scimwire.InvalidSyntax},
		{"no operations", `{` + schema + `,"Operations":[]}`, 400, scimwire.InvalidSyntax},
		{"unknown op", `{` + schema + `,"Operations":[{"op":"move","path":"active"}]}`, 400, scimwire.InvalidSyntax},
		{"remove without a path", `{` + schema + `,"Operations":[{"op":"remove"}]}`, 400, scimwire.NoTarget},
		{"replace without a value", `{` + schema + `,"Operations":[{"op":"replace","path":"active"}]}`, 400, scimwire.InvalidValue},
		{"no path and no object", `{` + schema + `,"Operations":[{"op":"replace","value":false}]}`, 400, scimwire.InvalidValue},
		{"active not a boolean", `{` + schema + `,"Operations":[{"op":"replace","path":"active","value":"maybe"}]}`, 400, scimwire.InvalidValue},
		{"id changed", `{` + schema + `,"Operations":[{"op":"replace","path":"id","value":"m2"}]}`, 400, scimwire.Mutability},
		{"bad path", `{` + schema + `,"Operations":[{"op":"replace","path":"emails[type eq","value":"x"}]}`, 400, scimwire.InvalidPath},
		{"userName removed", `{` + schema + `,"Operations":[{"op":"remove","path":"userName"}]}`, 400, scimwire.InvalidValue},
		{"not an address", `{` + schema + `,"Operations":[{"op":"replace","path":"emails[type eq \"work\"].value","value":"nope"}]}`, 400, scimwire.InvalidValue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := DecodePatch([]byte(tc.body))
			if err == nil {
				_, err = p.Apply(ada())
			}
			if status, typ := scimType(err); status != tc.status || typ != tc.scimType {
				t.Fatalf("%v: %d %q, want %d %q", err, status, typ, tc.status, tc.scimType)
			}
		})
	}
}

func TestDecodeUser(t *testing.T) {
	u, err := DecodeUser([]byte(`{"schemas":["urn:ietf:params:scim:schemas:core:2.0:User"],"userName":"grace@example.com",
		"name":{"givenName":"Grace","familyName":"Hopper"},"active":"true","password":"ignored","externalId":"e1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if u.UserName != "grace@example.com" || !*u.Active || u.PrimaryEmail() != "grace@example.com" || u.ExternalID != "e1" {
		t.Fatalf("%+v", u)
	}
	for _, body := range []string{`[]`, `{"name":{"givenName":"x"}}`, `{"userName":"x","userType":"Bot"}`, `{"userName":"x","emails":"x@y.z"}`} {
		if _, err := DecodeUser([]byte(body)); err == nil {
			t.Errorf("%s was accepted", body)
		}
	}
}
