// Package scimproto is the SCIM 2.0 protocol (RFC 7643, RFC 7644) as the
// membership service speaks it (docs/scim.md): the User resource as Pinion
// maps it onto project memberships, the discovery documents, the filter a
// list is asked with, and PATCH. It is pure: the membership service reads
// and writes memberships, this package only decides what a request means.
// The media type and error envelope, which the gateway shares, are
// pkg/scimwire's.
package scimproto

import (
	"bytes"
	"encoding/json"
	"net/mail"
	"strings"

	"github.com/pinion-health/pinion/pkg/scimwire"
)

// Schema URIs (RFC 7643 §8.7, RFC 7644 §3.4.2, §3.5.2).
const (
	UserSchema         = "urn:ietf:params:scim:schemas:core:2.0:User"
	GroupSchema        = "urn:ietf:params:scim:schemas:core:2.0:Group"
	ListResponseSchema = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
	PatchOpSchema      = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
)

// Bounds on what a client may send.
const (
	// MaxBody bounds a request body: a User is a few hundred bytes.
	MaxBody = 64 << 10
	// MaxFilter bounds a filter's length.
	MaxFilter = 1024
	// MaxCount bounds a page; DefaultCount is a page when count is absent.
	MaxCount, DefaultCount = 200, 100
	// MaxOperations bounds a PATCH's operations.
	MaxOperations = 100
	// maxText bounds each text a User carries.
	maxText = 256
)

// ProfileTypes are the profile types a User may have: userType (Medplum's
// own reading of SCIM's userType), Practitioner when absent.
var ProfileTypes = map[string]bool{"Practitioner": true, "Patient": true, "RelatedPerson": true}

// Name is a User's name (RFC 7643 §4.1.1).
type Name struct {
	Formatted  string `json:"formatted,omitempty"`
	GivenName  string `json:"givenName,omitempty"`
	FamilyName string `json:"familyName,omitempty"`
}

// Email is one of a User's e-mail addresses.
type Email struct {
	Value   string `json:"value,omitempty"`
	Type    string `json:"type,omitempty"`
	Primary bool   `json:"primary,omitempty"`
}

// Meta is what the server says of a resource (RFC 7643 §3.1).
type Meta struct {
	ResourceType string `json:"resourceType"`
	Created      string `json:"created,omitempty"`
	LastModified string `json:"lastModified,omitempty"`
	Location     string `json:"location,omitempty"`
	Version      string `json:"version,omitempty"`
}

// User is a SCIM User: one project membership of a person.
type User struct {
	Schemas    []string `json:"schemas"`
	ID         string   `json:"id,omitempty"`
	ExternalID string   `json:"externalId,omitempty"`
	UserName   string   `json:"userName"`
	// UserType is the profile's resource type.
	UserType string  `json:"userType,omitempty"`
	Name     *Name   `json:"name,omitempty"`
	Emails   []Email `json:"emails,omitempty"`
	// Active is nil when a request left it out (a PUT keeps it then).
	Active *bool `json:"active,omitempty"`
	Meta   *Meta `json:"meta,omitempty"`
}

// PrimaryEmail is the address a person signs in with: the primary one,
// else the first, else userName when it is an address (Okta and Entra
// both make userName the e-mail by default).
func (u *User) PrimaryEmail() string {
	for _, e := range u.Emails {
		if e.Primary && e.Value != "" {
			return e.Value
		}
	}
	for _, e := range u.Emails {
		if e.Value != "" {
			return e.Value
		}
	}
	if a, err := mail.ParseAddress(u.UserName); err == nil && a.Address == u.UserName {
		return u.UserName
	}
	return ""
}

// DecodeUser reads a User a client sent (POST, PUT), and checks it.
func DecodeUser(body []byte) (*User, error) {
	m, err := decodeObject(body)
	if err != nil {
		return nil, err
	}
	return UserFromMap(m)
}

