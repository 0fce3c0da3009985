package access

import (
	"net/url"
	"strings"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/store"
)

// Some resources are kept for one profile: an export's AsyncJob and its
// NDJSON files (Binaries) hold everything its requester could read, hidden
// fields and resources outside another member's criteria included. Such a
// resource carries an owner tag in meta.security (OwnerTag), and only its
// owner and the project's admins (and super admins) read, find or change
// it; to anyone else it does not exist (404, absent from searches). A
// resource without the tag is an ordinary one.
//
// The tag is kept in meta.security because that is a search field of every
// type: the rule is a condition searches push into the store, so paging
// and totals count only what the caller may see.

// OwnerSystem is the system of the owner tag; its code is the owner's
// profile reference ("Practitioner/<id>").
const OwnerSystem = "https://pinion.health/fhir/CodeSystem/owner"

// ownedTypes are the types the owner tag confines.
var ownedTypes = map[string]bool{"AsyncJob": true, "Binary": true}

// ownedOrder lists ownedTypes in a fixed order, for compiled entries.
var ownedOrder = []string{"AsyncJob", "Binary"}

// OwnerTag is the meta.security coding that keeps a resource for profile.
func OwnerTag(profile string) map[string]any {
	return map[string]any{"system": OwnerSystem, "code": profile, "display": "kept for its owner and the project's admins"}
}

// ownerCond holds for a resource of typ that carries no owner tag or is
// kept for profile.
func ownerCond(typ, profile string) store.Cond {
	v := url.Values{"_security:not": {OwnerSystem + "|"}}
	q, err := search.Parse(typ, v)
	if err != nil || len(q.Filter) != 1 {
		panic("access: owner condition: " + typ) // _security is a parameter of every type
	}
	untagged := q.Filter[0]
	if profile == "" {
		return untagged
	}
	q, err = search.Parse(typ, url.Values{"_security": {OwnerSystem + "|" + profile}})
	if err != nil || len(q.Filter) != 1 {
		panic("access: owner condition: " + typ)
	}
	return store.Or(untagged, q.Filter[0])
}

// confineOwned narrows the entries of a principal who is not an admin to
// the owned resources it owns: an entry about an owned type gets the owner
// condition ANDed to its criteria, and an entry about every type ("*")
// gives way, on the owned types, to such narrowed copies placed where it
// stood (so the entry that governs a resource's field rules is the same).
func confineOwned(p *bus.Principal, entries []*entry) []*entry {
	if p.Admin || p.SuperAdmin {
		return entries
	}
	out := make([]*entry, 0, len(entries)+len(ownedOrder))
	for _, e := range entries {
		switch {
		case ownedTypes[e.typ]:
			out = append(out, narrowedTo(e, e.typ, p.Profile))
		case e.typ == "*":
			for _, t := range ownedOrder {
				if !e.except[t] {
					out = append(out, narrowedTo(e, t, p.Profile))
				}
			}
			wide := *e
			wide.except = ownedTypes
			out = append(out, &wide)
		default:
			out = append(out, e)
		}
	}
	return out
}

// narrowedTo is a copy of e about typ alone, confined by the owner
// condition.
func narrowedTo(e *entry, typ, profile string) *entry {
	n := *e
	n.typ = typ
	c := ownerCond(typ, profile)
	if e.filter != nil {
		c = store.And(*e.filter, c)
	}
	n.filter = &c
	n.note = strings.TrimSpace(e.note + " (owned: " + typ + " kept for another profile excluded)")
	return &n
}
