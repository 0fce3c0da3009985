package access

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhirschema"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/store"
)

// SMART App Launch scopes (v1 and v2) narrow a token's access policy, as
// Medplum's applySmartScopes does: a token whose scope names no SMART
// resource scope keeps its membership's policy; otherwise each entry of
// that policy is kept only for the types some scope covers, with only the
// interactions the scope grants and the scope's constraint ANDed into its
// criteria. Scopes never widen a policy.
//
// Where Pinion differs from Medplum, it is stricter: Medplum keeps an
// entry read-only or whole (a "cu" scope still allows delete) and uses only
// the first scope that names a type; here the interactions are the scope's
// own letters and every scope covering a type counts (their grants are
// ORed, as separate entries). A patient/ scope on a Patient's own token
// confines the entry to that patient (below); Medplum relies on the
// policy's criteria for that.

// Bounds on a scope string: a token's scope is read on every compile.
const (
	maxScopeTerms   = 64
	maxScopeTermLen = 512
)

// oidcScopes are the OpenID Connect and OAuth scopes Pinion serves beside
// the resource scopes.
var oidcScopes = map[string]bool{
	"openid": true, "profile": true, "email": true, "fhirUser": true,
	"offline_access": true, "offline": true, "online_access": true,
}

// SupportedScopes are the scopes discovery advertises (scopes_supported):
// the OIDC scopes, and representative SMART v1 and v2 resource scopes.
// Any resource type may replace '*', and v2 scopes may carry a constraint
// (patient/Observation.rs?category=...).
var SupportedScopes = []string{
	"openid", "profile", "email", "fhirUser", "offline_access", "online_access", "launch", "launch/patient",
	"patient/*.rs", "patient/*.cruds", "user/*.rs", "user/*.cruds", "system/*.rs", "system/*.cruds",
	"patient/*.read", "patient/*.write", "patient/*.*",
	"user/*.read", "user/*.write", "user/*.*",
	"system/*.read", "system/*.write", "system/*.*",
}

// smartScope is one SMART resource scope, parsed.
type smartScope struct {
	raw     string
	context string // "patient", "user" or "system"
	typ     string // a resource type, or "*"
	allow   uint8
	query   url.Values // the v2 constraint; nil without one
}

// smartScopeFormat is context/type.permissions; the permissions are v1's
// read, write or *, or v2's letters in the order c r u d s.
var smartScopeFormat = regexp.MustCompile(`^(patient|user|system)/([A-Za-z][A-Za-z0-9]*|\*)\.(read|write|\*|c?r?u?d?s?)$`)

// constraintParams are the parameters starting with '_' a constraint may
// use: those that only filter. Result parameters (_count, _sort...) would
// change the shape of every search, not which resources are reached.
var constraintParams = map[string]bool{"_id": true, "_lastUpdated": true, "_tag": true, "_security": true, "_profile": true, "_source": true}

// resourceScope reports whether a term claims to be a SMART resource scope.
func resourceScope(term string) bool {
	return strings.HasPrefix(term, "patient/") || strings.HasPrefix(term, "user/") || strings.HasPrefix(term, "system/")
}

