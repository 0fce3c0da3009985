package search

import "slices"

// builtinPaths are the elements the parameters this package implements
// itself stand for: they are matched on the document's own fields (_id,
// ts, project), which hold these elements' values.
var builtinPaths = map[string][]string{
	"_id":          {"id"},
	"_lastUpdated": {"meta.lastUpdated"},
	"_project":     {"meta.project"},
}

// ParamPaths lists the element paths a search parameter of a resource type
// reads, sorted: dotted JSON property names from the resource's root
// ("birthDate", "name.family", "meta.tag"), the same form as an access
// policy's hiddenFields. A path reads its element whole, sub-elements
// included. nil for a parameter the type does not have.
//
// Derived from the compiled FHIRPath in params.txt, so it says what Fields
// actually reads:
//
//   - a union (a | b) lists each branch;
//   - a choice element appears as the JSON properties the expression can
//     select: value.as(Quantity) is valueQuantity; Patient.deceased is
//     deceasedBoolean and deceasedDateTime;
//   - where(system = 'email') also reads the element it tests
//     (telecom.system beside telecom), since the match reveals its value;
//   - resolve() is T and the type of a reference read the reference, which
//     the path to the Reference covers.
func ParamPaths(resourceType, code string) []string {
	if ps, ok := builtinPaths[code]; ok {
		return slices.Clone(ps)
	}
	p := loadRegistry().lookup(resourceType, code)
	if p == nil {
		return nil
	}
	var out []string
	for _, pa := range p.paths {
		out = appendPaths(out, "", pa)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// appendPaths appends the element paths one compiled path reads, below
// prefix (a dotted path, "" at the root).
func appendPaths(out []string, prefix string, pa path) []string {
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	for i, st := range pa {
		switch st.op {
		case opField:
			if len(st.keys) == 1 {
				prefix = join(st.keys[0])
				continue
			}
			// Several keys (a choice element's properties): each is a path.
			for _, k := range st.keys {
				out = appendPaths(out, join(k), pa[i+1:])
			}
			return out
		case opWhere:
			out = append(out, join(st.arg))
		}
	}
	if prefix != "" {
		out = append(out, prefix)
	}
	return out
}

// TypesWithParams lists the resource types that have search parameters of
// their own, sorted. Any other type has only the parameters common to every
// resource (Params lists them for such a type too).
func TypesWithParams() []string {
	r := loadRegistry()
	out := make([]string, 0, len(r.byType))
	for t := range r.byType {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}
