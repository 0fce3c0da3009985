package fhirdefs

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Concept is a code of a CodeSystem or of a compose rule's concept list.
type Concept struct {
	Code    string    `json:"code"`
	Display string    `json:"display"`
	Concept []Concept `json:"concept"`
}

// CodeSystem is the part of a CodeSystem an expansion reads.
type CodeSystem struct {
	URL     string    `json:"url"`
	Content string    `json:"content"`
	Concept []Concept `json:"concept"`
}

// Filter is a compose rule's filter.
type Filter struct {
	Property string `json:"property"`
	Op       string `json:"op"`
	Value    string `json:"value"`
}

// Rule is one compose.include or compose.exclude of a ValueSet.
type Rule struct {
	System   string    `json:"system"`
	Concept  []Concept `json:"concept"`
	Filter   []Filter  `json:"filter"`
	ValueSet []string  `json:"valueSet"`
}

// ValueSet is the part of a ValueSet the generators read.
type ValueSet struct {
	URL     string `json:"url"`
	Version string `json:"version"`
	Name    string `json:"name"`
	Title   string `json:"title"`
	Status  string `json:"status"`
	Compose *struct {
		Include []Rule `json:"include"`
		Exclude []Rule `json:"exclude"`
	} `json:"compose"`
}

// Coding is one code of an expansion.
type Coding struct{ System, Code, Display string }

// grammarSystems have codes made by a grammar: a listed "complete" concept
// list is only a sample (Medplum ships one for UCUM), so a whole-system
// include of one is not expanded.
var grammarSystems = map[string]bool{
	"http://unitsofmeasure.org": true,
	"urn:ietf:bcp:47":           true,
	"urn:ietf:bcp:13":           true,
}

// maxDepth bounds value sets including value sets.
const maxDepth = 8

// Terminology holds the CodeSystems and ValueSets of the bundles given to
// Add and expands the value sets from them.
type Terminology struct {
	// HierarchyFilters expands is-a and descendent-of filters on the
	// concept property; without it any filter makes a value set
	// unexpandable.
	HierarchyFilters bool
	// Widen lists, per code system, another whose codes a whole-system
	// include of it also takes, where it is there.
	Widen map[string]string

	systems   map[string]*CodeSystem
	valueSets map[string]*ValueSet
}

// NewTerminology is an empty Terminology.
func NewTerminology() *Terminology {
	return &Terminology{systems: map[string]*CodeSystem{}, valueSets: map[string]*ValueSet{}}
}

// Add keeps a CodeSystem or ValueSet (a ReadBundle callback); the first
// one read for a URL wins.
func (t *Terminology) Add(kind string, raw json.RawMessage) error {
	switch kind {
	case "CodeSystem":
		cs := new(CodeSystem)
		if err := json.Unmarshal(raw, cs); err != nil {
			return err
		}
		if t.systems[cs.URL] == nil {
			t.systems[cs.URL] = cs
		}
	case "ValueSet":
		vs := new(ValueSet)
		if err := json.Unmarshal(raw, vs); err != nil {
			return err
		}
		if t.valueSets[vs.URL] == nil {
			t.valueSets[vs.URL] = vs
		}
	}
	return nil
}

// ValueSet is the value set with the (unversioned) url, or nil.
func (t *Terminology) ValueSet(url string) *ValueSet { return t.valueSets[url] }

// Expand enumerates a value set: its includes (concept lists, whole code
// systems, other value sets, hierarchy filters where enabled), less its
// concept-list excludes, without repeats, in definition order. The error
// says why a value set cannot be expanded from the definitions.
func (t *Terminology) Expand(url string) ([]Coding, error) { return t.expand(url, 0) }

