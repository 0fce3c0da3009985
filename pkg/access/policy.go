package access

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/access/criteria"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/store"
)

// Policy is what one principal may do: the entries of its membership's
// access policies, instantiated with their parameters and compiled to
// search filters, after the fixed entries for project-admin types. It is
// immutable, so one compiled policy serves every request of a membership.
type Policy struct {
	// allProjects: a super admin reaches every project. unrestricted: a
	// super admin without an access policy; one with a policy is held to
	// it, as docs/interface.md advises for the client that creates projects.
	allProjects  bool
	unrestricted bool
	admin        bool
	project      string
	user         string // the caller's own User id; "" for clients and bots
	profile      string // the caller's profile reference, as writes record it in meta.author
	entries      []*entry
	blocked      *blockedParams // search parameters over hidden fields; nil when nothing is hidden
	scoped       *scoped        // set when the token's SMART scopes narrowed the entries (scopes.go)
}

// entry is one AccessPolicy.resource[] entry, compiled.
type entry struct {
	typ      string      // a resource type, or "*"
	wild     bool        // written as "*" (its criteria may have narrowed typ)
	allow    uint8       // interactions, as bits
	criteria string      // with the membership's values in, as /auth/me shows it
	note     string      // how the entry was narrowed since, for logs
	filter   *store.Cond // nil when the entry has no criteria
	// never marks criteria naming a parameter the membership does not
	// give: the entry grants its interactions on no resource.
	never    bool
	hidden   [][]string
	readonly [][]string
	// writeRule, when set, refuses a write that changes more than the
	// entry lets its holder change (an admin's own Project).
	writeRule func(old, after map[string]any) error
	// except are types a "*" entry gives way on (owned.go).
	except map[string]bool
}

const (
	bitRead uint8 = 1 << iota
	bitVRead
	bitHistory
	bitSearch
	bitCreate
	bitUpdate
	bitDelete

	readBits = bitRead | bitVRead | bitHistory | bitSearch
	allBits  = readBits | bitCreate | bitUpdate | bitDelete
)

// bit is the interaction's bit; a patch is an update, as AccessPolicy has
// no interaction of its own for it.
func (i Interaction) bit() uint8 {
	switch i {
	case Read:
		return bitRead
	case VRead:
		return bitVRead
	case History:
		return bitHistory
	case Search:
		return bitSearch
	case Create:
		return bitCreate
	case Update, Patch:
		return bitUpdate
	case Delete:
		return bitDelete
	}
	return 0
}

// membershipDoc is what a policy needs of a ProjectMembership.
type membershipDoc struct {
	Profile      *fhir.Reference `json:"profile"`
	AccessPolicy *fhir.Reference `json:"accessPolicy"`
	Access       []struct {
		Policy    *fhir.Reference `json:"policy"`
		Parameter []struct {
			Name           string          `json:"name"`
			ValueString    *string         `json:"valueString"`
			ValueReference *fhir.Reference `json:"valueReference"`
		} `json:"parameter"`
	} `json:"access"`
}

// policyDoc is what a policy needs of an AccessPolicy.
type policyDoc struct {
	Resource     []ResourceRule `json:"resource"`
	IPAccessRule []struct {
		Value  string `json:"value"`
		Action string `json:"action"`
	} `json:"ipAccessRule"`
}

// ResourceRule is one AccessPolicy.resource[] entry: as written in a
// policy, or as a compiled one shows it (Document).
type ResourceRule struct {
	ResourceType   string   `json:"resourceType"`
	Criteria       string   `json:"criteria,omitempty"`
	Readonly       bool     `json:"readonly,omitempty"`
	Interaction    []string `json:"interaction,omitempty"`
	HiddenFields   []string `json:"hiddenFields,omitempty"`
	ReadonlyFields []string `json:"readonlyFields,omitempty"`
}

// grant is one use of a policy by a membership: the policy's reference and
// the parameters it is instantiated with.
type grant struct {
	ref    string
	params criteria.Params
}

