package search

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/pinion-health/pinion/pkg/store"
)

// params.txt is generated (see generate.go). One line per parameter and
// group of base types, tab-separated:
//
//	code  type  bases  targets  url  program
//
// bases and targets are comma lists; targets "*" means any resource type; a
// url starting "hl7:" or "medplum:" abbreviates the SearchParameter base
// URL. A program is a '|'-separated union of paths; a path is a
// '.'-separated list of steps:
//
//	key:Type,key2:Type2   read these JSON keys (several for choice elements);
//	                      Type is the FHIR type of the values, or absent
//	?key=value            keep objects whose key equals value (percent-encoded)
//	@is=Type              keep References to resources of Type
//	@type                 the resource type a Reference names
//	!exists               true when anything was selected, else false
//	!truthy               like !exists, but false for a boolean false
//
//go:embed params.txt
var table string

// Param is one search parameter.
type Param struct {
	Code string // as written in a query, e.g. "profile-type"
	Type string // string, token, reference, date, number, quantity, uri or special
	// Targets lists the resource types a reference parameter may point to;
	// empty means any.
	Targets []string
	// Definition is the canonical URL of the SearchParameter; empty for the
	// parameters this package implements itself (_id, _lastUpdated, _project).
	Definition string

	field           string // stored field, "s_" + code with '-' as '_'
	f               suffixed
	paths           []path
	caseInsensitive bool // token values lower-cased, as Medplum does for ContactPoint
	boolean         bool // token whose values are all booleans
	// scalar: a token whose values are all primitives (a code, a boolean),
	// which never have a system, so that "|code" means "code": only the
	// code is stored, one row fewer per value on every write.
	scalar bool
}

type opcode uint8

const (
	opField   opcode = iota // read keys
	opWhere                 // keep objects whose arg equals val
	opWhereIs               // keep References to type arg
	opRefType               // the type a Reference names
	opExists                // true when anything was selected
	opTruthy                // exists, and not boolean false
)

type step struct {
	op       opcode
	keys     []string // opField
	types    []string // opField: FHIR type of each key's values, "" unknown
	arg, val string
}

type path []step

type registry struct {
	byType map[string]map[string]*Param // resource type → code → parameter
	common map[string]*Param            // parameters of every resource (base Resource)
	lists  map[string][]*Param          // resource type → its parameters, by code
	grams  map[string]map[string]string // resource type → code → trigram field answering its :contains
}

// builtins are implemented on the document's own fields, not on s_ fields.
var builtins = []Param{
	{Code: "_id", Type: "token"},
	{Code: "_lastUpdated", Type: "date"},
	{Code: "_project", Type: "special"},
}

var loadRegistry = sync.OnceValue(func() *registry {
	r, err := parseTable(table)
	if err != nil {
		panic("search: embedded parameter table: " + err.Error())
	}
	return r
})

func parseTable(text string) (*registry, error) {
	r := &registry{byType: map[string]map[string]*Param{}, common: map[string]*Param{}, lists: map[string][]*Param{}}
	for n, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		p, bases, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		for _, b := range bases {
			if b == "Resource" || b == "DomainResource" {
				r.common[p.Code] = p
				continue
			}
			m := r.byType[b]
			if m == nil {
				m = map[string]*Param{}
				r.byType[b] = m
			}
			m[p.Code] = p
		}
	}
	for t := range r.byType {
		r.lists[t] = r.collect(t)
	}
	r.linkGrams()
	return r, nil
}

func (r *registry) collect(resourceType string) []*Param {
	var out []*Param
	for code, p := range r.common {
		if _, ok := r.byType[resourceType][code]; !ok {
			out = append(out, p)
		}
	}
	for _, p := range r.byType[resourceType] {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Param) int { return strings.Compare(a.Code, b.Code) })
	return out
}

// list returns the compiled parameters of a resource type, sorted by code.
func (r *registry) list(resourceType string) []*Param {
	if l, ok := r.lists[resourceType]; ok {
		return l
	}
	return r.collect(resourceType)
}

func (r *registry) lookup(resourceType, code string) *Param {
	if p, ok := r.byType[resourceType][code]; ok {
		return p
	}
	return r.common[code]
}

var urlPrefixes = map[string]string{
	"hl7:":     "http://hl7.org/fhir/SearchParameter/",
	"medplum:": "https://medplum.com/fhir/SearchParameter/",
}

