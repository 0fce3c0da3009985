package fhirschema

import (
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
)

// schemaText is the generated table (see doc.go and internal/gen).
//
//go:embed schema.txt
var schemaText string

// maxElements bounds the elements of one type, so that a fixed-size bit set
// on the stack can record which ones an object holds. The largest R4 type
// has 54; a test keeps the table under the bound.
const maxElements = 256

type typeKind uint8

const (
	kindPrimitive typeKind = iota
	kindComplex
	kindResource
	kindBackbone
)

type jsonKind uint8

const (
	jsonString jsonKind = iota
	jsonBoolean
	jsonNumber
)

// numberKind distinguishes the JSON-number primitives, whose limits come
// from the FHIR datatypes page rather than from the StructureDefinitions.
type numberKind uint8

const (
	numDecimal numberKind = iota
	numInteger
	numPositiveInt
	numUnsignedInt
)

// typeDef is one type of the table: a primitive, a complex datatype, a
// resource or a backbone element.
type typeDef struct {
	name     string
	kind     typeKind
	elements []*element
	// props maps each JSON property name to its element, with choice
	// elements expanded (valueQuantity, valueString, ...).
	props    map[string]*prop
	required []*element

	// Primitives only.
	json   jsonKind
	number numberKind
	format *format
}

// element is one element of a type, as the StructureDefinition declares it.
type element struct {
	name       string // as declared: "given", "value[x]"
	index      int    // position in the type, for ordering and the seen-set
	min        int
	max        int // -1 when unbounded
	array      bool
	choice     bool
	binding    *valueSet
	bindingURL string   // as the StructureDefinition writes it (with |version)
	types      []string // as the table writes them ("Quantity:SimpleQuantity"), for Describe
}

// prop is one JSON property name of a type: its element and the type of
// its value. typ is nil for an element of type Resource (any resource,
// typed by its own resourceType).
type prop struct {
	el  *element
	typ *typeDef
}

// valueSet is the enumerated expansion of a required binding.
type valueSet struct {
	codes map[string]bool // any system
	pairs map[string]bool // system + "|" + code
}

// schema is the parsed table.
type schema struct {
	types     map[string]*typeDef
	resources map[string]*typeDef
	names     []string // resource type names, sorted

	// Extension and the indexes of its extension and value[x] elements,
	// for invariant ext-1.
	extension    *typeDef
	extExtension int
	extValue     int
}

var (
	loadOnce sync.Once
	loaded   *schema
)

// tables parses the embedded table once. The table is generated and tested,
// so a parse failure is a build defect: it panics rather than turning every
// write into a 500.
func tables() *schema {
	loadOnce.Do(func() {
		s, err := parse(schemaText)
		if err != nil {
			panic("fhirschema: embedded schema.txt: " + err.Error())
		}
		loaded = s
	})
	return loaded
}

// pendingElement holds an element line until every type is known.
type pendingElement struct {
	owner *typeDef
	el    *element
	types []string
}

func parse(text string) (*schema, error) {
	s := &schema{types: map[string]*typeDef{}, resources: map[string]*typeDef{}}
	valueSets := map[string]*valueSet{}
	var (
		pending []pendingElement
		cur     *typeDef
		curVS   *valueSet
		lineNo  int
	)
	for text != "" {
		var line string
		line, text, _ = strings.Cut(text, "\n")
		lineNo++
		if line == "" || line[0] == '#' {
			continue
		}
		fail := func(format string, args ...any) error {
			return fmt.Errorf("line %d: %s", lineNo, fmt.Sprintf(format, args...))
		}
		if line[0] == '\t' {
			switch {
			case curVS != nil:
				if err := addCodes(curVS, line[1:]); err != nil {
					return nil, fail("%v", err)
				}
			case cur != nil:
				pe, err := parseElement(cur, strings.Fields(line))
				if err != nil {
					return nil, fail("%v", err)
				}
				pending = append(pending, pe)
			default:
				return nil, fail("element outside a type")
			}
			continue
		}
		cur, curVS = nil, nil
		head, rest, _ := strings.Cut(line, " ")
		switch head {
		case "primitive":
			parts := strings.SplitN(rest, " ", 3)
			if len(parts) < 2 {
				return nil, fail("short primitive line")
			}
			cur = &typeDef{name: parts[0], kind: kindPrimitive}
			switch parts[1] {
			case "string":
				cur.json = jsonString
			case "boolean":
				cur.json = jsonBoolean
			case "number":
				cur.json = jsonNumber
				cur.number = numberKinds[cur.name]
			default:
				return nil, fail("unknown JSON kind %q", parts[1])
			}
			if len(parts) == 3 && cur.json != jsonBoolean {
				cur.format = newFormat(parts[2])
			}
		case "complex", "resource", "backbone":
			cur = &typeDef{name: rest, kind: map[string]typeKind{
				"complex": kindComplex, "resource": kindResource, "backbone": kindBackbone,
			}[head]}
		case "valueset":
			curVS = &valueSet{codes: map[string]bool{}, pairs: map[string]bool{}}
			valueSets[rest] = curVS
			continue
		default:
			return nil, fail("unknown line %q", head)
		}
		if s.types[cur.name] != nil {
			return nil, fail("type %s defined twice", cur.name)
		}
		s.types[cur.name] = cur
		if cur.kind == kindResource {
			s.resources[cur.name] = cur
			s.names = append(s.names, cur.name)
		}
	}
	for _, pe := range pending {
		if err := s.link(pe, valueSets); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", pe.owner.name, pe.el.name, err)
		}
	}
	for _, t := range s.types {
		if len(t.elements) > maxElements {
			return nil, fmt.Errorf("%s has %d elements, more than %d", t.name, len(t.elements), maxElements)
		}
	}
	slices.Sort(s.names)
	s.extension = s.types["Extension"]
	if s.extension == nil || s.extension.props["extension"] == nil || s.extension.props["valueString"] == nil {
		return nil, fmt.Errorf("no Extension type with extension and value[x]")
	}
	s.extExtension = s.extension.props["extension"].el.index
	s.extValue = s.extension.props["valueString"].el.index
	return s, nil
}

