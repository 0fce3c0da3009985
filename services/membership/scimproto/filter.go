package scimproto

import (
	"encoding/json"
	"strings"

	filter "github.com/scim2/filter-parser/v2"

	"github.com/pinion-health/pinion/pkg/scimwire"
)

// Filter is a parsed, checked list filter (RFC 7644 §3.4.2.2) over the
// attributes Pinion keeps: eq, ne, co, sw, ew and pr, joined by and, or
// and not, and emails[...] value paths. Ordering operators are refused:
// none of these attributes is ordered in a way a provisioning client asks.
type Filter struct{ expr filter.Expression }

// ParseFilter parses a filter; "" is the filter that matches everyone.
func ParseFilter(s string) (*Filter, error) {
	if s == "" {
		return &Filter{}, nil
	}
	if len(s) > MaxFilter {
		return nil, scimwire.BadRequest(scimwire.InvalidFilter, "The filter is longer than 1024 characters")
	}
	e, err := filter.ParseFilter([]byte(s))
	if err != nil {
		return nil, scimwire.BadRequest(scimwire.InvalidFilter, "The filter could not be parsed")
	}
	if err := check(e, ""); err != nil {
		return nil, err
	}
	unescape(e)
	return &Filter{expr: e}, nil
}

// unescape decodes the JSON escapes of a filter's strings (RFC 7644
// §3.4.2.2: values are JSON strings), which the parser leaves as written.
func unescape(e filter.Expression) {
	switch e := e.(type) {
	case *filter.LogicalExpression:
		unescape(e.Left)
		unescape(e.Right)
	case *filter.NotExpression:
		unescape(e.Expression)
	case *filter.ValuePath:
		unescape(e.ValueFilter)
	case *filter.AttributeExpression:
		if v, ok := e.CompareValue.(string); ok && strings.Contains(v, `\`) {
			var out string
			if json.Unmarshal([]byte(`"`+v+`"`), &out) == nil {
				e.CompareValue = out
			}
		}
	}
}

// check refuses, before any membership is read, a filter naming an
// attribute or operator this server does not filter on; parent is the
// multi-valued attribute a value path's filter is within.
func check(e filter.Expression, parent string) error {
	switch e := e.(type) {
	case *filter.LogicalExpression:
		if err := check(e.Left, parent); err != nil {
			return err
		}
		return check(e.Right, parent)
	case *filter.NotExpression:
		return check(e.Expression, parent)
	case *filter.ValuePath:
		if parent != "" || canonical(e.AttributePath.AttributeName) != "emails" || e.AttributePath.SubAttribute != nil {
			return scimwire.BadRequest(scimwire.InvalidFilter, "Only emails[...] may be filtered by its values")
		}
		return check(e.ValueFilter, "emails")
	case *filter.AttributeExpression:
		name := attrName(e.AttributePath, parent)
		if _, ok := filterable[name]; !ok {
			return scimwire.BadRequest(scimwire.InvalidFilter, "Cannot filter on "+e.AttributePath.String())
		}
		switch e.Operator {
		case filter.EQ, filter.NE, filter.CO, filter.SW, filter.EW, filter.PR:
		default:
			return scimwire.BadRequest(scimwire.InvalidFilter, "Unsupported operator "+string(e.Operator))
		}
		return nil
	}
	return scimwire.BadRequest(scimwire.InvalidFilter, "The filter could not be parsed")
}

// attrName is an attribute path as a dotted name ("name.givenName"),
// within parent when inside a value path. The core User schema's URI may
// prefix it.
func attrName(p filter.AttributePath, parent string) string {
	name := canonical(p.AttributeName)
	if parent != "" {
		name = parent + "." + name
	}
	if p.SubAttribute != nil {
		name += "." + canonical(*p.SubAttribute)
	}
	if p.URIPrefix != nil && *p.URIPrefix != UserSchema {
		return "" // an extension's attribute: none is kept
	}
	return name
}

// filterable maps each attribute a filter may name to whether its
// comparisons are case-exact (RFC 7643 §4.1: userName, names and e-mails
// are not; ids are).
var filterable = map[string]bool{
	"id": true, "externalId": true, "userName": false, "userType": true, "active": false,
	"name.givenName": false, "name.familyName": false, "name.formatted": false,
	"emails": false, "emails.value": false, "emails.type": false, "emails.primary": false,
}

// Match reports whether the filter selects u.
func (f *Filter) Match(u *User) bool {
	if f == nil || f.expr == nil {
		return true
	}
	return match(f.expr, u, nil)
}

// match evaluates e on u; within a value path, el is the e-mail at hand.
func match(e filter.Expression, u *User, el *Email) bool {
	switch e := e.(type) {
	case *filter.LogicalExpression:
		if e.Operator == filter.AND {
			return match(e.Left, u, el) && match(e.Right, u, el)
		}
		return match(e.Left, u, el) || match(e.Right, u, el)
	case *filter.NotExpression:
		return !match(e.Expression, u, el)
	case *filter.ValuePath:
		for i := range u.Emails {
			if match(e.ValueFilter, u, &u.Emails[i]) {
				return true
			}
		}
		return false
	case *filter.AttributeExpression:
		parent := ""
		if el != nil {
			parent = "emails"
		}
		name := attrName(e.AttributePath, parent)
		return compare(values(u, el, name), e.Operator, e.CompareValue, filterable[name])
	}
	return false
}

// values are the values of an attribute of u (or of the e-mail el): one
// for a single-valued attribute, none when it is absent.
func values(u *User, el *Email, name string) []any {
	str := func(s string) []any {
		if s == "" {
			return nil
		}
		return []any{s}
	}
	emails := u.Emails
	if el != nil {
		emails = []Email{*el}
	}
	switch name {
	case "id":
		return str(u.ID)
	case "externalId":
		return str(u.ExternalID)
	case "userName":
		return str(u.UserName)
	case "userType":
		return str(u.UserType)
	case "active":
		return []any{u.Active == nil || *u.Active}
	case "name.givenName", "name.familyName", "name.formatted":
		if u.Name == nil {
			return nil
		}
		return str(map[string]string{"name.givenName": u.Name.GivenName, "name.familyName": u.Name.FamilyName, "name.formatted": u.Name.Formatted}[name])
	case "emails", "emails.value", "emails.type", "emails.primary":
		var out []any
		for _, e := range emails {
			switch name {
			case "emails.type":
				out = append(out, str(e.Type)...)
			case "emails.primary":
				out = append(out, e.Primary)
			default:
				out = append(out, str(e.Value)...)
			}
		}
		return out
	}
	return nil
}

// compare applies op to an attribute's values: true when any value
// satisfies it (RFC 7644 §3.4.2.2, multi-valued attributes), and for ne
// when none equals.
func compare(vals []any, op filter.CompareOperator, want any, exact bool) bool {
	if op == filter.PR {
		return len(vals) > 0
	}
	if op == filter.NE {
		return !compare(vals, filter.EQ, want, exact)
	}
	for _, v := range vals {
		if b, ok := v.(bool); ok {
			wb, err := boolOf(want)
			if op == filter.EQ && err == nil && wb != nil && *wb == b {
				return true
			}
			continue
		}
		s, _ := v.(string)
		w, ok := want.(string)
		if !ok {
			continue
		}
		if !exact {
			s, w = strings.ToLower(s), strings.ToLower(w)
		}
		switch op {
		case filter.EQ:
			if s == w {
				return true
			}
		case filter.CO:
			if strings.Contains(s, w) {
				return true
			}
		case filter.SW:
			if strings.HasPrefix(s, w) {
				return true
			}
		case filter.EW:
			if strings.HasSuffix(s, w) {
				return true
			}
		}
	}
	return false
}

// Equals returns v when the filter is `attr eq "v"`, alone or as a term
// of a top-level and: then only the memberships with that value can
// match, and the service looks them up instead of reading the project's.
func (f *Filter) Equals(attr string) (string, bool) {
	if f == nil {
		return "", false
	}
	var find func(e filter.Expression) (string, bool)
	find = func(e filter.Expression) (string, bool) {
		switch e := e.(type) {
		case *filter.LogicalExpression:
			if e.Operator != filter.AND {
				return "", false
			}
			if v, ok := find(e.Left); ok {
				return v, true
			}
			return find(e.Right)
		case *filter.AttributeExpression:
			if e.Operator == filter.EQ && attrName(e.AttributePath, "") == attr {
				v, ok := e.CompareValue.(string)
				return v, ok
			}
		}
		return "", false
	}
	return find(f.expr)
}
