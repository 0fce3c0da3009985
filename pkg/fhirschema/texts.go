package fhirschema

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// textsText is the generated texts table (see internal/gen).
//
//go:embed texts.txt
var textsText string

// typeTexts holds the parsed texts table. Only answers shaped like a
// StructureDefinition read it, so it is parsed on their first use, never
// by validation or at start-up.
type typeTexts struct {
	descriptions map[string]string   // by type name
	definitions  map[string]string   // by path: "Patient", "Patient.contact.name"
	targets      map[string][]string // by path + "/" + type code
}

var texts = sync.OnceValue(func() *typeTexts {
	x, err := parseTexts(textsText)
	if err != nil {
		// Generated and tested, like schema.txt: a build defect.
		panic("fhirschema: embedded texts.txt: " + err.Error())
	}
	return x
})

// Description is the StructureDefinition's description of the type name;
// "" for a backbone element or an unknown type.
func Description(name string) string { return texts().descriptions[name] }

// Definition is the definition text of path: a type's own ("Patient"), or
// one of its elements' as the table names it, a backbone element's by its
// backbone ("Patient.contact.name"); "" when there is none.
func Definition(path string) string { return texts().definitions[path] }

// TargetProfiles lists the StructureDefinition URLs that the element at
// path allows for its type code (a Reference's or canonical's targets),
// in the definition's order; nil when it names none. The slice is
// shared: callers must not modify it.
func TargetProfiles(path, code string) []string { return texts().targets[path+"/"+code] }

func parseTexts(text string) (*typeTexts, error) {
	x := &typeTexts{descriptions: map[string]string{}, definitions: map[string]string{}, targets: map[string][]string{}}
	cur := ""
	for n, ln := range strings.Split(text, "\n") {
		if ln == "" || ln[0] == '#' {
			continue
		}
		fail := func(msg string) error { return fmt.Errorf("line %d: %s: %q", n+1, msg, ln) }
		if rest, ok := strings.CutPrefix(ln, "type "); ok {
			name, desc, _ := strings.Cut(rest, " ")
			cur = name
			if desc != "" {
				d, err := unquoteText(desc)
				if err != nil {
					return nil, fail(err.Error())
				}
				x.descriptions[name] = d
			}
			continue
		}
		rest, ok := strings.CutPrefix(ln, "\t")
		if !ok || cur == "" {
			return nil, fail("not a type or an element line")
		}
		key, value, ok := strings.Cut(rest, " ")
		if !ok {
			return nil, fail("no text")
		}
		if el, code, ok := strings.Cut(key, "/"); ok {
			x.targets[cur+"."+el+"/"+code] = strings.Fields(value)
			continue
		}
		path := cur
		if key != "." {
			path += "." + key
		}
		if ref, ok := strings.CutPrefix(value, "="); ok {
			d, ok := x.definitions[ref]
			if !ok {
				return nil, fail("reference to a path not above")
			}
			x.definitions[path] = d
			continue
		}
		d, err := unquoteText(value)
		if err != nil {
			return nil, fail(err.Error())
		}
		x.definitions[path] = d
	}
	return x, nil
}

// unquoteText reads a text as the generator writes it: as is, or
// Go-quoted.
func unquoteText(s string) (string, error) {
	if strings.HasPrefix(s, `"`) {
		return strconv.Unquote(s)
	}
	return s, nil
}
