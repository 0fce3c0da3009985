package scimproto

import (
	"encoding/json"
	"strings"

	filter "github.com/scim2/filter-parser/v2"

	"github.com/pinion-health/pinion/pkg/scimwire"
)

// PatchOp is a SCIM PATCH request (RFC 7644 §3.5.2).
type PatchOp struct {
	Schemas    []string    `json:"schemas"`
	Operations []Operation `json:"Operations"`
}

// Operation is one of a PATCH's operations. Op is matched without regard
// to case: Entra ID sends "Replace".
type Operation struct {
	Op    string          `json:"op"`
	Path  string          `json:"path,omitempty"`
	Value json.RawMessage `json:"value,omitempty"`
}

// DecodePatch reads and checks a PATCH body.
func DecodePatch(body []byte) (*PatchOp, error) {
	if len(body) > MaxBody {
		return nil, scimwire.New(413, "", "Request body too large")
	}
	var p PatchOp
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, scimwire.BadRequest(scimwire.InvalidSyntax, "The body is not a PatchOp")
	}
	hasSchema := false
	for _, s := range p.Schemas {
		hasSchema = hasSchema || s == PatchOpSchema
	}
	switch {
	case !hasSchema:
		return nil, scimwire.BadRequest(scimwire.InvalidSyntax, "schemas must name "+PatchOpSchema)
	case len(p.Operations) == 0:
		return nil, scimwire.BadRequest(scimwire.InvalidSyntax, "Operations is required")
	case len(p.Operations) > MaxOperations:
		return nil, scimwire.BadRequest(scimwire.InvalidSyntax, "At most 100 operations")
	}
	for i := range p.Operations {
		o := &p.Operations[i]
		o.Op = strings.ToLower(o.Op)
		switch o.Op {
		case "add", "replace":
			if len(o.Value) == 0 {
				return nil, scimwire.BadRequest(scimwire.InvalidValue, o.Op+" needs a value")
			}
		case "remove":
			if o.Path == "" {
				return nil, scimwire.BadRequest(scimwire.NoTarget, "remove needs a path")
			}
		default:
			return nil, scimwire.BadRequest(scimwire.InvalidSyntax, "Unsupported op "+o.Op)
		}
	}
	return &p, nil
}

// Apply applies the operations, in order, to u's JSON and reads the
// result back as a User (UserFromMap), which checks it. Attributes Pinion
// does not keep (an enterprise extension's, displayName) are accepted and
// dropped, as a provisioning client maps more than any one server keeps.
func (p *PatchOp) Apply(u *User) (*User, error) {
	m := u.ToMap()
	for _, o := range p.Operations {
		var v any
		if len(o.Value) > 0 {
			var err error
			if v, err = decodeValue(o.Value); err != nil {
				return nil, err
			}
		}
		if o.Path == "" {
			// No path: the value is an object of attributes (Okta's
			// {"op":"replace","value":{"active":false}}).
			obj, ok := v.(map[string]any)
			if !ok {
				return nil, scimwire.BadRequest(scimwire.InvalidValue, "Without a path, the value must be an object")
			}
			for k, kv := range obj {
				path, err := parsePath(k)
				if err != nil {
					return nil, err
				}
				if err := applyOne(m, o.Op, path, kv); err != nil {
					return nil, err
				}
			}
			continue
		}
		path, err := parsePath(o.Path)
		if err != nil {
			return nil, err
		}
		if err := applyOne(m, o.Op, path, v); err != nil {
			return nil, err
		}
	}
	return UserFromMap(m)
}

func decodeValue(raw json.RawMessage) (any, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, scimwire.BadRequest(scimwire.InvalidSyntax, "A value is not JSON")
	}
	return v, nil
}

func parsePath(s string) (filter.Path, error) {
	if len(s) > MaxFilter {
		return filter.Path{}, scimwire.BadRequest(scimwire.InvalidPath, "The path is too long")
	}
	p, err := filter.ParsePath([]byte(s))
	if err != nil {
		return filter.Path{}, scimwire.BadRequest(scimwire.InvalidPath, "The path could not be parsed: "+s)
	}
	if p.ValueExpression != nil {
		unescape(p.ValueExpression)
	}
	return p, nil
}

// ignored are attributes a client may echo but never sets: meta "SHALL be
// ignored when provided by clients" (RFC 7643 §3.1), and schemas.
var ignored = map[string]bool{"meta": true, "schemas": true}

