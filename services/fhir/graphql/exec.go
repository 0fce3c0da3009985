package graphql

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhirschema"
)

// Store is how a query reaches resources. The FHIR service hands in its
// own REST handlers, so every node a query reads or writes passes the
// caller's access policy exactly as the same REST request would: 404 for
// what it may not see, hidden fields removed. Errors are *fhir.Error.
type Store interface {
	Read(ctx context.Context, typ, id string) (map[string]any, error)
	Search(ctx context.Context, typ string, params url.Values) ([]map[string]any, error)
	Create(ctx context.Context, typ string, res map[string]any) (map[string]any, error)
	Update(ctx context.Context, typ, id string, res map[string]any) (map[string]any, error)
	Delete(ctx context.Context, typ, id string) error
}

// Request is the body of POST $graphql (and the query of GET).
type Request struct {
	Query         string         `json:"query"`
	OperationName string         `json:"operationName,omitempty"`
	Variables     map[string]any `json:"variables,omitempty"`
}

// Response is GraphQL's answer: data, and an error per field that could
// not be resolved (its data null), as Medplum's graphql-js answers.
type Response struct {
	Data   *object `json:"data"`
	Errors []Error `json:"errors,omitempty"`
}

// Error is one entry of a response's errors.
type Error struct {
	Message   string     `json:"message"`
	Locations []Location `json:"locations,omitempty"`
	Path      []any      `json:"path,omitempty"`
}

// Location is where in the query an error arose.
type Location struct {
	Line   int `json:"line"`
	Column int `json:"column"`
}

// Execute parses, validates, bounds and runs one request. A request that
// cannot run at all (no query, a syntax or validation error, a bound
// exceeded, the deadline passed) is a *fhir.Error, as Medplum answers
// those with an OperationOutcome; a field that fails is an entry of the
// response's errors beside the rest of the data.
func Execute(ctx context.Context, st Store, req Request, l Limits) (*Response, error) {
	if strings.TrimSpace(req.Query) == "" {
		return nil, fhir.BadRequest("Must provide query.")
	}
	if len(req.Query) > l.MaxQueryBytes {
		return nil, fhir.BadRequest(fmt.Sprintf("Query too large (%d bytes, max %d)", len(req.Query), l.MaxQueryBytes))
	}
	s, err := schema()
	if err != nil {
		return nil, err
	}
	doc, perr := parser.ParseQuery(&ast.Source{Name: "query", Input: req.Query})
	if perr != nil {
		return nil, fhir.BadRequest("GraphQL syntax error.")
	}
	if errs := validator.Validate(s, doc); len(errs) > 0 {
		issues := make([]fhir.Issue, 0, len(errs))
		for _, e := range errs {
			issues = append(issues, fhir.FieldIssue("", e.Message))
		}
		return nil, fhir.Invalid(issues...)
	}
	op := doc.Operations.ForName(req.OperationName)
	if op == nil {
		return nil, fhir.BadRequest("Unknown operation: " + req.OperationName)
	}
	vars, verr := validator.VariableValues(s, op, req.Variables)
	if verr != nil {
		return nil, fhir.BadRequest(verr.Error())
	}
	if introspects(op.SelectionSet) {
		// The whole schema is megabytes; Medplum serves it only to projects
		// with the graphql-introspection feature, which Pinion has not.
		return nil, fhir.Forbidden()
	}
	if err := l.check(op, vars); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, l.Deadline)
	defer cancel()
	x := &executor{st: st, schema: s, vars: vars, limits: l}
	root := queryRoot
	if op.Operation == ast.Mutation {
		root = mutationRoot
	}
	data, err := x.object(ctx, nil, root, op.SelectionSet, nil)
	if err != nil {
		return nil, err
	}
	return &Response{Data: data, Errors: x.errs}, nil
}

// object is a JSON object whose keys keep the query's order.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) set(k string, v any) {
	if o.vals == nil {
		o.vals = map[string]any{}
	}
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

