package access

import (
	"context"
	"errors"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/writerules"
)

// Gate is one caller's view of one resource type: the repository seen
// through the caller's access policy. Every service reaches resources for
// a caller through one, so the policy is applied in one place: reads
// answer 404 for what the criteria hide, searches carry the criteria into
// the query, returned resources lose their hidden fields, and writes are
// checked against the criteria before and after.
type Gate struct {
	repo   *repo.Repo
	policy *Policy
	typ    string
	sc     repo.Scope
}

// Gate opens the policy's gate to resources of typ; id, when the caller
// names one, may widen the scope (a user reads its own User).
func (p *Policy) Gate(r *repo.Repo, typ, id string) *Gate {
	return p.GateIn(r, typ, p.Scope(typ, id))
}

// GateIn opens a gate confined to sc, for work done later on a caller's
// behalf within one project (a bulk export).
func (p *Policy) GateIn(r *repo.Repo, typ string, sc repo.Scope) *Gate {
	return &Gate{repo: r, policy: p, typ: typ, sc: sc}
}

// Type is the gate's resource type.
func (g *Gate) Type() string { return g.typ }

// Policy is the caller's policy.
func (g *Gate) Policy() *Policy { return g.policy }

// Project is where the caller's creates land.
func (g *Gate) Project() string { return g.sc.Project }

// Seen answers a stored version as the caller may see it: 404 when no
// entry granting i meets it, else without its hidden fields.
func (g *Gate) Seen(i Interaction, res *repo.Resource) (*repo.Resource, error) {
	ok, err := g.policy.Readable(i, res)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fhir.NotFound()
	}
	return g.policy.Redact(res)
}

func (g *Gate) Read(ctx context.Context, id string) (*repo.Resource, error) {
	res, err := g.repo.Read(ctx, g.sc, g.typ, id)
	if err != nil {
		return nil, err
	}
	return g.Seen(Read, res)
}

func (g *Gate) VRead(ctx context.Context, id, vid string) (*repo.Resource, error) {
	res, err := g.repo.VRead(ctx, g.sc, g.typ, id, vid)
	if err != nil {
		return nil, err
	}
	return g.Seen(VRead, res)
}