var numberKinds = map[string]numberKind{
	"integer":     numInteger,
	"positiveInt": numPositiveInt,
	"unsignedInt": numUnsignedInt,
}

// parseElement reads "<name> <min>..<max> <types> [array] [binding=<url>]".
func parseElement(owner *typeDef, fields []string) (pendingElement, error) {
	if len(fields) < 3 {
		return pendingElement{}, fmt.Errorf("short element line")
	}
	el := &element{name: fields[0], index: len(owner.elements)}
	lo, hi, ok := strings.Cut(fields[1], "..")
	if !ok {
		return pendingElement{}, fmt.Errorf("bad cardinality %q", fields[1])
	}
	var err error
	if el.min, err = strconv.Atoi(lo); err != nil {
		return pendingElement{}, fmt.Errorf("bad cardinality %q", fields[1])
	}
	if hi == "*" {
		el.max, el.array = -1, true
	} else if el.max, err = strconv.Atoi(hi); err != nil {
		return pendingElement{}, fmt.Errorf("bad cardinality %q", fields[1])
	}
	el.array = el.array || el.max > 1
	el.choice = strings.HasSuffix(el.name, "[x]")
	for _, f := range fields[3:] {
		switch {
		case f == "array":
			el.array = true
		case strings.HasPrefix(f, "binding="):
			el.bindingURL = strings.TrimPrefix(f, "binding=")
		default:
			return pendingElement{}, fmt.Errorf("unknown flag %q", f)
		}
	}
	owner.elements = append(owner.elements, el)
	if el.min > 0 {
		owner.required = append(owner.required, el)
	}
	el.types = strings.Split(fields[2], ",")
	return pendingElement{owner: owner, el: el, types: el.types}, nil
}

// link resolves an element's types and binding and registers its JSON
// property names on its owner.
func (s *schema) link(pe pendingElement, valueSets map[string]*valueSet) error {
	t, el := pe.owner, pe.el
	if t.props == nil {
		t.props = map[string]*prop{}
	}
	if el.bindingURL != "" {
		url, _, _ := strings.Cut(el.bindingURL, "|")
		if el.binding = valueSets[url]; el.binding == nil {
			return fmt.Errorf("value set %s not in the table", url)
		}
	}
	for _, tok := range pe.types {
		jsonType, schemaType, ok := strings.Cut(tok, ":")
		if !ok {
			schemaType = tok
		}
		p := &prop{el: el}
		if schemaType != "Resource" {
			if p.typ = s.types[schemaType]; p.typ == nil {
				return fmt.Errorf("unknown type %s", schemaType)
			}
		}
		key := el.name
		if el.choice {
			key = strings.TrimSuffix(el.name, "[x]") + upperFirst(jsonType)
		}
		if t.props[key] != nil {
			return fmt.Errorf("property %s declared twice", key)
		}
		t.props[key] = p
	}
	return nil
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return string(unicode.ToUpper(rune(s[0]))) + s[1:]
}

// addCodes reads "<system> <code>..." of a value set; a code holding a
// space is written Go-quoted.
func addCodes(vs *valueSet, line string) error {
	toks, err := tokens(line)
	if err != nil {
		return err
	}
	if len(toks) < 2 {
		return fmt.Errorf("value set line without codes")
	}
	system := toks[0]
	for _, c := range toks[1:] {
		vs.codes[c] = true
		vs.pairs[system+"|"+c] = true
	}
	return nil
}

// tokens splits on spaces, reading a token that starts with a quote as a Go
// string literal.
func tokens(line string) ([]string, error) {
	var out []string
	for line = strings.TrimLeft(line, " "); line != ""; line = strings.TrimLeft(line, " ") {
		if line[0] == '"' {
			q, err := strconv.QuotedPrefix(line)
			if err != nil {
				return nil, err
			}
			u, _ := strconv.Unquote(q)
			out = append(out, u)
			line = line[len(q):]
			continue
		}
		tok, rest, _ := strings.Cut(line, " ")
		out = append(out, tok)
		line = rest
	}
	return out, nil
}
