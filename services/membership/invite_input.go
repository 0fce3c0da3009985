package membership

import (
	"fmt"
	"net/mail"
	"sort"
	"strings"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/invite"
)

// inviteFields are the fields an invite may carry (Medplum's InviteRequest).
var inviteFields = map[string]bool{
	"resourceType": true, "firstName": true, "lastName": true, "email": true, "externalId": true,
	"scope": true, "password": true, "sendEmail": true, "admin": true, "membership": true,
	"upsert": true, "forceNewMembership": true, "mfaRequired": true, "accessPolicy": true, "access": true,
	"patient": true,
}

// membershipTemplateFields are the membership fields an invite may set.
var membershipTemplateFields = map[string]bool{
	"admin": true, "access": true, "accessPolicy": true, "externalId": true, "profile": true, "active": true, "userName": true,
}

// inviteInput is an invite body read field by field. It keeps what the
// rules must tell apart and nothing more: a text of the wrong JSON type
// reads as empty (and so as missing), a flag remembers a value it could not
// read, and the values passed on to the membership stay as sent, with
// whether they were sent at all (null is not absence).
type inviteInput struct {
	Unknown []string // fields InviteRequest does not have, sorted

	// Texts, trimmed.
	ResourceType, FirstName, LastName, Email, ExternalID, Scope string
	// Password is nil when absent and "" when not a string; never trimmed.
	Password *string

	SendEmail, Upsert, ForceNewMembership, MFARequired, Admin flag

	// AccessPolicy and Access are the deprecated top-level forms of the
	// membership's fields; Membership, when an object, overrides them.
	AccessPolicy, Access, Membership optional
	Patient                          optional
}

// flag is a boolean sent as JSON or as the strings "true" and "false"
// (forms, and some clients' sendEmail). Null counts as absent.
type flag struct {
	Set, Value bool
	Invalid    bool // sent, but not a boolean: Set and Value stay false
}

// optional is a value passed on as sent.
type optional struct {
	Set   bool
	Value any
}

// inviteDraft is an invite whose fields are valid on their own. What is
// left needs the project's data (patient, profile, policies) and, for the
// password, its hash: the handler does both.
type inviteDraft struct {
	// Request lacks the project, the inviter and the password hash;
	// Request.Membership is the template without its profile.
	Request invite.Request
	// Password is the initial password, "" when none was given.
	Password string
	// Profile is membership.profile, taken out of the template to be checked.
	Profile optional
}

// readInvite reads a decoded invite body (JSON, or a form's first values).
func readInvite(body map[string]any) inviteInput {
	text := func(k string) string {
		v, _ := body[k].(string)
		return strings.TrimSpace(v)
	}
	opt := func(k string) optional {
		v, ok := body[k]
		return optional{Set: ok, Value: v}
	}
	in := inviteInput{
		ResourceType: text("resourceType"), FirstName: text("firstName"), LastName: text("lastName"),
		Email: text("email"), ExternalID: text("externalId"), Scope: text("scope"),
		SendEmail: flagOf(body["sendEmail"]), Upsert: flagOf(body["upsert"]),
		ForceNewMembership: flagOf(body["forceNewMembership"]), MFARequired: flagOf(body["mfaRequired"]),
		Admin:        flagOf(body["admin"]),
		AccessPolicy: opt("accessPolicy"), Access: opt("access"), Membership: opt("membership"), Patient: opt("patient"),
	}
	if v, ok := body["password"]; ok {
		p, _ := v.(string)
		in.Password = &p
	}
	for k := range body {
		if !inviteFields[k] {
			in.Unknown = append(in.Unknown, k)
		}
	}
	sort.Strings(in.Unknown)
	return in
}

func flagOf(v any) flag {
	switch b := v.(type) {
	case nil:
		return flag{}
	case bool:
		return flag{Set: true, Value: b}
	case string:
		switch b {
		case "true":
			return flag{Set: true, Value: true}
		case "false":
			return flag{Set: true}
		}
	}
	return flag{Invalid: true}
}

