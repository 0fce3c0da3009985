package terminology

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// parentProperty is the property a CodeSystem declares when its concepts'
// nesting means "is a child of" (FHIR's concept-properties).
const parentProperty = "http://hl7.org/fhir/concept-properties#parent"

// CodeSystem is a code system as CodeSystem/$lookup reads it: one of the
// table's, or a CodeSystem resource a project stored.
type CodeSystem struct {
	URL string
	// Name is what $lookup answers as name: the title, else the name, else
	// the url, as in Medplum.
	Name     string
	concepts map[string]concept
}

type concept struct {
	display    string
	properties []Parameter // each a "property" parameter with its parts
}

// systems indexes the table's codes by system, for lookups: a code's
// display is the first the value sets give it.
var systems = sync.OnceValue(func() map[string]*CodeSystem {
	out := map[string]*CodeSystem{}
	for _, vs := range load() {
		for _, c := range vs.Codes {
			cs := out[c.System]
			if cs == nil {
				cs = &CodeSystem{URL: c.System, Name: c.System, concepts: map[string]concept{}}
				out[c.System] = cs
			}
			if _, ok := cs.concepts[c.Code]; !ok {
				cs.concepts[c.Code] = concept{display: c.Display}
			}
		}
	}
	return out
})

// BuiltinCodeSystem is the code system url of the table (a |version
// suffix ignored), with the codes its value sets draw from it; nil when
// no value set draws on it. The table keeps neither the code systems'
// titles nor their properties, so its systems are named by their url and
// their codes have none.
func BuiltinCodeSystem(url string) *CodeSystem {
	return systems()[unversioned(url)]
}

// codeSystemJSON is the part of a CodeSystem resource a lookup reads.
type codeSystemJSON struct {
	URL      string `json:"url"`
	Name     string `json:"name"`
	Title    string `json:"title"`
	Property []struct {
		Code        string `json:"code"`
		URI         string `json:"uri"`
		Description string `json:"description"`
	} `json:"property"`
	Concept []conceptJSON `json:"concept"`
}

type conceptJSON struct {
	Code     string `json:"code"`
	Display  string `json:"display"`
	Property []struct {
		Code string `json:"code"`
		Value
	} `json:"property"`
	Concept []conceptJSON `json:"concept"`
}

// StoredCodeSystem reads a CodeSystem resource a project stored: its
// concepts at every depth, each with its properties, and, when the
// resource declares the parent property, its parent's code for a nested
// concept.
func StoredCodeSystem(resource []byte) (*CodeSystem, error) {
	var r codeSystemJSON
	if err := json.Unmarshal(resource, &r); err != nil {
		return nil, fmt.Errorf("code system: %w", err)
	}
	cs := &CodeSystem{URL: r.URL, Name: r.URL, concepts: map[string]concept{}}
	if r.Name != "" {
		cs.Name = r.Name
	}
	if r.Title != "" {
		cs.Name = r.Title
	}
	described := map[string]string{}
	parent := ""
	for _, p := range r.Property {
		described[p.Code] = p.Description
		if p.URI == parentProperty {
			parent = p.Code
		}
	}
	var walk func(list []conceptJSON, up *conceptJSON)
	walk = func(list []conceptJSON, up *conceptJSON) {
		for i := range list {
			c := &list[i]
			if _, seen := cs.concepts[c.Code]; c.Code == "" || seen {
				continue
			}
			out := concept{display: c.Display}
			if up != nil && parent != "" {
				out.properties = append(out.properties, property(parent, Value{ValueCode: up.Code}, up.Display))
			}
			for _, p := range c.Property {
				if p.Value != (Value{}) {
					out.properties = append(out.properties, property(p.Code, p.Value, described[p.Code]))
				}
			}
			cs.concepts[c.Code] = out
			walk(c.Concept, c)
		}
	}
	walk(r.Concept, nil)
	return cs, nil
}

func property(code string, v Value, description string) Parameter {
	p := Parameter{Name: "property", Part: []Parameter{{Name: "code", Value: Value{ValueCode: code}}, {Name: "value", Value: v}}}
	if description != "" {
		p.Part = append(p.Part, Parameter{Name: "description", Value: Value{ValueString: description}})
	}
	return p
}

// Lookup is CodeSystem/$lookup's answer for code: the system's name, the
// code's display and its properties; 404 when the system has no such
// code, as Medplum answers.
func (cs *CodeSystem) Lookup(code string) (*Parameters, error) {
	c, ok := cs.concepts[code]
	if !ok {
		return nil, fhir.NotFound()
	}
	out := &Parameters{ResourceType: "Parameters", Parameter: []Parameter{
		{Name: "name", Value: Value{ValueString: cs.Name}},
		{Name: "display", Value: Value{ValueString: c.display}},
	}}
	out.Parameter = append(out.Parameter, c.properties...)
	return out, nil
}
