package graphql

import (
	"context"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhirschema"
	"github.com/pinion-health/pinion/pkg/search"
)

// StructureDefinitionList and SearchParameterList are answered from the
// tables Pinion validates and searches with (fhirschema, search):
// @medplum/core's requestSchema builds its forms and search controls from
// them, so they say exactly what the server accepts. Like Medplum's base
// definitions, they are readable by every caller. StructureDefinitionList
// adds the project's own StructureDefinitions (its profiles), read
// through the caller's policy.

const (
	defaultCount = 20
	maxCount     = 1000
)

// definitionFilter is what a definitions list was asked for: exact values
// of a few fields, from arguments or a "<field> eq <value> [and ...]"
// _filter (the form requestSchema sends).
type definitionFilter struct {
	eq            map[string]string
	count, offset int
}

func parseDefinitionFilter(args map[string]any, fields ...string) (definitionFilter, error) {
	f := definitionFilter{eq: map[string]string{}, count: defaultCount}
	for _, k := range fields {
		if v, ok := args[k].(string); ok {
			f.eq[k] = v
		}
	}
	if s, ok := args["_filter"].(string); ok && s != "" {
		for _, clause := range strings.Split(s, " and ") {
			parts := strings.Fields(clause)
			if len(parts) != 3 || parts[1] != "eq" || !slices.Contains(fields, parts[0]) {
				return f, fhir.BadRequest("Unsupported _filter on definitions: "+clause+" (supported: <"+strings.Join(fields, "|")+"> eq <value>, joined by and)", "_filter")
			}
			f.eq[parts[0]] = strings.Trim(parts[2], `"`)
		}
	}
	if n, ok := intArg(args["_count"]); ok {
		f.count = min(max(n, 0), maxCount)
	}
	if n, ok := intArg(args["_offset"]); ok {
		f.offset = max(n, 0)
	}
	return f, nil
}

func (f definitionFilter) page(list []map[string]any) []map[string]any {
	if f.offset >= len(list) {
		return []map[string]any{}
	}
	list = list[f.offset:]
	return list[:min(len(list), f.count)]
}

func intArg(v any) (int, bool) {
	switch n := v.(type) {
	case int64:
		return int(n), true
	case int:
		return n, true
	case float64:
		return int(n), true
	case string:
		i, err := strconv.Atoi(n)
		return i, err == nil
	}
	return 0, false
}

// structureDefinitions answers StructureDefinitionList: the resources,
// datatypes and primitives named by name, type or url, then the project's
// own StructureDefinitions (its profiles) that match, found as a search
// of them finds them, as Medplum lists both.
func (x *executor) structureDefinitions(ctx context.Context, args map[string]any) ([]map[string]any, error) {
	f, err := parseDefinitionFilter(args, "name", "type", "url")
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, name := range fhirschema.TypeNames() {
		if (f.eq["name"] != "" && f.eq["name"] != name) || (f.eq["type"] != "" && f.eq["type"] != name) ||
			(f.eq["url"] != "" && f.eq["url"] != definitionURL(name)) {
			continue
		}
		if sd := cachedDefinition(name); sd != nil {
			out = append(out, sd)
		}
	}
	if err := x.spend(ctx, 1); err != nil {
		return nil, err
	}
	q := url.Values{"_count": {strconv.Itoa(min(f.offset+f.count, maxCount))}}
	for k, v := range f.eq {
		if k == "name" {
			k = "name:exact" // name is a string parameter: a prefix match otherwise
		}
		q.Set(k, v)
	}
	own, err := x.st.Search(ctx, "StructureDefinition", q)
	if err != nil {
		return nil, err
	}
	return f.page(append(out, own...)), nil
}

// definitions caches each type's StructureDefinition: the tables never
// change while the process runs, and the answers are only read.
var definitions sync.Map

// cachedDefinition is the StructureDefinition of name; nil for a backbone
// element, which has none of its own.
func cachedDefinition(name string) map[string]any {
	if sd, ok := definitions.Load(name); ok {
		return sd.(map[string]any)
	}
	d, _ := fhirschema.Describe(name)
	var sd map[string]any
	if d.Kind != "backbone" {
		sd = structureDefinition(d)
	}
	definitions.Store(name, sd)
	return sd
}

func definitionURL(name string) string { return "http://hl7.org/fhir/StructureDefinition/" + name }