// grants lists the membership's policy uses in order: accessPolicy, then
// each access[] entry. The parameters are the entry's own, then %profile
// (the membership's profile) and %patient (the profile when it is a
// Patient), each unless the entry gives one of that name.
func (m *membershipDoc) grants() ([]grant, error) {
	profile := ""
	if m.Profile != nil {
		profile = m.Profile.Reference
	}
	base := func() criteria.Params {
		ps := criteria.Params{}
		if profile != "" {
			ps["profile"] = profile
			if t, _, ok := fhir.SplitReference(profile); ok && t == "Patient" {
				ps["patient"] = profile
			}
		}
		return ps
	}
	var out []grant
	if m.AccessPolicy != nil {
		out = append(out, grant{ref: m.AccessPolicy.Reference, params: base()})
	}
	for i, a := range m.Access {
		if a.Policy == nil || a.Policy.Reference == "" {
			return nil, fmt.Errorf("access[%d] names no policy", i)
		}
		ps := base()
		for _, p := range a.Parameter {
			switch {
			case p.Name == "":
				return nil, fmt.Errorf("access[%d] has a parameter without a name", i)
			case p.ValueReference != nil:
				ps[p.Name] = p.ValueReference.Reference
			case p.ValueString != nil:
				ps[p.Name] = *p.ValueString
			default:
				return nil, fmt.Errorf("access[%d] parameter %s has no value", i, p.Name)
			}
		}
		out = append(out, grant{ref: a.Policy.Reference, params: ps})
	}
	return out, nil
}

// Compile builds a principal's policy from its membership resource and the
// AccessPolicy resources the membership names (keyed by reference,
// "AccessPolicy/<id>"). A nil membership, or one naming no policy, has
// full access to its project's ordinary resources.
func Compile(p *bus.Principal, membership []byte, policies map[string][]byte) (*Policy, error) {
	pol := &Policy{project: p.Project, admin: p.Admin, allProjects: p.SuperAdmin, profile: p.Profile}
	var grants []grant
	if membership != nil {
		var m membershipDoc
		if err := json.Unmarshal(membership, &m); err != nil {
			return nil, fmt.Errorf("membership: %w", err)
		}
		var err error
		if grants, err = m.grants(); err != nil {
			return nil, fmt.Errorf("membership: %w", err)
		}
	}
	if p.SuperAdmin && len(grants) == 0 && !hasResourceScopes(p.Scope) {
		pol.unrestricted = true
		return pol, nil
	}
	if !p.SuperAdmin {
		if t, id, ok := fhir.SplitReference(p.User); ok && t == "User" {
			pol.user = id
		}
		pol.entries = fixedEntries(p, pol.user)
	}
	fixed := len(pol.entries)
	if len(grants) == 0 {
		pol.entries = append(pol.entries, &entry{typ: "*", wild: true, allow: allBits})
		pol.applyScopes(p, fixed, 0)
		pol.entries = confineOwned(p, pol.entries)
		pol.blocked = compileBlocked(pol.entries)
		return pol, nil
	}
	named := map[string]bool{}
	for _, g := range grants {
		body, ok := policies[g.ref]
		if !ok {
			return nil, fmt.Errorf("policy %s not loaded", g.ref)
		}
		var doc policyDoc
		if err := json.Unmarshal(body, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", g.ref, err)
		}
		for i, r := range doc.Resource {
			e, err := compileEntry(r, g.params)
			if err != nil {
				return nil, fmt.Errorf("%s resource[%d]: %w", g.ref, i, err)
			}
			// Project-admin and protected types are never granted by a
			// policy (Medplum drops such entries); the fixed entries decide.
			// A super admin's policy may name them.
			if Administrative(e.typ) && !p.SuperAdmin {
				continue
			}
			named[e.typ] = true
			pol.entries = append(pol.entries, e)
		}
	}
	if p.SuperAdmin {
		// As in Medplum, a super admin keeps full access to the
		// project-admin types its policy does not name.
		for _, types := range []map[string]bool{adminTypes, protectedTypes} {
			for typ := range types {
				if !named[typ] {
					pol.entries = append(pol.entries, &entry{typ: typ, allow: allBits})
				}
			}
		}
	}
	pol.applyScopes(p, fixed, len(grants))
	pol.entries = confineOwned(p, pol.entries)
	pol.blocked = compileBlocked(pol.entries)
	return pol, nil
}