func parseLine(line string) (*Param, []string, error) {
	f := strings.Split(line, "\t")
	if len(f) != 6 {
		return nil, nil, fmt.Errorf("want 6 fields, have %d", len(f))
	}
	p := &Param{Code: f[0], Type: f[1], Definition: f[4]}
	p.field = fieldName(p.Code)
	p.f = suffixed{exact: p.field + store.ExactSuffix, text: p.field + "_text", sort: p.field + "_sort",
		lo: p.field + "_lo", hi: p.field + "_hi", unit: p.field + "_unit", grams: p.field + "_grams"}
	if f[3] != "" && f[3] != "*" {
		p.Targets = strings.Split(f[3], ",")
	}
	for short, long := range urlPrefixes {
		if strings.HasPrefix(p.Definition, short) {
			p.Definition = long + strings.TrimPrefix(p.Definition, short)
		}
	}
	boolean, scalar := true, true
	for _, ps := range strings.Split(f[5], "|") {
		var pa path
		for _, s := range strings.Split(ps, ".") {
			st, err := parseStep(s)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", p.Code, err)
			}
			pa = append(pa, st)
		}
		if len(pa) == 0 {
			return nil, nil, fmt.Errorf("%s: empty path", p.Code)
		}
		last := pa[len(pa)-1]
		scalar = scalar && primitive(last)
		switch last.op {
		case opExists, opTruthy:
		case opRefType:
			boolean = false
		default:
			for i := len(pa) - 1; i >= 0; i-- {
				if pa[i].op == opField {
					for _, t := range pa[i].types {
						if t != "boolean" {
							boolean = false
						}
						if t == "ContactPoint" {
							p.caseInsensitive = true
						}
					}
					break
				}
			}
		}
		p.paths = append(p.paths, pa)
	}
	p.boolean = boolean && p.Type == "token"
	p.scalar = scalar && p.Type == "token"
	return p, strings.Split(f[2], ","), nil
}

// primitive reports whether a path ending in st selects primitive values
// only: a computed boolean, a type name, or keys all of a FHIR primitive
// type (their names start in lower case; "" is a type not known).
func primitive(st step) bool {
	switch st.op {
	case opExists, opTruthy, opRefType:
		return true
	case opField:
		for _, t := range st.types {
			if t == "" || t[0] < 'a' || t[0] > 'z' {
				return false
			}
		}
		return len(st.types) > 0
	}
	return false
}

func parseStep(s string) (step, error) {
	switch {
	case s == "":
		return step{}, fmt.Errorf("empty step")
	case s == "@type":
		return step{op: opRefType}, nil
	case s == "!exists":
		return step{op: opExists}, nil
	case s == "!truthy":
		return step{op: opTruthy}, nil
	case strings.HasPrefix(s, "@is="):
		return step{op: opWhereIs, arg: unescape(s[4:])}, nil
	case s[0] == '?':
		k, v, ok := strings.Cut(s[1:], "=")
		if !ok {
			return step{}, fmt.Errorf("bad filter %q", s)
		}
		return step{op: opWhere, arg: unescape(k), val: unescape(v)}, nil
	}
	st := step{op: opField}
	for _, a := range strings.Split(s, ",") {
		k, t, _ := strings.Cut(a, ":")
		if k == "" {
			return step{}, fmt.Errorf("bad step %q", s)
		}
		st.keys = append(st.keys, k)
		st.types = append(st.types, t)
	}
	return st, nil
}

func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if c, ok := unhex(s[i+1], s[i+2]); ok {
				b.WriteByte(c)
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unhex(a, b byte) (byte, bool) {
	v := func(c byte) (byte, bool) {
		switch {
		case '0' <= c && c <= '9':
			return c - '0', true
		case 'A' <= c && c <= 'F':
			return c - 'A' + 10, true
		case 'a' <= c && c <= 'f':
			return c - 'a' + 10, true
		}
		return 0, false
	}
	x, ok1 := v(a)
	y, ok2 := v(b)
	return x<<4 | y, ok1 && ok2
}

// suffixed holds a parameter's other stored fields, named once rather than
// concatenated on every write.
type suffixed struct {
	exact, text, sort, lo, hi, unit, grams string
}

// fieldName is the stored field of a parameter code.
func fieldName(code string) string {
	return "s_" + strings.ReplaceAll(code, "-", "_")
}

// Params lists the parameters usable on a resource type (for the CapabilityStatement), sorted by code.
func Params(resourceType string) []Param {
	r := loadRegistry()
	list := r.list(resourceType)
	out := make([]Param, 0, len(list)+len(builtins))
	out = append(out, builtins...)
	for _, p := range list {
		c := *p
		c.Targets = slices.Clone(p.Targets)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Param) int { return strings.Compare(a.Code, b.Code) })
	return out
}

// IndexKeys lists the s_ fields worth a MongoDB index for a resource type: those of its token, reference and string parameters, sorted.
func IndexKeys(resourceType string) []string {
	var out []string
	for _, p := range loadRegistry().list(resourceType) {
		switch p.Type {
		case "token", "reference", "string":
			out = append(out, p.field)
		}
		if gramsOwner(p) {
			out = append(out, p.f.grams)
		}
	}
	slices.Sort(out)
	return out
}
