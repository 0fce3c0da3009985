package fhirschema

import (
	"slices"
	"strings"
)

// Type describes one type of the table, for answers shaped like a
// StructureDefinition (GraphQL's StructureDefinitionList): the same
// definitions Validate checks against, so a client's forms ask for what
// the server accepts.
type Type struct {
	Name string
	// Kind is "primitive-type", "complex-type", "resource" or "backbone"
	// (a backbone element, named by its path: "Patient.contact").
	Kind string
	// JSON is a primitive's JSON kind: "string", "boolean" or "number".
	JSON     string
	Elements []Element
}

// Element is one element of a Type, in the StructureDefinition's order.
type Element struct {
	Name   string // as declared: "given", "value[x]"
	Min    int
	Max    int // -1 when unbounded
	Array  bool
	Choice bool
	// Types are the element's types: Code is the FHIR type ("Quantity",
	// "Resource", or a backbone's path), Profile the profile it is
	// checked against when the table names one ("SimpleQuantity").
	Types []ElementType
	// Binding is the required value set's URL, as the definition writes it.
	Binding string
	// JSON maps each JSON property name of the element to its type's Code
	// (one entry, or one per choice: valueQuantity, valueString, ...).
	JSON map[string]string
}

// ElementType is one of an Element's types.
type ElementType struct {
	Code    string
	Profile string
}

var kindNames = map[typeKind]string{
	kindPrimitive: "primitive-type",
	kindComplex:   "complex-type",
	kindResource:  "resource",
	kindBackbone:  "backbone",
}

// Describe returns the type called name (a resource, datatype, primitive
// or backbone path); false when the table has none.
func Describe(name string) (Type, bool) {
	t := tables().types[name]
	if t == nil {
		return Type{}, false
	}
	out := Type{Name: t.name, Kind: kindNames[t.kind], Elements: make([]Element, 0, len(t.elements))}
	if t.kind == kindPrimitive {
		out.JSON = [...]string{jsonString: "string", jsonBoolean: "boolean", jsonNumber: "number"}[t.json]
	}
	for _, el := range t.elements {
		e := Element{Name: el.name, Min: el.min, Max: el.max, Array: el.array, Choice: el.choice, Binding: el.bindingURL, JSON: map[string]string{}}
		for _, tok := range el.types {
			code, profile, _ := strings.Cut(tok, ":")
			if profile == "" {
				code = tok
			}
			e.Types = append(e.Types, ElementType{Code: code, Profile: profile})
			key := el.name
			if el.choice {
				key = strings.TrimSuffix(el.name, "[x]") + upperFirst(code)
			}
			schemaType := profile
			if schemaType == "" {
				schemaType = code
			}
			e.JSON[key] = schemaType
		}
		out.Elements = append(out.Elements, e)
	}
	return out, true
}

// TypeNames lists every type of the table, sorted: primitives, datatypes,
// resources and backbone elements.
func TypeNames() []string {
	s := tables()
	out := make([]string, 0, len(s.types))
	for n := range s.types {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
