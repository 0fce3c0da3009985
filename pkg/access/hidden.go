package access

import (
	"maps"
	"strings"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/search"
)

// A search or _sort on a parameter that reads a hidden field reveals that
// field: birthdate=lt1990-01-01 halves the range of a hidden birthDate on
// every request, _sort orders by it, identifier=x and :missing test it.
// CheckSearch refuses such a query.
//
// Which entry's field rules apply depends on the resource, so a field
// counts as hidden for a type when any entry that can govern a resource of
// that type hides it: each entry about the type, in order, up to and
// including the first without criteria (it meets every resource, so no
// later entry ever governs). An entry whose criteria name a variable the
// membership does not give matches nothing and never governs. The
// interaction an entry grants does not matter: field rules come from the
// first matching entry whatever it grants, as in governing.
//
// Parameters are matched to hidden fields on element paths
// (search.ParamPaths): a parameter reads a hidden field when one of its
// paths equals the field, lies under it (hidden name, family reads
// name.family) or above it (hidden name.family, name reads name.family).
//
// Choice elements. Hidden fields name JSON properties, as Redact removes
// them and as Medplum does: valueQuantity hides Observation.valueQuantity,
// so value-quantity (Observation.value as Quantity) and
// combo-value-quantity are refused. A field naming the choice element
// itself, value or value[x], has no property to remove, but its author
// plainly meant the value whatever its type: here it counts as every
// value<Type> property, Type one of FHIR's data types. This may over-match
// (hidden birth would cover birthDate), which can only refuse a search,
// never allow one.

// blockedParams is what CheckSearch needs, computed once per policy: for
// each resource type, the search parameters (by code) that read a hidden
// field, with that field.
type blockedParams struct {
	byType map[string]map[string]string
	// other serves the types absent from byType, which only '*' entries
	// reach and which have only the parameters common to every resource.
	other map[string]string
}

// compileBlocked computes the blocked parameters of a policy's entries;
// nil when no parameter of any type reads a hidden field, so that
// CheckSearch then costs one comparison.
func compileBlocked(entries []*entry) *blockedParams {
	named := map[string]bool{}
	hides, wildHides := false, false
	for _, e := range entries {
		if len(e.hidden) > 0 && !e.never {
			hides = true
			wildHides = wildHides || e.typ == "*"
		}
		if e.typ != "*" {
			named[e.typ] = true
		}
	}
	if !hides {
		return nil
	}
	if wildHides {
		for _, t := range search.TypesWithParams() {
			named[t] = true
		}
	}
	b := &blockedParams{byType: map[string]map[string]string{}}
	for t := range named {
		// Kept when nil too: a type listed here never falls to other.
		b.byType[t] = blockedFor(entries, t)
	}
	if wildHides {
		// "" is a type no concrete entry names, with only the common
		// parameters: what any type outside byType is.
		b.other = blockedFor(entries, "")
	}
	if b.other == nil {
		// No fallback to fall to: a type that blocks nothing need not be
		// listed. Often none does (the fixed entries' hidden fields are
		// read by no parameter), and CheckSearch then costs one comparison.
		maps.DeleteFunc(b.byType, func(_ string, m map[string]string) bool { return len(m) == 0 })
		if len(b.byType) == 0 {
			return nil
		}
	}
	return b
}

// blockedFor is the blocked parameters of one resource type; nil if none.
func blockedFor(entries []*entry, typ string) map[string]string {
	var hidden [][]string
	for _, e := range entries {
		if !e.applies(typ) || e.never {
			continue
		}
		hidden = append(hidden, e.hidden...)
		if e.filter == nil {
			break // this entry governs every resource no earlier one does
		}
	}
	if len(hidden) == 0 {
		return nil
	}
	var out map[string]string
	for _, p := range search.Params(typ) {
		if f := readsHidden(search.ParamPaths(typ, p.Code), hidden); f != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[p.Code] = f
		}
	}
	return out
}

// readsHidden returns the first hidden field one of the paths reads, as
// written in the policy; "" when none.
func readsHidden(paths []string, hidden [][]string) string {
	for _, h := range hidden {
		for _, p := range paths {
			if related(h, splitPath(p)) {
				return strings.Join(h, ".")
			}
		}
	}
	return ""
}

// related reports whether a parameter path and a hidden field are the same
// element or one contains the other.
func related(hidden, path []string) bool {
	for i := 0; i < len(hidden) && i < len(path); i++ {
		if !namesProperty(hidden[i], path[i]) {
			return false
		}
	}
	return true
}

// namesProperty reports whether one step of a hidden field names a JSON
// property: the property itself, or a choice element (value, value[x])
// naming any of its value<Type> properties.
func namesProperty(field, property string) bool {
	if field == property {
		return true
	}
	base := strings.TrimSuffix(field, "[x]")
	if base == property {
		return true
	}
	rest, ok := strings.CutPrefix(property, base)
	return ok && choiceTypes[rest]
}

// choiceTypes are FHIR R4's data types as they end a choice element's
// property name (valueQuantity, deceasedDateTime): the open type list, and
// Medplum's.
var choiceTypes = func() map[string]bool {
	m := map[string]bool{}
	for _, t := range strings.Fields(`base64Binary boolean canonical code date dateTime
		decimal id instant integer markdown oid positiveInt string time unsignedInt uri url
		uuid Address Age Annotation Attachment CodeableConcept Coding ContactPoint Count
		Distance Duration HumanName Identifier Money Period Quantity Range Ratio Reference
		SampledData Signature Timing ContactDetail Contributor DataRequirement Expression
		ParameterDefinition RelatedArtifact TriggerDefinition UsageContext Dosage Meta`) {
		m[strings.ToUpper(t[:1])+t[1:]] = true
	}
	return m
}()

// CheckSearch refuses a search of typ (as search.Parse understood it) that
// filters or sorts on a parameter reading a field the caller's policy
// hides, plainly or inside _filter at any depth (search.Query.Reads):
// 400 naming the parameter, "_sort" for a sort key. Any other query,
// and every query when nothing is hidden on typ, is nil. Parameters that
// read no hidden field, and _count, _offset, _total, _summary and
// _elements, are never refused; _id, _lastUpdated and _project read id,
// meta.lastUpdated and meta.project, so a policy hiding those (or meta)
// refuses them.
//
// Call it for every search under the policy, conditional operations
// included: their condition reveals as much as a search.
func (p *Policy) CheckSearch(typ string, q *search.Query) error {
	if p.blocked == nil {
		return nil
	}
	blocked, ok := p.blocked.byType[typ]
	if !ok && p.blocked.other != nil && !Administrative(typ) {
		blocked = p.blocked.other
	}
	if len(blocked) == 0 {
		return nil
	}
	// Every parameter the conditions test, _filter's included: q.Reads
	// is sorted, so the first offender named does not depend on how the
	// query was written.
	for _, c := range q.Reads {
		if f, ok := blocked[c]; ok {
			return fhir.BadRequest("Search parameter "+c+" reads a field hidden by your access policy ("+f+")", c)
		}
	}
	sort := q.Canonical.Get("_sort")
	for sort != "" {
		var item string
		item, sort, _ = strings.Cut(sort, ",")
		c := strings.TrimPrefix(item, "-")
		if f, ok := blocked[c]; ok {
			return fhir.BadRequest("Sort parameter "+c+" reads a field hidden by your access policy ("+f+")", "_sort")
		}
	}
	return nil
}