// checkInvite applies every rule an invite's fields must meet by
// themselves, and reports all that fail, one issue per field, in a fixed
// order (callers and Medplum's client show them by field).
func checkInvite(in inviteInput) (*inviteDraft, []fhir.Issue) {
	var issues []fhir.Issue
	bad := func(expr, text string) { issues = append(issues, fhir.FieldIssue(expr, text)) }
	for _, k := range in.Unknown {
		bad(k, "Unknown field: "+k)
	}
	d := &inviteDraft{}
	req := &d.Request
	req.ResourceType, req.FirstName, req.LastName, req.ExternalID = in.ResourceType, in.FirstName, in.LastName, in.ExternalID
	switch req.ResourceType {
	case "Patient", "Practitioner", "RelatedPerson":
	default:
		bad("resourceType", "Resource type is required")
	}
	if req.FirstName == "" {
		bad("firstName", "First name is required")
	}
	if req.LastName == "" {
		bad("lastName", "Last name is required")
	}
	// An address that does not parse is no address: externalId may stand in.
	// Normalised as sign-in and registration find accounts (auth.NormalEmail).
	if req.Email = auth.NormalEmail(in.Email); req.Email != "" {
		if a, err := mail.ParseAddress(req.Email); err != nil || a.Address != req.Email {
			req.Email = ""
		}
	}
	if req.Email == "" && req.ExternalID == "" {
		bad("email", "Either email or externalId is required")
	}
	if in.Scope != "" && in.Scope != "project" && in.Scope != "server" {
		bad("scope", "Scope must be project or server")
	}
	// Medplum's rule: patients, and anyone known by an externalId, are users
	// of this project only, unless the invite says otherwise.
	req.ProjectScoped = (req.ResourceType == "Patient" && in.Scope != "server") || req.ExternalID != "" || in.Scope == "project"
	if in.Password != nil {
		if len(*in.Password) < 8 {
			bad("password", "Invalid password, must be at least 8 characters")
		} else {
			d.Password = *in.Password
		}
	}
	for _, f := range []struct {
		name string
		flag flag
	}{
		{"sendEmail", in.SendEmail}, {"upsert", in.Upsert}, {"forceNewMembership", in.ForceNewMembership},
		{"mfaRequired", in.MFARequired}, {"admin", in.Admin},
	} {
		if f.flag.Invalid {
			bad(f.name, f.name+" must be a boolean")
		}
	}
	req.SendEmail = !in.SendEmail.Set || in.SendEmail.Value
	req.Upsert, req.ForceNewMembership = in.Upsert.Value, in.ForceNewMembership.Value
	req.MFARequired = in.MFARequired.Value

	// The membership template: deprecated top-level fields, then `membership`, which wins.
	tmpl := map[string]any{}
	if in.AccessPolicy.Set {
		tmpl["accessPolicy"] = in.AccessPolicy.Value
	}
	if in.Access.Set {
		tmpl["access"] = in.Access.Value
	}
	if in.Admin.Set {
		tmpl["admin"] = in.Admin.Value
	}
	if req.ExternalID != "" {
		tmpl["externalId"] = req.ExternalID
	}
	if in.Membership.Set {
		m, isObj := in.Membership.Value.(map[string]any)
		if !isObj {
			bad("membership", "membership must be an object")
		}
		for _, k := range sortedKeys(m) {
			if !membershipTemplateFields[k] {
				bad("membership."+k, "An invite cannot set membership."+k)
				continue
			}
			tmpl[k] = m[k]
		}
	}
	if v, ok := tmpl["admin"]; ok {
		if _, isBool := v.(bool); !isBool {
			bad("membership.admin", "admin must be a boolean")
		}
	} else {
		// Stored explicitly, so the documented promotion patch (replace
		// /admin; E3 in docs/API.md) applies:
		// RFC 6902 replace needs the member to exist.
		tmpl["admin"] = false
	}
	if p, ok := tmpl["profile"]; ok {
		d.Profile = optional{Set: true, Value: p}
		delete(tmpl, "profile")
	}
	req.Membership = tmpl
	if in.Patient.Set {
		if req.ResourceType != "RelatedPerson" {
			bad("patient", "patient is only for RelatedPerson invites")
		} else {
			ref, _ := refOf(in.Patient.Value)
			if t, _, ok := fhir.SplitReference(ref); !ok || t != "Patient" {
				bad("patient", "patient must be a Patient reference")
			}
			req.Patient = ref
		}
	}
	if len(issues) > 0 {
		return nil, issues
	}
	return d, nil
}

// policyRef is an access policy a membership names, and the expression
// that names it, for the error if the policy is not the project's.
type policyRef struct{ expr, ref string }

// policyRefs lists the access policies a membership (or an invite's
// template) names. A malformed access list is refused here, before any
// policy is looked up; an entry without a policy yields an empty reference,
// which the lookup refuses.
func policyRefs(m map[string]any) ([]policyRef, error) {
	var refs []policyRef
	if ap, ok := m["accessPolicy"]; ok {
		ref, _ := refOf(ap)
		refs = append(refs, policyRef{"membership.accessPolicy", ref})
	}
	if a, ok := m["access"]; ok {
		list, isList := a.([]any)
		if !isList {
			return nil, fhir.BadRequest("access must be an array", "membership.access")
		}
		for i, e := range list {
			entry, _ := e.(map[string]any)
			ref, _ := refOf(entry["policy"])
			refs = append(refs, policyRef{fmt.Sprintf("membership.access[%d].policy", i), ref})
			if p, ok := entry["parameter"]; ok {
				if _, isList := p.([]any); !isList {
					return nil, fhir.BadRequest("parameter must be an array", fmt.Sprintf("membership.access[%d].parameter", i))
				}
			}
		}
	}
	return refs, nil
}

// profileRef reads membership.profile, which must be a reference with a
// type and an id.
func profileRef(v any) (typ, id string, err error) {
	ref, _ := refOf(v)
	typ, id, ok := fhir.SplitReference(ref)
	if !ok {
		return "", "", fhir.BadRequest("Invalid profile reference", "membership.profile")
	}
	return typ, id, nil
}

// refOf reads a FHIR Reference's reference; ok is false when v is not an
// object or its reference not a string.
func refOf(v any) (string, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		return "", false
	}
	s, ok := m["reference"].(string)
	return s, ok
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