// fixedEntries are the rules that hold whatever the membership's policy
// says, as Medplum's server adds them to every policy (its synthetic
// project-admin policy, and its project-admin resource types that no
// policy entry opens to a non-admin): a user reads and updates its own User
// (email, project and the like read-only); an admin reads the project's
// Project, memberships, project-scoped users and security requests, with
// secrets hidden. Changes to those go through the /admin routes.
func fixedEntries(p *bus.Principal, user string) []*entry {
	userSecrets := [][]string{{"passwordHash"}, {"mfaSecret"}}
	var out []*entry
	if user != "" {
		out = append(out, &entry{
			typ: "User", allow: bitRead | bitVRead | bitHistory | bitUpdate,
			criteria: "User?_id=" + user, filter: cond(store.Eq(store.FieldID, user)),
			hidden: userSecrets,
			readonly: [][]string{{"email"}, {"emailVerified"}, {"project"}, {"admin"},
				{"mfaEnrolled"}, {"externalId"}},
		})
	}
	if p.Admin && p.Project != "" {
		own := cond(store.Eq(store.FieldProject, p.Project))
		out = append(out,
			&entry{typ: "Project", allow: readBits | bitUpdate, criteria: "Project?_id=" + p.Project,
				filter:    cond(store.Eq(store.FieldID, p.Project)),
				hidden:    [][]string{{"superAdmin"}, {"systemSecret"}, {"strictMode"}, {"site", "recaptchaSecretKey"}},
				writeRule: checkAdminProjectWrite},
			&entry{typ: "ProjectMembership", allow: readBits, criteria: "ProjectMembership?_project=" + p.Project, filter: own},
			&entry{typ: "User", allow: readBits, criteria: "User?_project=" + p.Project, filter: own, hidden: userSecrets},
			&entry{typ: "UserSecurityRequest", allow: readBits, criteria: "UserSecurityRequest?_project=" + p.Project, filter: own},
		)
	}
	return out
}

// compileEntry compiles one resource[] entry with a grant's parameters.
func compileEntry(r ResourceRule, ps criteria.Params) (*entry, error) {
	typ, crit := r.ResourceType, r.Criteria
	if typ == "" {
		return nil, fmt.Errorf("no resourceType")
	}
	e := &entry{typ: typ, wild: typ == "*", allow: allBits, criteria: crit}
	if len(r.Interaction) > 0 {
		e.allow = 0
		for _, s := range r.Interaction {
			b := Interaction(s).bit()
			if b == 0 || s == string(Patch) {
				return nil, fmt.Errorf("unknown interaction %q", s)
			}
			e.allow |= b
		}
	}
	if r.Readonly {
		e.allow &= readBits
	}
	for _, f := range r.HiddenFields {
		if f == "" {
			return nil, fmt.Errorf("empty hidden field")
		}
		e.hidden = append(e.hidden, splitPath(f))
	}
	for _, f := range r.ReadonlyFields {
		if f == "" {
			return nil, fmt.Errorf("empty read-only field")
		}
		e.readonly = append(e.readonly, splitPath(f))
	}
	if crit == "" {
		return e, nil
	}
	c, err := criteria.Parse(crit, ps)
	if err != nil {
		return nil, err
	}
	e.criteria = c.Text
	switch {
	case typ == "*":
		// Medplum matches such an entry's criteria only against resources
		// of the criteria's type: it is an entry for that type.
		e.typ = c.Type
	case c.Type != typ:
		return nil, fmt.Errorf("criteria %q are not for %s", crit, typ)
	}
	if c.Unresolved != "" {
		e.never = true
		return e, nil
	}
	q, err := search.Parse(c.Type, c.Query)
	if err != nil {
		return nil, fmt.Errorf("criteria %q: %w", crit, err)
	}
	if len(q.Filter) > 0 {
		f := store.And(q.Filter...)
		if err := store.Check(f); err != nil {
			return nil, fmt.Errorf("criteria %q: %w", crit, err)
		}
		e.filter = &f
	}
	return e, nil
}

// applies reports whether an entry is about a resource type. '*' covers
// every type but the project-admin and protected ones.
func (e *entry) applies(typ string) bool {
	if e.typ == typ {
		return true
	}
	return e.typ == "*" && !adminTypes[typ] && !protectedTypes[typ] && !e.except[typ]
}

// plain reports whether an entry grants without conditions.
func (e *entry) plain() bool {
	return e.filter == nil && !e.never && len(e.hidden) == 0 && len(e.readonly) == 0 && e.writeRule == nil
}

// matches reports whether a resource meets the entry's criteria.
func (e *entry) matches(d *doc) bool {
	if e.never {
		return false
	}
	if e.filter == nil {
		return true
	}
	return store.Matches(*e.filter, d.Field)
}

// grants reports whether an entry grants i on typ. A write of an
// admin-written type is granted to a caller who is not an admin only by an
// entry that names the type itself: "*", with or without criteria, never
// grants it, so a member without a policy cannot give a client a key of
// their own, loosen a policy or change what a bot runs and as whom.
//
// The audit trail is read the same way: "*" never grants a read of an
// AuditEvent to a member who is not an admin (everyone's sign-ins, from
// where, and who read which patient); a policy that names the type does.
func (p *Policy) grants(e *entry, typ string, i Interaction) bool {
	if e.allow&i.bit() == 0 || !e.applies(typ) {
		return false
	}
	if typ == "AuditEvent" && !i.IsWrite() {
		return p.admin || p.allProjects || !e.wild
	}
	return !i.IsWrite() || !adminWritten[typ] || p.admin || p.allProjects || !e.wild
}