// decodeObject reads a JSON object, keeping numbers as written.
func decodeObject(body []byte) (map[string]any, error) {
	if len(body) > MaxBody {
		return nil, scimwire.New(413, "", "Request body too large")
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil || d.More() {
		return nil, scimwire.BadRequest(scimwire.InvalidSyntax, "The body is not a JSON object")
	}
	return m, nil
}

// UserFromMap reads a User from its JSON object, as a client sent it or a
// PATCH left it. Attribute names are matched without regard to case (RFC
// 7643 §2.1); attributes Pinion does not keep are dropped; active may be
// the strings "True" and "False", as Entra ID sends it.
func UserFromMap(m map[string]any) (*User, error) {
	u := &User{}
	for k, v := range m {
		switch canonical(k) {
		case "userName":
			u.UserName = text(v)
		case "externalId":
			u.ExternalID = text(v)
		case "userType":
			u.UserType = text(v)
		case "active":
			b, err := boolOf(v)
			if err != nil {
				return nil, err
			}
			u.Active = b
		case "name":
			n, _ := v.(map[string]any)
			if n == nil && v != nil {
				return nil, scimwire.BadRequest(scimwire.InvalidValue, "name must be an object")
			}
			if n != nil {
				u.Name = &Name{}
				for nk, nv := range n {
					switch canonical(nk) {
					case "givenName":
						u.Name.GivenName = text(nv)
					case "familyName":
						u.Name.FamilyName = text(nv)
					case "formatted":
						u.Name.Formatted = text(nv)
					}
				}
			}
		case "emails":
			list, ok := v.([]any)
			if !ok && v != nil {
				return nil, scimwire.BadRequest(scimwire.InvalidValue, "emails must be an array")
			}
			if len(list) > 10 {
				return nil, scimwire.BadRequest(scimwire.InvalidValue, "At most 10 emails")
			}
			for _, e := range list {
				em, _ := e.(map[string]any)
				if em == nil {
					return nil, scimwire.BadRequest(scimwire.InvalidValue, "Each of emails must be an object")
				}
				var out Email
				for ek, ev := range em {
					switch canonical(ek) {
					case "value":
						out.Value = strings.TrimSpace(text(ev))
					case "type":
						out.Type = text(ev)
					case "primary":
						b, err := boolOf(ev)
						if err != nil {
							return nil, err
						}
						out.Primary = b != nil && *b
					}
				}
				u.Emails = append(u.Emails, out)
			}
		}
	}
	return u, u.check()
}

// check refuses what no membership could hold.
func (u *User) check() error {
	u.UserName = strings.TrimSpace(u.UserName)
	if u.UserName == "" {
		return scimwire.BadRequest(scimwire.InvalidValue, "userName is required")
	}
	texts := []string{u.UserName, u.ExternalID, u.UserType}
	if u.Name != nil {
		texts = append(texts, u.Name.GivenName, u.Name.FamilyName, u.Name.Formatted)
	}
	for _, e := range u.Emails {
		texts = append(texts, e.Value, e.Type)
		if e.Value != "" {
			if a, err := mail.ParseAddress(e.Value); err != nil || a.Address != e.Value {
				return scimwire.BadRequest(scimwire.InvalidValue, "Not an e-mail address: "+e.Value)
			}
		}
	}
	for _, t := range texts {
		if len(t) > maxText {
			return scimwire.BadRequest(scimwire.InvalidValue, "A value is longer than 256 characters")
		}
	}
	if u.UserType != "" && !ProfileTypes[u.UserType] {
		return scimwire.BadRequest(scimwire.InvalidValue, "userType must be Practitioner, Patient or RelatedPerson")
	}
	return nil
}

// ToMap is the User as JSON, the form PATCH works on.
func (u *User) ToMap() map[string]any {
	b, _ := json.Marshal(u)
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	_ = d.Decode(&m)
	return m
}

// attributes are the names Pinion keeps, by their lower case.
var attributes = lowerIndex("schemas", "id", "externalId", "userName", "userType", "name", "emails", "active", "meta",
	"givenName", "familyName", "formatted", "value", "type", "primary", "displayName", "members")

func lowerIndex(names ...string) map[string]string {
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[strings.ToLower(n)] = n
	}
	return m
}

// canonical is an attribute name as Pinion spells it, or as given when
// Pinion does not keep it.
func canonical(name string) string {
	if c, ok := attributes[strings.ToLower(name)]; ok {
		return c
	}
	return name
}

func text(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	}
	return ""
}

// boolOf reads a boolean, or Entra ID's "True" and "False".
func boolOf(v any) (*bool, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case bool:
		return &v, nil
	case string:
		switch strings.ToLower(v) {
		case "true":
			t := true
			return &t, nil
		case "false":
			f := false
			return &f, nil
		}
	}
	return nil, scimwire.BadRequest(scimwire.InvalidValue, "active must be a boolean")
}
