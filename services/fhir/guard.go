package fhir

import (
	"context"
	"errors"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhirschema"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
)

// guard is one request's view of one resource type: the repository seen
// through the caller's access policy. Every handler reaches resources
// through it, so the policy is applied in one place: reads answer 404 for
// what the criteria hide, searches carry the criteria into the query,
// returned resources lose their hidden fields, and writes are checked
// against the criteria before and after.
type guard struct {
	repo   *repo.Repo
	policy *access.Policy
	typ    string
	sc     repo.Scope
}

// target checks the path's resource type and the caller's right to the
// interaction, and returns the guard to reach resources through: 401 for
// an anonymous caller, 403 when the policy grants no such interaction on
// the type, 400 for an unknown type.
func (s *Service) target(ctx context.Context, r *bus.Request, i access.Interaction) (*guard, error) {
	typ := r.Param("type")
	pol, err := s.policies.For(ctx, r.Principal)
	if err != nil {
		return nil, err
	}
	if err := pol.AllowResource(typ, r.Param("id"), i); err != nil {
		return nil, err
	}
	if !fhirschema.IsResourceType(typ) {
		return nil, fhir.BadRequest("Unknown resource type: "+typ, "resourceType")
	}
	return &guard{repo: s.repo, policy: pol, typ: typ, sc: pol.Scope(typ, r.Param("id"))}, nil
}

// project is where the caller's creates land.
func (g *guard) project() string { return g.sc.Project }

// seen answers a stored version as the caller may see it: 404 when no
// entry granting i meets it, else without its hidden fields.
func (g *guard) seen(i access.Interaction, res *repo.Resource) (*repo.Resource, error) {
	ok, err := g.policy.Readable(i, res)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fhir.NotFound()
	}
	return g.policy.Redact(res)
}

func (g *guard) read(ctx context.Context, id string) (*repo.Resource, error) {
	res, err := g.repo.Read(ctx, g.sc, g.typ, id)
	if err != nil {
		return nil, err
	}
	return g.seen(access.Read, res)
}

func (g *guard) vread(ctx context.Context, id, vid string) (*repo.Resource, error) {
	res, err := g.repo.VRead(ctx, g.sc, g.typ, id, vid)
	if err != nil {
		return nil, err
	}
	return g.seen(access.VRead, res)
}

// history lists the versions the caller may see; 404 when it may see none.
// A version that did not meet the criteria (a resource that moved into
// them) is left out.
func (g *guard) history(ctx context.Context, id string) ([]*repo.Resource, error) {
	versions, err := g.repo.History(ctx, g.sc, g.typ, id)
	if err != nil {
		return nil, err
	}
	out := make([]*repo.Resource, 0, len(versions))
	visible := false
	for _, v := range versions {
		if v.Deleted {
			out = append(out, v)
			continue
		}
		sv, err := g.seen(access.History, v)
		if err != nil {
			if errors.Is(err, fhir.ErrNotFound) {
				continue
			}
			return nil, err
		}
		visible = true
		out = append(out, sv)
	}
	if !visible {
		return nil, fhir.NotFound()
	}
	return out, nil
}

// search runs a query with the policy's criteria ANDed into it, so paging
// and totals count only what the caller may see. A query that filters or
// sorts on a field the policy hides is refused: its answer would reveal
// the field (conditional operations come here too).
func (g *guard) search(ctx context.Context, q *search.Query) (*repo.Page, error) {
	if err := g.policy.CheckSearch(g.typ, q); err != nil {
		return nil, err
	}
	f, ok := g.policy.SearchFilter(g.typ, access.Search)
	if !ok {
		return &repo.Page{Total: 0}, nil
	}
	page, err := g.repo.Search(ctx, g.sc, g.typ, q, f...)
	if err != nil {
		return nil, err
	}
	out := *page
	out.Resources = make([]*repo.Resource, len(page.Resources))
	for i, res := range page.Resources {
		if out.Resources[i], err = g.policy.Redact(res); err != nil {
			return nil, err
		}
	}
	return &out, nil
}

// current reads the version a write (update, patch, delete) starts from,
// checked as that write: 404 when the caller cannot see it, 403 when the
// write is not granted on it. It is returned as the caller sees it.
func (g *guard) current(ctx context.Context, i access.Interaction, id string) (*repo.Resource, error) {
	cur, err := g.repo.Read(ctx, g.sc, g.typ, id)
	if err != nil {
		return nil, err
	}
	if err := g.policy.Write(i, g.typ, cur, nil, cur.Project); err != nil {
		return nil, err
	}
	return g.policy.Redact(cur)
}

// serverSet are fields no caller writes through /fhir, super admins
// included. A client's secrets live only as digests in the identity
// service: one written here would be kept in plain text and never work.
var serverSet = map[string][]string{
	"ClientApplication": {"secret", "retiringSecret"},
}

func checkServerSet(typ string, res map[string]any) error {
	for _, f := range serverSet[typ] {
		if _, ok := res[f]; ok {
			return fhir.BadRequest(typ+"."+f+" is set by the server: use $rotate-secret", f)
		}
	}
	return nil
}

// checkContent makes the checks of a write beyond the resource's
// definition: fields the server sets, and an access policy's criteria.
func checkContent(typ string, res map[string]any) error {
	if err := checkServerSet(typ, res); err != nil {
		return err
	}
	if typ == "AccessPolicy" {
		return access.CheckPolicy(res)
	}
	return nil
}

func (g *guard) create(ctx context.Context, res map[string]any, o repo.WriteOptions) (*repo.Resource, error) {
	if err := checkContent(g.typ, res); err != nil {
		return nil, err
	}
	if err := g.policy.Write(access.Create, g.typ, nil, res, g.project()); err != nil {
		return nil, err
	}
	out, err := g.repo.Create(ctx, g.sc, res, o)
	if err != nil {
		return nil, err
	}
	return g.policy.Redact(out)
}

// update stores a new version (i is Update or Patch). Under criteria or
// field rules, the version checked is the version replaced: the write is
// conditional on it and retried a few times when another write came
// between, unless the caller named a version itself (If-Match).
func (g *guard) update(ctx context.Context, i access.Interaction, res map[string]any, o repo.WriteOptions) (*repo.Resource, error) {
	if err := checkContent(g.typ, res); err != nil {
		return nil, err
	}
	if g.policy.Plain(g.typ) {
		return g.repo.Update(ctx, g.sc, res, o)
	}
	id, _ := res["id"].(string)
	for attempt := 0; ; attempt++ {
		cur, err := g.repo.Read(ctx, g.sc, g.typ, id)
		if err != nil {
			return nil, err
		}
		if o.IfMatch != "" && o.IfMatch != cur.VersionID {
			return nil, fhir.PreconditionFailed()
		}
		if err := g.policy.Write(i, g.typ, cur, res, cur.Project); err != nil {
			return nil, err
		}
		pinned := o
		pinned.IfMatch = cur.VersionID
		out, err := g.repo.Update(ctx, g.sc, res, pinned)
		if err != nil && o.IfMatch == "" && attempt < 3 && errors.Is(err, fhir.ErrPreconditionFailed) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return g.policy.Redact(out)
	}
}

// delete removes a resource after current has checked it. Between the
// check and the delete another write may change the resource; repo.Delete
// takes no expected version, and the window is one request's length.
func (g *guard) delete(ctx context.Context, id string) error {
	return g.repo.Delete(ctx, g.sc, g.typ, id)
}