// parseSmartScope parses one resource scope; an error says why it is not a
// well-formed scope for a known resource type.
func parseSmartScope(term string) (*smartScope, error) {
	if len(term) > maxScopeTermLen {
		return nil, fmt.Errorf("scope longer than %d characters", maxScopeTermLen)
	}
	base, rawQuery, hasQuery := strings.Cut(term, "?")
	m := smartScopeFormat.FindStringSubmatch(base)
	if m == nil || m[3] == "" {
		return nil, fmt.Errorf("scope %q is not context/Type.permissions", base)
	}
	s := &smartScope{raw: term, context: m[1], typ: m[2]}
	if s.typ != "*" && !fhirschema.IsResourceType(s.typ) {
		return nil, fmt.Errorf("scope %q: unknown resource type %s", base, s.typ)
	}
	switch m[3] {
	case "read":
		s.allow = readBits
	case "write":
		s.allow = bitCreate | bitUpdate | bitDelete
	case "*":
		s.allow = allBits
	default:
		for _, c := range m[3] {
			switch c {
			case 'c':
				s.allow |= bitCreate
			case 'r':
				s.allow |= bitRead | bitVRead | bitHistory
			case 'u':
				s.allow |= bitUpdate
			case 'd':
				s.allow |= bitDelete
			case 's':
				s.allow |= bitSearch
			}
		}
	}
	if !hasQuery {
		return s, nil
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil || len(q) == 0 {
		return nil, fmt.Errorf("scope %q: malformed constraint", term)
	}
	for k := range q {
		code, _, _ := strings.Cut(k, ":")
		if strings.HasPrefix(code, "_") && !constraintParams[code] || strings.Contains(code, ".") {
			return nil, fmt.Errorf("scope %q: %s cannot constrain a scope", term, k)
		}
		if s.typ == "*" && !strings.HasPrefix(code, "_") {
			return nil, fmt.Errorf("scope %q: a constraint on every type may use only common parameters", term)
		}
	}
	s.query = q
	// Compiled once here so that a constraint that does not compile is
	// malformed, not a surprise at the first request.
	if _, err := s.constraint(s.typ); err != nil {
		return nil, fmt.Errorf("scope %q: %w", term, err)
	}
	return s, nil
}

// constraint is the scope's constraint as a condition on resources of typ;
// nil without one.
func (s *smartScope) constraint(typ string) (*store.Cond, error) {
	if s.query == nil {
		return nil, nil
	}
	if typ == "*" {
		typ = "Resource" // only common parameters: see parseSmartScope
	}
	q, err := search.Parse(typ, s.query)
	if err != nil {
		return nil, err
	}
	if len(q.Filter) == 0 {
		return nil, fmt.Errorf("constraint filters nothing")
	}
	f := store.And(q.Filter...)
	if err := store.Check(f); err != nil {
		return nil, err
	}
	return &f, nil
}

// covers reports whether the scope is about resources of typ.
func (s *smartScope) covers(typ string) bool { return s.typ == "*" || s.typ == typ }

// scopeTerms splits a scope string into at most maxScopeTerms terms.
func scopeTerms(scope string) []string {
	terms := strings.Fields(scope)
	if len(terms) > maxScopeTerms {
		terms = terms[:maxScopeTerms]
	}
	return terms
}

// parseSmartScopes returns the well-formed resource scopes of a scope
// string, and whether it names any resource scope at all. A malformed one
// still counts as naming one: it then grants nothing rather than leaving
// the whole policy in place.
func parseSmartScopes(scope string) (out []*smartScope, named bool) {
	for _, t := range scopeTerms(scope) {
		if !resourceScope(t) {
			continue
		}
		named = true
		if s, err := parseSmartScope(t); err == nil {
			out = append(out, s)
		}
	}
	return out, named
}

// hasResourceScopes reports whether a scope string names a SMART resource
// scope, well-formed or not.
func hasResourceScopes(scope string) bool {
	_, named := parseSmartScopes(scope)
	return named
}

// GrantedScope is the part of a requested scope that Pinion honours, for
// the token response's scope (RFC 6749 §3.3): the OIDC scopes it serves
// and well-formed SMART v1/v2 resource scopes for known resource types or
// '*', in request order, without duplicates. Anything else (launch,
// launch/patient, unknown words, malformed scopes) is dropped.
func GrantedScope(requested string) string {
	var out []string
	for _, t := range scopeTerms(requested) {
		if slices.Contains(out, t) {
			continue
		}
		if oidcScopes[t] {
			out = append(out, t)
			continue
		}
		if !resourceScope(t) {
			continue
		}
		if _, err := parseSmartScope(t); err == nil {
			out = append(out, t)
		}
	}
	return strings.Join(out, " ")
}

// scoped is what a policy keeps of the scope that narrowed it, to say
// which scope a refusal lacks.
type scoped struct {
	context string   // the context of the token's first resource scope
	before  []*entry // the entries before narrowing
}

// applyScopes narrows the entries after the first fixed ones (which hold
// whatever the scope says, as in Medplum, where the project-admin rules
// are applied after the scopes) to the principal's SMART scopes. A super
// admin without a policy (grants is 0), narrowed, keeps only what the
// scopes name, project-admin types included.
func (pol *Policy) applyScopes(p *bus.Principal, fixed, grants int) {
	scopes, named := parseSmartScopes(p.Scope)
	if !named {
		return
	}
	if p.SuperAdmin && grants == 0 {
		for _, types := range []map[string]bool{adminTypes, protectedTypes} {
			for typ := range types {
				pol.entries = append(pol.entries, &entry{typ: typ, allow: allBits})
			}
		}
	}
	// The patient in context: the launch's, else a Patient's own.
	patient := p.Patient
	if t, id, ok := fhir.SplitReference(p.Profile); ok && t == "Patient" && patient == "" {
		patient = id
	}
	info := &scoped{context: "user", before: pol.entries}
	for _, t := range scopeTerms(p.Scope) {
		if resourceScope(t) {
			info.context, _, _ = strings.Cut(t, "/")
			break
		}
	}
	out := slices.Clone(pol.entries[:fixed])
	for _, e := range pol.entries[fixed:] {
		for _, s := range scopes {
			out = append(out, narrow(e, s, patient)...)
		}
	}
	pol.entries = out
	pol.scoped = info
}

// narrow is an entry as one scope leaves it: none when the scope does not
// cover the entry's type or grants none of its interactions.
func narrow(e *entry, s *smartScope, patient string) []*entry {
	allow := e.allow & s.allow
	if allow == 0 {
		return nil
	}
	typ := e.typ
	switch {
	case e.typ == "*" && s.typ != "*":
		if !e.applies(s.typ) {
			return nil
		}
		typ = s.typ
	case !s.covers(e.typ):
		return nil
	}
	types := []string{typ}
	if s.context == "patient" && patient != "" && typ == "*" {
		// The compartment condition differs by type: one entry per type
		// that can be in it.
		types = compartmentTypes()
	}
	var out []*entry
	for _, t := range types {
		if typ == "*" && !e.applies(t) {
			continue
		}
		conds := []store.Cond{}
		if e.filter != nil {
			conds = append(conds, *e.filter)
		}
		c, err := s.constraint(t)
		if err != nil {
			// parseSmartScope compiled the constraint for the scope's own
			// type; should another type refuse it, the scope grants nothing
			// there rather than everything.
			continue
		}
		if c != nil {
			conds = append(conds, *c)
		}
		if s.context == "patient" && patient != "" {
			c, ok := compartment(t, patient)
			if !ok {
				continue
			}
			conds = append(conds, c)
		}
		n := *e
		n.typ, n.allow = t, allow
		n.note = strings.TrimSpace(e.note + " (scope " + s.raw + ")")
		if len(conds) > 0 {
			f := store.And(conds...)
			n.filter = &f
		}
		out = append(out, &n)
	}
	return out
}

// compartment is the condition that keeps a type to one patient's
// resources: the Patient itself, or resources whose patient or subject
// names it. ok is false for a type with neither parameter: a patient/
// scope reaches none of it. (FHIR's Patient compartment has more
// parameters per type, such as performer or beneficiary; they are not
// followed here.)
func compartment(typ, patient string) (store.Cond, bool) {
	if typ == "Patient" {
		return store.Eq(store.FieldID, patient), true
	}
	codes := compartmentParams()[typ]
	if len(codes) == 0 {
		return store.Cond{}, false
	}
	var ors []store.Cond
	for _, code := range codes {
		q, err := search.Parse(typ, url.Values{code: {"Patient/" + patient}})
		if err != nil || len(q.Filter) == 0 {
			continue
		}
		ors = append(ors, store.And(q.Filter...))
	}
	if len(ors) == 0 {
		return store.Cond{}, false
	}
	return store.Or(ors...), true
}

// compartmentParams lists, per resource type, its reference parameters
// that name a patient: patient and subject.
var compartmentParams = sync.OnceValue(func() map[string][]string {
	out := map[string][]string{}
	for _, typ := range fhirschema.ResourceTypes() {
		for _, p := range search.Params(typ) {
			if p.Type == "reference" && (p.Code == "patient" || p.Code == "subject") {
				out[typ] = append(out[typ], p.Code)
			}
		}
	}
	return out
})

// compartmentTypes are the types a patient/* scope reaches on a Patient's
// token: Patient, and those with a patient or subject parameter.
var compartmentTypes = sync.OnceValue(func() []string {
	out := []string{"Patient"}
	for typ := range compartmentParams() {
		out = append(out, typ)
	}
	slices.Sort(out)
	return slices.Compact(out)
})

// refuse is the 403 for an interaction no entry grants: when the policy
// without the token's scopes would have granted it, it names the scope
// that is missing.
func (pol *Policy) refuse(typ string, i Interaction) error {
	if pol.scoped == nil {
		return fhir.Forbidden()
	}
	granted := false
	for _, e := range pol.scoped.before {
		if e.allow&i.bit() != 0 && e.applies(typ) {
			granted = true
			break
		}
	}
	if !granted {
		return fhir.Forbidden()
	}
	v2, v1 := "r", "read"
	switch i {
	case Search:
		v2 = "s"
	case Create:
		v2, v1 = "c", "write"
	case Update, Patch:
		v2, v1 = "u", "write"
	case Delete:
		v2, v1 = "d", "write"
	}
	scope := pol.scoped.context + "/" + typ
	return fhir.ForbiddenText(fmt.Sprintf("Insufficient scope: %s %s needs %s.%s or %s.%s", typ, i, scope, v2, scope, v1))
}
