package graphql

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/pinion-health/pinion/pkg/fhirschema"
	"github.com/pinion-health/pinion/pkg/search"
)

// The schema follows Medplum's (packages/server/src/fhir/graphql): one
// object type per resource, datatype and backbone element, a ResourceList
// union of every resource type, Reference.resource, and on the root
// <Type>(id:), <Type>List(<search parameters>) and the mutations
// <Type>Create(res:), <Type>Update(id:, res:), <Type>Delete(id:).
// Search parameter codes become arguments with '-' written '_'.

const (
	queryRoot    = "QueryType"
	mutationRoot = "MutationType"
	resourceList = "ResourceList"
	// jsonScalar carries a whole resource as a mutation's input.
	jsonScalar = "JSON"
)

// schema is built once, on first use, from fhirschema and the search
// registry; a failure is a build defect (both tables are generated and
// tested), reported on every request rather than panicking.
var schema = sync.OnceValues(func() (*ast.Schema, error) {
	sdl := buildSDL()
	s, err := gqlparser.LoadSchema(&ast.Source{Name: "fhir.graphql", Input: sdl, BuiltIn: false})
	if err != nil {
		return nil, fmt.Errorf("graphql schema: %w", err)
	}
	return s, nil
})

// typeName is the GraphQL name of a FHIR type: a backbone element's path
// with its dots removed and each part capitalised (Patient.contact is
// PatientContact).
func typeName(fhirType string) string {
	if !strings.Contains(fhirType, ".") {
		return fhirType
	}
	var b strings.Builder
	for _, part := range strings.Split(fhirType, ".") {
		b.WriteString(upperFirst(part))
	}
	return b.String()
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// argName is the argument a search parameter code becomes: GraphQL names
// have no '-'.
func argName(code string) string { return strings.ReplaceAll(code, "-", "_") }

// paramCode reverses argName ("_" leads the built-in parameters).
func paramCode(arg string) string {
	if strings.HasPrefix(arg, "_") {
		return arg
	}
	return strings.ReplaceAll(arg, "_", "-")
}

// searchArgs are the arguments of a <Type>List field.
func searchArgs(b *strings.Builder, typ string) {
	b.WriteString("_count: Int, _offset: Int, _sort: String, _filter: String, _total: String")
	for _, p := range search.Params(typ) {
		if p.Code == "_count" || p.Code == "_offset" || p.Code == "_sort" || p.Code == "_filter" || p.Code == "_total" {
			continue
		}
		fmt.Fprintf(b, ", %s: String", argName(p.Code))
	}
}

// fieldType is the GraphQL type of a JSON property whose FHIR type is t.
func fieldType(t string, array bool) string {
	var n string
	if t == "Resource" {
		n = resourceList
	} else if d, ok := fhirschema.Describe(t); !ok {
		n = "String"
	} else if d.Kind == "primitive-type" {
		switch d.JSON {
		case "boolean":
			n = "Boolean"
		case "number":
			n = "Float"
		default:
			n = "String"
		}
	} else {
		n = typeName(t)
	}
	if array {
		return "[" + n + "]"
	}
	return n
}

// reverseLinks maps a resource type to the reference parameters of each
// other type that may point at it: the <Child>List(_reference:) fields.
func reverseLinks(resources []string) map[string]map[string][]string {
	out := map[string]map[string][]string{}
	for _, child := range resources {
		for _, p := range search.Params(child) {
			if p.Type != "reference" {
				continue
			}
			for _, target := range p.Targets {
				if out[target] == nil {
					out[target] = map[string][]string{}
				}
				out[target][child] = append(out[target][child], p.Code)
			}
		}
	}
	return out
}

func buildSDL() string {
	var b strings.Builder
	resources := fhirschema.ResourceTypes()
	links := reverseLinks(resources)
	fmt.Fprintf(&b, "schema { query: %s mutation: %s }\n", queryRoot, mutationRoot)
	fmt.Fprintf(&b, "scalar %s\n", jsonScalar)
	fmt.Fprintf(&b, "union %s = %s\n", resourceList, strings.Join(resources, " | "))
	for _, name := range fhirschema.TypeNames() {
		d, _ := fhirschema.Describe(name)
		if d.Kind == "primitive-type" {
			continue
		}
		fmt.Fprintf(&b, "type %s {\n", typeName(name))
		if d.Kind == "resource" {
			b.WriteString("  resourceType: String\n")
		}
		for _, el := range d.Elements {
			keys := make([]string, 0, len(el.JSON))
			for k := range el.JSON {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				fmt.Fprintf(&b, "  %s: %s\n", k, fieldType(el.JSON[k], el.Array))
			}
		}
		if name == "Reference" {
			fmt.Fprintf(&b, "  resource: %s\n", resourceList)
		}
		if d.Kind == "resource" {
			children := make([]string, 0, len(links[name]))
			for c := range links[name] {
				children = append(children, c)
			}
			slices.Sort(children)
			for _, child := range children {
				fmt.Fprintf(&b, "  %sList(_reference: %s!, ", child, reverseEnum(name, child))
				searchArgs(&b, child)
				fmt.Fprintf(&b, "): [%s]\n", child)
			}
		}
		b.WriteString("}\n")
		if d.Kind == "resource" {
			for child, codes := range links[name] {
				fmt.Fprintf(&b, "enum %s {", reverseEnum(name, child))
				for _, c := range codes {
					b.WriteString(" " + argName(c))
				}
				b.WriteString(" }\n")
			}
		}
	}
	fmt.Fprintf(&b, "type %s {\n", queryRoot)
	for _, r := range resources {
		fmt.Fprintf(&b, "  %s(id: ID!): %s\n  %sList(", r, r, r)
		searchArgs(&b, r)
		fmt.Fprintf(&b, "): [%s]\n", r)
	}
	b.WriteString("}\n")
	fmt.Fprintf(&b, "type %s {\n", mutationRoot)
	for _, r := range resources {
		fmt.Fprintf(&b, "  %sCreate(res: %s!): %s\n", r, jsonScalar, r)
		fmt.Fprintf(&b, "  %sUpdate(id: ID!, res: %s!): %s\n", r, jsonScalar, r)
		fmt.Fprintf(&b, "  %sDelete(id: ID!): %s\n", r, r)
	}
	b.WriteString("}\n")
	return b.String()
}

// reverseEnum names the enum of a reverse link's _reference argument, as
// Medplum does.
func reverseEnum(target, child string) string { return target + "_" + child + "_reference" }
