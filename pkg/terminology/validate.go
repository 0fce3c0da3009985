package terminology

import (
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// Parameters is the FHIR Parameters resource $validate-code and $lookup
// answer with.
type Parameters struct {
	ResourceType string      `json:"resourceType"`
	Parameter    []Parameter `json:"parameter"`
}

// Parameter is one output parameter: a value, or parts.
type Parameter struct {
	Name string `json:"name"`
	Value
	Part []Parameter `json:"part,omitempty"`
}

// Value is a parameter's value[x], of the kinds a code system's concept
// properties take (a Coding property is not read).
type Value struct {
	ValueBoolean  *bool       `json:"valueBoolean,omitempty"`
	ValueString   string      `json:"valueString,omitempty"`
	ValueCode     string      `json:"valueCode,omitempty"`
	ValueInteger  *int64      `json:"valueInteger,omitempty"`
	ValueDecimal  json.Number `json:"valueDecimal,omitempty"`
	ValueDateTime string      `json:"valueDateTime,omitempty"`
}

// ValidateCode answers ValueSet/$validate-code with url, system, code and
// an optional display: result is whether the value set holds system|code
// (and, when display is given, whether it is the code's display), as in
// Medplum, with the code's display beside it.
func ValidateCode(q url.Values) (*Parameters, error) {
	one := func(name string) (string, error) {
		vs := q[name]
		if len(vs) > 1 {
			return "", fhir.BadRequest("Parameter "+name+" is given more than once", name)
		}
		if len(vs) == 1 && len(vs[0]) > MaxURLBytes {
			return "", fhir.BadRequest(fmt.Sprintf("Invalid %s: %d bytes, at most %d", name, len(vs[0]), MaxURLBytes), name)
		}
		return q.Get(name), nil
	}
	var p [4]string
	for i, name := range []string{"url", "system", "code", "display"} {
		v, err := one(name)
		if err != nil {
			return nil, err
		}
		p[i] = v
	}
	u, system, code, display := p[0], p[1], p[2], p[3]
	if u == "" {
		return nil, fhir.BadRequest("No ValueSet specified", "url")
	}
	if system == "" || code == "" {
		return nil, fhir.BadRequest("No coding specified")
	}
	vs := Find(u)
	switch {
	case vs == nil:
		return nil, fhir.BadRequest("ValueSet " + unversioned(u) + " not found")
	case vs.Unexpandable != "":
		return nil, fhir.BadRequest(fmt.Sprintf("ValueSet %s cannot be checked: it %s", vs.URL, vs.Unexpandable))
	}
	var found *Coding
	for i, c := range vs.Codes {
		if c.System == system && c.Code == code {
			found = &vs.Codes[i]
			break
		}
	}
	result := found != nil && (display == "" || found.Display == display)
	out := &Parameters{ResourceType: "Parameters", Parameter: []Parameter{{Name: "result", Value: Value{ValueBoolean: &result}}}}
	if found != nil && found.Display != "" {
		out.Parameter = append(out.Parameter, Parameter{Name: "display", Value: Value{ValueString: found.Display}})
	}
	return out, nil
}

func unversioned(u string) string {
	for i := 0; i < len(u); i++ {
		if u[i] == '|' {
			return u[:i]
		}
	}
	return u
}