// Allow decides whether the policy grants an interaction on a type at all:
// 403 when no entry does (a type the policy does not name, a protected or
// project-admin type, a write the entry does not allow; for a write of an
// admin-written type, saying that only administrators change it).
// Criteria then narrow which resources it applies to.
func (p *Policy) Allow(typ string, i Interaction) error {
	if p.unrestricted {
		return nil
	}
	for _, e := range p.entries {
		if p.grants(e, typ, i) {
			return nil
		}
	}
	if i.IsWrite() && adminWritten[typ] {
		return AdminOnly(typ)
	}
	return p.refuse(typ, i)
}

// AllowResource is Allow for one resource named by id (empty for a
// create, a search or a conditional write). On a project-admin type, a
// caller who is not an admin reaches only its own User; and only its own
// User is anyone's to write: 403 for any other, wherever it is.
func (p *Policy) AllowResource(typ, id string, i Interaction) error {
	if err := p.Allow(typ, i); err != nil {
		return err
	}
	if p.allProjects || !adminTypes[typ] {
		return nil
	}
	own := typ == "User" && id != "" && id == p.user
	if !own && (!p.admin || typ == "User" && i.IsWrite()) {
		return fhir.Forbidden()
	}
	return nil
}

// Plain reports that the policy puts no condition on a type: no criteria
// and no field rules, so only Allow matters and writes need no reading of
// the current version.
func (p *Policy) Plain(typ string) bool {
	if p.unrestricted {
		return true
	}
	for _, e := range p.entries {
		if e.applies(typ) && !e.plain() {
			return false
		}
	}
	return true
}

// Scope is the repository scope for typ/id: the caller's project (where
// its creates land), widened to every project for a super admin and for the
// caller's own User, which may be server-scoped and belong to no project.
func (p *Policy) Scope(typ, id string) repo.Scope {
	own := typ == "User" && p.user != "" && id == p.user
	return repo.Scope{Project: p.project, AllProjects: p.allProjects || own}
}

// SearchFilter is the condition an interaction's criteria put on a search of
// typ, which repo.Search ANDs with the query; nil when the criteria do not
// confine it. ok is false when no resource can match, so there is nothing
// to search.
func (p *Policy) SearchFilter(typ string, i Interaction) (f []store.Cond, ok bool) {
	if p.unrestricted {
		return nil, true
	}
	var ors []store.Cond
	for _, e := range p.entries {
		if !p.grants(e, typ, i) || e.never {
			continue
		}
		if e.filter == nil {
			return nil, true
		}
		ors = append(ors, *e.filter)
	}
	if len(ors) == 0 {
		return nil, false
	}
	return []store.Cond{store.Or(ors...)}, true
}

// cond is a condition's address, for an entry's filter.
func cond(c store.Cond) *store.Cond { return &c }

// Readable reports whether the policy lets i (read, vread, history) reach
// a stored resource: some entry granting i matches it. A resource that is
// not readable answers 404, as if it did not exist.
func (p *Policy) Readable(i Interaction, res *repo.Resource) (bool, error) {
	if p.Plain(res.Type) {
		return p.Allow(res.Type, i) == nil, nil
	}
	d := storedDoc(res)
	ok := p.granted(res.Type, i, d)
	return ok, d.Err()
}

// granted reports whether an entry granting i matches the document.
func (p *Policy) granted(typ string, i Interaction, d *doc) bool {
	for _, e := range p.entries {
		if p.grants(e, typ, i) && e.matches(d) {
			return true
		}
	}
	return false
}

// visible reports whether any entry about the type matches the document.
func (p *Policy) visible(typ string, d *doc) bool {
	for _, e := range p.entries {
		if e.applies(typ) && e.matches(d) {
			return true
		}
	}
	return false
}

// governing is the entry whose field rules apply to a resource: the first
// about its type whose criteria it meets, as in Medplum.
func (p *Policy) governing(typ string, d *doc) *entry {
	for _, e := range p.entries {
		if e.applies(typ) && e.matches(d) {
			return e
		}
	}
	return nil
}

// hides reports whether any entry about the type hides fields.
func (p *Policy) hides(typ string) bool {
	for _, e := range p.entries {
		if e.applies(typ) && len(e.hidden) > 0 {
			return true
		}
	}
	return false
}