func (t *Terminology) expand(url string, depth int) ([]Coding, error) {
	vs := t.valueSets[url]
	switch {
	case depth > maxDepth:
		return nil, errors.New("value sets nested too deep")
	case vs == nil:
		return nil, fmt.Errorf("includes value set %s, not in the definitions", url)
	case vs.Compose == nil || len(vs.Compose.Include) == 0:
		return nil, errors.New("no compose.include")
	}
	var out []Coding
	seen := map[[2]string]bool{}
	for _, inc := range vs.Compose.Include {
		cs, err := t.rule(inc, depth)
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			k := [2]string{c.System, c.Code}
			if !seen[k] {
				seen[k] = true
				out = append(out, c)
			}
		}
	}
	for _, exc := range vs.Compose.Exclude {
		if len(exc.Filter) > 0 || len(exc.ValueSet) > 0 || len(exc.Concept) == 0 {
			return nil, errors.New("excludes by filter or value set")
		}
		drop := map[string]bool{}
		for _, c := range exc.Concept {
			drop[c.Code] = true
		}
		out = slices.DeleteFunc(out, func(c Coding) bool { return c.System == exc.System && drop[c.Code] })
	}
	return out, nil
}

func (t *Terminology) rule(inc Rule, depth int) ([]Coding, error) {
	if inc.System == "" && len(inc.ValueSet) == 0 {
		return nil, errors.New("includes neither a system nor a value set")
	}
	if len(inc.Filter) > 0 && !t.HierarchyFilters {
		return nil, fmt.Errorf("filters code system %s", inc.System)
	}
	var out []Coding
	hasSystem := inc.System != ""
	if hasSystem {
		cs := t.systems[inc.System]
		switch {
		case len(inc.Concept) > 0:
			for _, c := range inc.Concept {
				d := c.Display
				if d == "" && cs != nil {
					d = find(cs.Concept, c.Code).Display
				}
				out = append(out, Coding{inc.System, c.Code, d})
			}
		case cs == nil || len(cs.Concept) == 0:
			return nil, fmt.Errorf("draws on code system %s, not in the definitions", inc.System)
		case cs.Content != "complete" || grammarSystems[inc.System]:
			return nil, fmt.Errorf("draws on all of code system %s, whose definition lists only some codes", inc.System)
		default:
			roots := cs.Concept
			for _, f := range inc.Filter {
				if f.Property != "concept" || (f.Op != "is-a" && f.Op != "descendent-of") {
					return nil, fmt.Errorf("filters code system %s by %s %s", inc.System, f.Property, f.Op)
				}
				c := find(roots, f.Value)
				if c.Code == "" {
					return nil, fmt.Errorf("filters code system %s on %s, not in it", inc.System, f.Value)
				}
				if f.Op == "is-a" {
					roots = []Concept{c}
				} else {
					roots = c.Concept
				}
			}
			walk(inc.System, roots, &out)
			if w := t.systems[t.Widen[inc.System]]; w != nil && len(inc.Filter) == 0 &&
				w.Content == "complete" && !grammarSystems[w.URL] {
				walk(w.URL, w.Concept, &out)
			}
		}
	}
	for _, ref := range inc.ValueSet {
		sub, err := t.expand(Unversioned(ref), depth+1)
		if err != nil {
			return nil, err
		}
		if !hasSystem && out == nil {
			out, hasSystem = sub, true
			continue
		}
		// Several parts of one include intersect.
		in := map[[2]string]bool{}
		for _, c := range sub {
			in[[2]string{c.System, c.Code}] = true
		}
		out = slices.DeleteFunc(out, func(c Coding) bool { return !in[[2]string{c.System, c.Code}] })
	}
	return out, nil
}

// find is the concept with code anywhere in the hierarchy, or a zero one.
func find(cs []Concept, code string) Concept {
	for _, c := range cs {
		if c.Code == code {
			return c
		}
		if f := find(c.Concept, code); f.Code != "" {
			return f
		}
	}
	return Concept{}
}

func walk(system string, cs []Concept, out *[]Coding) {
	for _, c := range cs {
		*out = append(*out, Coding{system, c.Code, c.Display})
		walk(system, c.Concept, out)
	}
}