// applyOne applies one operation at one path to the User's JSON.
func applyOne(m map[string]any, op string, p filter.Path, v any) error {
	if p.AttributePath.URIPrefix != nil && *p.AttributePath.URIPrefix != UserSchema {
		return nil // an extension's attribute: none is kept
	}
	attr := canonical(p.AttributePath.AttributeName)
	if ignored[attr] {
		return nil
	}
	if attr == "id" {
		if id, _ := v.(string); op == "remove" || id != m["id"] {
			return scimwire.BadRequest(scimwire.Mutability, "id cannot be changed")
		}
		return nil
	}
	sub := ""
	if p.AttributePath.SubAttribute != nil {
		sub = canonical(*p.AttributePath.SubAttribute)
	} else if p.SubAttribute != nil {
		sub = canonical(*p.SubAttribute)
	}
	if p.ValueExpression != nil {
		return applyFiltered(m, op, attr, p.ValueExpression, sub, v)
	}
	if sub == "" {
		switch {
		case op == "remove":
			delete(m, attr)
		case op == "add" && attr == "emails":
			list, _ := m[attr].([]any)
			add, ok := v.([]any)
			if !ok {
				add = []any{v}
			}
			m[attr] = append(list, add...)
		case op == "add" && isObject(m[attr]) && isObject(v):
			// add merges into a complex attribute (RFC 7644 §3.5.2.1).
			for k, kv := range v.(map[string]any) {
				m[attr].(map[string]any)[k] = kv
			}
		default:
			m[attr] = v
		}
		return nil
	}
	if attr == "emails" {
		// emails.value without a filter: the primary, else the first.
		list, _ := m[attr].([]any)
		if len(list) == 0 {
			if op == "remove" {
				return nil
			}
			m[attr] = []any{map[string]any{sub: v}}
			return nil
		}
		setSub(list[primaryIndex(list)], op, sub, v)
		return nil
	}
	obj, _ := m[attr].(map[string]any)
	if obj == nil {
		if op == "remove" {
			return nil
		}
		obj = map[string]any{}
		m[attr] = obj
	}
	setSub(obj, op, sub, v)
	return nil
}

// applyFiltered applies an operation to the elements of a multi-valued
// attribute a filter selects (emails[type eq "work"].value, as Entra ID
// sends). A replace or add that selects none adds an element made of the
// filter's equalities and the value, as Entra expects of a new address.
func applyFiltered(m map[string]any, op, attr string, f filter.Expression, sub string, v any) error {
	if attr != "emails" {
		return scimwire.BadRequest(scimwire.InvalidPath, "Only emails may be selected by a filter")
	}
	if err := check(f, "emails"); err != nil {
		return scimwire.BadRequest(scimwire.InvalidPath, err.Error())
	}
	list, _ := m[attr].([]any)
	var kept []any
	matched := false
	for _, e := range list {
		obj, _ := e.(map[string]any)
		em, err := UserFromMap(map[string]any{"userName": "-", "emails": []any{obj}})
		if err != nil || !match(f, em, &em.Emails[0]) {
			kept = append(kept, e)
			continue
		}
		matched = true
		if op == "remove" && sub == "" {
			continue
		}
		if sub == "" {
			if nv, ok := v.(map[string]any); ok {
				for k, kv := range nv {
					obj[k] = kv
				}
			}
		} else {
			setSub(obj, op, sub, v)
		}
		kept = append(kept, obj)
	}
	if !matched && op != "remove" {
		el := map[string]any{}
		if ae, ok := f.(*filter.AttributeExpression); ok && ae.Operator == filter.EQ {
			el[canonical(ae.AttributePath.AttributeName)] = ae.CompareValue
		}
		if sub != "" {
			el[sub] = v
		} else if nv, ok := v.(map[string]any); ok {
			for k, kv := range nv {
				el[k] = kv
			}
		}
		kept = append(kept, el)
	}
	if len(kept) == 0 {
		delete(m, attr)
	} else {
		m[attr] = kept
	}
	return nil
}

func setSub(e any, op, sub string, v any) {
	obj, _ := e.(map[string]any)
	if obj == nil {
		return
	}
	if op == "remove" {
		delete(obj, sub)
		return
	}
	obj[sub] = v
}

func primaryIndex(list []any) int {
	for i, e := range list {
		if obj, _ := e.(map[string]any); obj != nil && obj["primary"] == true {
			return i
		}
	}
	return 0
}

func isObject(v any) bool {
	_, ok := v.(map[string]any)
	return ok
}