// Redact returns the resource as the caller may see it: without the hidden
// fields of the entry that governs it, and without a Subscription's secret
// unless the caller is an admin or wrote the version (secret.go). The
// stored resource is never changed; a copy is returned when something was
// removed.
func (p *Policy) Redact(res *repo.Resource) (*repo.Resource, error) {
	if p.unrestricted || res.Deleted || len(res.JSON) == 0 {
		return res, nil
	}
	hides, secret := p.hides(res.Type), p.mayHideSecret(res)
	if !hides && !secret {
		return res, nil
	}
	d := storedDoc(res)
	var hidden [][]string
	if hides {
		e := p.governing(res.Type, d)
		if d.Err() != nil {
			return nil, d.Err()
		}
		if e != nil {
			hidden = e.hidden
		}
	}
	if len(hidden) == 0 && !secret {
		return res, nil
	}
	// The map was decoded from the stored bytes for this call: changing it
	// changes nothing stored or cached.
	m, err := d.Content()
	if err != nil {
		return nil, err
	}
	for _, path := range hidden {
		removePath(m, path)
	}
	stripped := secret && p.stripSecret(m)
	if len(hidden) == 0 && !stripped {
		return res, nil
	}
	body, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return res.WithJSON(body), nil
}

// ReadOnlyError is the 400 for a write that changes a read-only field.
// Medplum silently puts the old value back; Pinion refuses, and says so.
func ReadOnlyError(field string) error {
	return fhir.BadRequest("Field "+field+" is read-only under your access policy (Medplum silently keeps the stored value; Pinion refuses the change)", field)
}

// Write checks a create, update, patch or delete and prepares its content.
// before is the stored version (nil for a create); after is the content to
// store (nil for a delete), which Write changes: the hidden fields of the
// entry governing the resource are put back from before (or dropped on a
// create), since the writer never saw them. project is where the resource
// lives or will.
//
// The answers: 403 when no entry grants the interaction on the type; 404
// when before is not visible under any entry (as a read would say); 403
// when before or the new content does not meet the criteria of an entry
// granting the interaction; 400 naming the field when a read-only field
// changes.
func (p *Policy) Write(i Interaction, typ string, before *repo.Resource, after map[string]any, project string) error {
	if err := p.Allow(typ, i); err != nil {
		return err
	}
	if p.unrestricted {
		return nil
	}
	var bd *doc
	var old map[string]any
	if before != nil {
		bd = storedDoc(before)
		if !p.visible(typ, bd) {
			return firstErr(bd.Err(), fhir.NotFound())
		}
		if !p.granted(typ, i, bd) {
			return firstErr(bd.Err(), fhir.Forbidden())
		}
		var err error
		if old, err = bd.Content(); err != nil {
			return err
		}
	}
	if after == nil {
		return nil
	}
	if err := p.secretWriteError(before, old); err != nil {
		return err
	}
	id, _ := after["id"].(string)
	if before != nil {
		id = before.ID
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	ad := search.ContentDoc(typ, id, project, now, after)
	var rules *entry
	if bd != nil {
		rules = p.governing(typ, bd)
	} else {
		rules = p.governing(typ, ad)
	}
	if rules != nil {
		for _, path := range rules.hidden {
			restorePath(after, old, path)
		}
		for _, path := range rules.readonly {
			if changed(old, after, path) {
				return ReadOnlyError(strings.Join(path, "."))
			}
		}
		if rules.writeRule != nil {
			if err := rules.writeRule(old, after); err != nil {
				return err
			}
		}
		ad.Changed() // the content changed
	}
	if !p.granted(typ, i, ad) {
		return fhir.Forbidden()
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// doc is a resource as the criteria see it (search.Doc).
type doc = search.Doc

func storedDoc(res *repo.Resource) *doc {
	return search.StoredDoc(res.Type, res.ID, res.Project, res.LastUpdated, res.JSON)
}

// String lists the compiled entries, for logs and tests: type,
// interactions, criteria as written.
func (p *Policy) String() string {
	if p.unrestricted {
		return "super admin"
	}
	var b strings.Builder
	for i, e := range p.entries {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s[%s]", e.typ, allowString(e.allow))
		if c := strings.TrimSpace(e.criteria + " " + e.note); c != "" {
			b.WriteString(" " + c)
		}
		if e.never {
			b.WriteString(" (unresolved: matches nothing)")
		}
	}
	return b.String()
}

func allowString(a uint8) string { return strings.Join(interactions(a), ",") }

// interactions names the interactions of a set of bits.
func interactions(a uint8) []string {
	var s []string
	for _, i := range []Interaction{Read, VRead, History, Search, Create, Update, Delete} {
		if a&i.bit() != 0 {
			s = append(s, string(i))
		}
	}
	return s
}