// MarshalJSON writes the keys in the query's order.
func (o *object) MarshalJSON() ([]byte, error) {
	if o == nil {
		return []byte("null"), nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

type executor struct {
	st     Store
	schema *ast.Schema
	vars   map[string]any
	limits Limits
	errs   []Error
	nodes  int
}

// fieldError records a field that could not be resolved; a request-level
// failure (a bound, the deadline) is returned instead, ending the request.
func (x *executor) fieldError(ctx context.Context, f *ast.Field, path []any, err error) error {
	if ctx.Err() != nil {
		return fhir.Timeout("GraphQL query exceeded its deadline")
	}
	var fe *fhir.Error
	msg := err.Error()
	if errors.As(err, &fe) {
		msg = fe.Message()
	}
	e := Error{Message: msg, Path: append([]any(nil), path...)}
	if f.Position != nil {
		e.Locations = []Location{{Line: f.Position.Line, Column: f.Position.Column}}
	}
	x.errs = append(x.errs, e)
	return nil
}

// spend counts resources read against MaxNodes.
func (x *executor) spend(ctx context.Context, n int) error {
	if err := ctx.Err(); err != nil {
		return fhir.Timeout("GraphQL query exceeded its deadline")
	}
	if x.nodes += n; x.nodes > x.limits.MaxNodes {
		return tooCostly(x.limits.MaxNodes)
	}
	return nil
}

// collect groups a selection's fields by response key, fragments that
// apply to typ expanded, so that a key asked for twice is answered once
// with both selections merged.
func (x *executor) collect(typ string, set ast.SelectionSet, keys *[]string, groups map[string][]*ast.Field) {
	for _, sel := range set {
		switch sel := sel.(type) {
		case *ast.Field:
			if skipped(sel.Directives, x.vars) {
				continue
			}
			k := sel.Alias
			if k == "" {
				k = sel.Name
			}
			if _, ok := groups[k]; !ok {
				*keys = append(*keys, k)
			}
			groups[k] = append(groups[k], sel)
		case *ast.InlineFragment:
			if !skipped(sel.Directives, x.vars) && applies(sel.TypeCondition, typ) {
				x.collect(typ, sel.SelectionSet, keys, groups)
			}
		case *ast.FragmentSpread:
			if sel.Definition != nil && !skipped(sel.Directives, x.vars) && applies(sel.Definition.TypeCondition, typ) {
				x.collect(typ, sel.Definition.SelectionSet, keys, groups)
			}
		}
	}
}

func applies(cond, typ string) bool {
	return cond == "" || cond == typ || (cond == resourceList && fhirschema.IsResourceType(typ))
}

// skipped applies @skip and @include.
func skipped(ds ast.DirectiveList, vars map[string]any) bool {
	if d := ds.ForName("skip"); d != nil {
		if b, _ := d.ArgumentMap(vars)["if"].(bool); b {
			return true
		}
	}
	if d := ds.ForName("include"); d != nil {
		if b, _ := d.ArgumentMap(vars)["if"].(bool); !b {
			return true
		}
	}
	return false
}

// object answers a selection on src, a value of type typ (src is nil for
// the root types).
func (x *executor) object(ctx context.Context, src map[string]any, typ string, set ast.SelectionSet, path []any) (*object, error) {
	var keys []string
	groups := map[string][]*ast.Field{}
	x.collect(typ, set, &keys, groups)
	out := &object{}
	for _, k := range keys {
		fs := groups[k]
		f := fs[0]
		var sub ast.SelectionSet
		for _, g := range fs {
			sub = append(sub, g.SelectionSet...)
		}
		p := append(path[:len(path):len(path)], k)
		v, err := x.field(ctx, src, typ, f, sub, p)
		if err != nil {
			if requestLevel(err) {
				return nil, err
			}
			if err = x.fieldError(ctx, f, p, err); err != nil {
				return nil, err
			}
			v = nil
		}
		out.set(k, v)
	}
	return out, nil
}

// requestLevel reports errors that end the request rather than one field.
func requestLevel(err error) bool {
	var fe *fhir.Error
	return errors.As(err, &fe) && (fe.Status == 400 && strings.HasPrefix(fe.Message(), "Query too expensive") || fe.Status == 504)
}

func (x *executor) field(ctx context.Context, src map[string]any, typ string, f *ast.Field, sub ast.SelectionSet, path []any) (any, error) {
	if f.Name == "__typename" {
		return typ, nil
	}
	if f.Definition == nil {
		return nil, nil
	}
	switch {
	case typ == queryRoot:
		return x.query(ctx, f, sub, path)
	case typ == mutationRoot:
		return x.mutate(ctx, f, sub, path)
	case typ == "Reference" && f.Name == "resource":
		return x.reference(ctx, src, sub, path)
	case src != nil && f.Arguments.ForName("_reference") != nil:
		return x.reverse(ctx, src, f, sub, path)
	}
	return x.complete(ctx, src[f.Name], f.Definition.Type, sub, path)
}

// complete shapes a stored value as the field's type asks.
func (x *executor) complete(ctx context.Context, v any, t *ast.Type, sub ast.SelectionSet, path []any) (any, error) {
	if v == nil {
		return nil, nil
	}
	if t.Elem != nil {
		arr, ok := v.([]any)
		if !ok {
			arr = []any{v}
		}
		out := make([]any, len(arr))
		for i, item := range arr {
			c, err := x.complete(ctx, item, t.Elem, sub, append(path[:len(path):len(path)], i))
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	}
	def := x.schema.Types[t.NamedType]
	if def == nil {
		return nil, nil
	}
	switch def.Kind {
	case ast.Object, ast.Union:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, nil
		}
		typ := t.NamedType
		if def.Kind == ast.Union {
			typ, _ = m["resourceType"].(string)
		}
		return x.object(ctx, m, typ, sub, path)
	}
	switch v.(type) {
	case map[string]any, []any:
		return nil, nil
	}
	return v, nil
}

// resources completes a list of resources.
func (x *executor) resources(ctx context.Context, list []map[string]any, sub ast.SelectionSet, path []any) ([]any, error) {
	out := make([]any, len(list))
	for i, r := range list {
		typ, _ := r["resourceType"].(string)
		o, err := x.object(ctx, r, typ, sub, append(path[:len(path):len(path)], i))
		if err != nil {
			return nil, err
		}
		out[i] = o
	}
	return out, nil
}

func (x *executor) query(ctx context.Context, f *ast.Field, sub ast.SelectionSet, path []any) (any, error) {
	args := f.ArgumentMap(x.vars)
	if typ, ok := strings.CutSuffix(f.Name, "List"); ok && fhirschema.IsResourceType(typ) {
		var list []map[string]any
		var err error
		switch typ {
		case "StructureDefinition":
			list, err = x.structureDefinitions(ctx, args)
		case "SearchParameter":
			list, err = searchParameters(args)
		default:
			if err = x.spend(ctx, 1); err != nil {
				return nil, err
			}
			list, err = x.st.Search(ctx, typ, searchValues(args))
		}
		if err != nil {
			return nil, err
		}
		if err := x.spend(ctx, len(list)); err != nil {
			return nil, err
		}
		return x.resources(ctx, list, sub, path)
	}
	if err := x.spend(ctx, 1); err != nil {
		return nil, err
	}
	id, _ := args["id"].(string)
	res, err := x.st.Read(ctx, f.Name, id)
	if err != nil {
		return nil, err
	}
	return x.object(ctx, res, f.Name, sub, path)
}

func (x *executor) mutate(ctx context.Context, f *ast.Field, sub ast.SelectionSet, path []any) (any, error) {
	if err := x.spend(ctx, 1); err != nil {
		return nil, err
	}
	args := f.ArgumentMap(x.vars)
	id, _ := args["id"].(string)
	var res map[string]any
	var err error
	switch {
	case strings.HasSuffix(f.Name, "Create"):
		typ := strings.TrimSuffix(f.Name, "Create")
		in, ok := args["res"].(map[string]any)
		if !ok {
			return nil, fhir.BadRequest("res must be a " + typ + " resource")
		}
		res, err = x.st.Create(ctx, typ, in)
		if err == nil {
			return x.object(ctx, res, typ, sub, path)
		}
	case strings.HasSuffix(f.Name, "Update"):
		typ := strings.TrimSuffix(f.Name, "Update")
		in, ok := args["res"].(map[string]any)
		if !ok {
			return nil, fhir.BadRequest("res must be a " + typ + " resource")
		}
		res, err = x.st.Update(ctx, typ, id, in)
		if err == nil {
			return x.object(ctx, res, typ, sub, path)
		}
	case strings.HasSuffix(f.Name, "Delete"):
		err = x.st.Delete(ctx, strings.TrimSuffix(f.Name, "Delete"), id)
	}
	return nil, err
}

// reference resolves Reference.resource: a relative reference
// (Type/id) is read through the store; others resolve to null.
func (x *executor) reference(ctx context.Context, src map[string]any, sub ast.SelectionSet, path []any) (any, error) {
	ref, _ := src["reference"].(string)
	typ, id, ok := strings.Cut(ref, "/")
	if !ok || !fhirschema.IsResourceType(typ) || id == "" || strings.Contains(id, "/") {
		return nil, nil
	}
	if err := x.spend(ctx, 1); err != nil {
		return nil, err
	}
	res, err := x.st.Read(ctx, typ, id)
	if err != nil {
		return nil, err
	}
	return x.object(ctx, res, typ, sub, path)
}

// reverse answers <Type>List(_reference: param) on a resource: the
// resources of Type whose param names it.
func (x *executor) reverse(ctx context.Context, src map[string]any, f *ast.Field, sub ast.SelectionSet, path []any) (any, error) {
	typ := strings.TrimSuffix(f.Name, "List")
	args := f.ArgumentMap(x.vars)
	ref, _ := args["_reference"].(string)
	delete(args, "_reference")
	params := searchValues(args)
	srcType, _ := src["resourceType"].(string)
	srcID, _ := src["id"].(string)
	params.Add(paramCode(ref), srcType+"/"+srcID)
	if err := x.spend(ctx, 1); err != nil {
		return nil, err
	}
	list, err := x.st.Search(ctx, typ, params)
	if err != nil {
		return nil, err
	}
	if err := x.spend(ctx, len(list)); err != nil {
		return nil, err
	}
	return x.resources(ctx, list, sub, path)
}

// searchValues turns a list field's arguments into search parameters.
func searchValues(args map[string]any) url.Values {
	out := url.Values{}
	for k, v := range args {
		var s string
		switch v := v.(type) {
		case nil:
			continue
		case string:
			s = v
		case int64:
			s = strconv.FormatInt(v, 10)
		case float64:
			s = strconv.FormatFloat(v, 'f', -1, 64)
		case bool:
			s = strconv.FormatBool(v)
		default:
			s = fmt.Sprint(v)
		}
		out.Add(paramCode(k), s)
	}
	return out
}

// introspects reports a root __schema or __type field (fragments
// included); __typename is ordinary data.
func introspects(set ast.SelectionSet) bool {
	for _, sel := range set {
		switch sel := sel.(type) {
		case *ast.Field:
			if sel.Name == "__schema" || sel.Name == "__type" {
				return true
			}
		case *ast.InlineFragment:
			if introspects(sel.SelectionSet) {
				return true
			}
		case *ast.FragmentSpread:
			if sel.Definition != nil && introspects(sel.Definition.SelectionSet) {
				return true
			}
		}
	}
	return false
}