// History lists the versions the caller may see; 404 when it may see none.
// A version that did not meet the criteria (a resource that moved into
// them) is left out.
func (g *Gate) History(ctx context.Context, id string) ([]*repo.Resource, error) {
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
		sv, err := g.Seen(History, v)
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

// Search runs a query with the policy's criteria ANDed into it, so paging
// and totals count only what the caller may see. A query that filters or
// sorts on a field the policy hides is refused: its answer would reveal
// the field (conditional operations come here too).
func (g *Gate) Search(ctx context.Context, q *search.Query) (*repo.Page, error) {
	if err := g.policy.CheckSearch(g.typ, q); err != nil {
		return nil, err
	}
	f, ok := g.policy.SearchFilter(g.typ, Search)
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

// Reach reads a resource for a service that acts on it rather than
// returns it (runs a bot, deploys one): as stored, after the checks the
// interaction i needs — 403 when the policy grants no read of the type,
// 404 when its criteria hide the resource or it is another project's, and
// for a write (i other than Read) the checks Current makes.
func (g *Gate) Reach(ctx context.Context, i Interaction, id string) (*repo.Resource, error) {
	if err := g.policy.Allow(g.typ, Read); err != nil {
		return nil, err
	}
	res, err := g.repo.Read(ctx, g.sc, g.typ, id)
	if err != nil {
		return nil, err
	}
	if ok, err := g.policy.Readable(Read, res); err != nil {
		return nil, err
	} else if !ok {
		return nil, fhir.NotFound()
	}
	if i != Read {
		if err := g.policy.Write(i, g.typ, res, nil, res.Project); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// Current reads the version a write (update, patch, delete) starts from,
// checked as that write: 404 when the caller cannot see it, 403 when the
// write is not granted on it. It is returned as the caller sees it.
func (g *Gate) Current(ctx context.Context, i Interaction, id string) (*repo.Resource, error) {
	cur, err := g.repo.Read(ctx, g.sc, g.typ, id)
	if err != nil {
		return nil, err
	}
	if err := g.policy.Write(i, g.typ, cur, nil, cur.Project); err != nil {
		return nil, err
	}
	return g.policy.Redact(cur)
}

// writeEnv is what the write rules (pkg/writerules) are given of a write
// through the gate: the repository, the project the resource lands in, and
// the caller's policy for the searches a resource's content would run.
type writeEnv struct{ g *Gate }

func (e writeEnv) Read(ctx context.Context, sc repo.Scope, typ, id string) (*repo.Resource, error) {
	return e.g.repo.Read(ctx, sc, typ, id)
}

// Project is where res is: the current version's project (an update),
// else the caller's, else (a super admin) the one its meta names.
func (e writeEnv) Project(ctx context.Context, res map[string]any) (string, error) {
	g := e.g
	if id, ok := res["id"].(string); ok && id != "" {
		cur, err := g.repo.Read(ctx, repo.AllProjects, g.typ, id)
		if err == nil {
			return cur.Project, nil
		}
		if !fhir.Missing(err) {
			return "", err
		}
	}
	if p := g.Project(); p != "" {
		return p, nil
	}
	if m, ok := res["meta"].(map[string]any); ok {
		if p, ok := m["project"].(string); ok && p != "" {
			return p, nil
		}
	}
	return g.policy.project, nil
}

func (e writeEnv) CheckSearch(typ string, q *search.Query) error {
	return e.g.policy.CheckSearch(typ, q)
}

// Create stores a new resource once the write rules accept its content
// and the policy its creation.
func (g *Gate) Create(ctx context.Context, res map[string]any, o repo.WriteOptions) (*repo.Resource, error) {
	if err := writerules.Check(ctx, g.typ, res, writeEnv{g}); err != nil {
		return nil, err
	}
	if err := g.policy.Write(Create, g.typ, nil, res, g.Project()); err != nil {
		return nil, err
	}
	out, err := g.repo.Create(ctx, g.sc, res, o)
	if err != nil {
		return nil, err
	}
	return g.policy.Redact(out)
}

// Update stores a new version (i is Update or Patch). Under criteria or
// field rules, the version checked is the version replaced: the write is
// conditional on it and retried a few times when another write came
// between, unless the caller named a version itself (If-Match). The write
// rules check the content first; those kept until the write is allowed
// (writerules.CheckAfterAccess) only under such conditions, as a write
// the policy does not condition (a super admin's) is not held to them.
func (g *Gate) Update(ctx context.Context, i Interaction, res map[string]any, o repo.WriteOptions) (*repo.Resource, error) {
	if err := g.changeable(); err != nil {
		return nil, err
	}
	if err := writerules.Check(ctx, g.typ, res, writeEnv{g}); err != nil {
		return nil, err
	}
	if g.policy.Plain(g.typ) {
		return g.repo.Update(ctx, g.sc, res, o)
	}
	id, _ := res["id"].(string)
	out, err := g.repo.Modify(ctx, g.sc, g.typ, id, o, func(cur *repo.Resource) (map[string]any, error) {
		if err := g.policy.Write(i, g.typ, cur, res, cur.Project); err != nil {
			return nil, err
		}
		// Checked once the caller may write the resource at all, so that
		// nothing is told about projects they cannot see.
		if err := writerules.CheckAfterAccess(ctx, g.typ, res, writeEnv{g}); err != nil {
			return nil, err
		}
		return res, nil
	})
	if err != nil {
		return nil, err
	}
	return g.policy.Redact(out)
}

// Delete removes a resource after current has checked it. Between the
// check and the delete another write may change the resource; repo.Delete
// takes no expected version, and the window is one request's length.
func (g *Gate) Delete(ctx context.Context, id string) error {
	if err := g.changeable(); err != nil {
		return err
	}
	return g.repo.Delete(ctx, g.sc, g.typ, id)
}

// ReadOnlyText refuses a change to an AuditEvent.
const ReadOnlyText = "AuditEvents cannot be changed or deleted: the audit trail keeps each as recorded"

// changeable refuses to change or delete what nobody may, a super admin
// included: an AuditEvent (the trail's retention removes old events
// itself, and records that it did).
func (g *Gate) changeable() error {
	if g.typ == "AuditEvent" {
		return fhir.ForbiddenText(ReadOnlyText)
	}
	return nil
}