// structureDefinition answers d as Medplum's base definitions read, texts
// included: its app shows the description and each element's definition,
// and offers a reference's target types from type.targetProfile.
func structureDefinition(d fhirschema.Type) map[string]any {
	root := map[string]any{"id": d.Name, "path": d.Name, "min": 0, "max": "*",
		"base": map[string]any{"path": d.Name, "min": 0, "max": "*"}}
	setString(root, "definition", fhirschema.Definition(d.Name))
	elements := []any{root}
	elements = appendElements(elements, d, d.Name, 0)
	sd := map[string]any{
		"resourceType": "StructureDefinition",
		"id":           d.Name,
		"url":          definitionURL(d.Name),
		"name":         d.Name,
		"type":         d.Name,
		"kind":         d.Kind,
		"status":       "active",
		"abstract":     false,
		"snapshot":     map[string]any{"element": elements},
	}
	setString(sd, "description", fhirschema.Description(d.Name))
	return sd
}

// setString sets m[k] to a non-empty v: FHIR has no empty strings.
func setString(m map[string]any, k, v string) {
	if v != "" {
		m[k] = v
	}
}

// appendElements appends d's elements under path, and those of the
// backbone elements declared there. A backbone met again at another path
// (Questionnaire.item.item) is a contentReference, as in the definitions.
func appendElements(out []any, d fhirschema.Type, path string, depth int) []any {
	for _, el := range d.Elements {
		p := path + "." + el.Name
		maxS := "*"
		if el.Max >= 0 {
			maxS = strconv.Itoa(el.Max)
		}
		e := map[string]any{"id": p, "path": p, "min": el.Min, "max": maxS,
			"base": map[string]any{"path": p, "min": el.Min, "max": maxS}}
		// The texts are keyed by the table's name of the element (a
		// backbone's by its backbone's path): p, as a backbone is
		// expanded only at its own path.
		key := d.Name + "." + el.Name
		setString(e, "definition", fhirschema.Definition(key))
		var types []any
		var nested *fhirschema.Type
		for _, t := range el.Types {
			td, ok := fhirschema.Describe(t.Code)
			if ok && td.Kind == "backbone" {
				if t.Code != p || depth > 8 {
					e["contentReference"] = "#" + t.Code
					continue
				}
				nested = &td
				types = append(types, map[string]any{"code": "BackboneElement"})
				continue
			}
			ty := map[string]any{"code": t.Code}
			if t.Profile != "" {
				ty["profile"] = []any{definitionURL(t.Profile)}
			}
			if targets := fhirschema.TargetProfiles(key, t.Code); len(targets) > 0 {
				list := make([]any, len(targets))
				for i, u := range targets {
					list[i] = u
				}
				ty["targetProfile"] = list
			}
			types = append(types, ty)
		}
		if len(types) > 0 {
			e["type"] = types
		}
		if el.Binding != "" {
			e["binding"] = map[string]any{"strength": "required", "valueSet": el.Binding}
		}
		out = append(out, e)
		if nested != nil {
			out = appendElements(out, *nested, p, depth+1)
		}
	}
	return out
}

// searchParameters answers SearchParameterList: the parameters of base
// (every resource type when none is named) that Pinion's search serves.
func searchParameters(args map[string]any) ([]map[string]any, error) {
	f, err := parseDefinitionFilter(args, "base", "code", "name", "type")
	if err != nil {
		return nil, err
	}
	bases := fhirschema.ResourceTypes()
	if b := f.eq["base"]; b != "" {
		bases = []string{b}
	}
	var out []map[string]any
	for _, base := range bases {
		for _, p := range search.Params(base) {
			if (f.eq["code"] != "" && f.eq["code"] != p.Code) || (f.eq["name"] != "" && f.eq["name"] != p.Code) ||
				(f.eq["type"] != "" && f.eq["type"] != p.Type) {
				continue
			}
			paths := search.ParamPaths(base, p.Code)
			if len(paths) == 0 {
				continue
			}
			expr := make([]string, len(paths))
			for i, pa := range paths {
				expr[i] = base + "." + pa
			}
			sp := map[string]any{
				"resourceType": "SearchParameter",
				"id":           base + "-" + p.Code,
				"name":         p.Code,
				"code":         p.Code,
				"status":       "active",
				"base":         []any{base},
				"type":         p.Type,
				"expression":   strings.Join(expr, " | "),
			}
			if p.Definition != "" {
				sp["url"] = p.Definition
			}
			if len(p.Targets) > 0 {
				t := make([]any, len(p.Targets))
				for i, x := range p.Targets {
					t[i] = x
				}
				sp["target"] = t
			}
			out = append(out, sp)
		}
	}
	return f.page(out), nil
}
