package access

import (
	"context"
	"errors"

	"github.com/pinion-health/pinion/pkg/botcron"
	"github.com/pinion-health/pinion/pkg/clientapp"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/subscription"
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

// CheckContent makes the checks of a write beyond the resource's
// definition: fields the server sets, an access policy's criteria, a
// client's redirect and launch URIs (as the /admin route checks them), and
// a subscription's criteria and channel.
func CheckContent(typ string, res map[string]any) error {
	// What is checked is what will be stored: without the empty values
	// (a form's "redirectUri": "") that the write drops anyway.
	fhir.DropEmpty(res)
	if err := checkServerSet(typ, res); err != nil {
		return err
	}
	switch typ {
	case "ClientApplication":
		return clientapp.CheckURIs(res)
	case "AccessPolicy":
		return CheckPolicy(res)
	case "Subscription":
		return subscription.Check(res)
	case "Bot":
		return botcron.Check(res)
	}
	return nil
}

// checkCriteria refuses a Subscription whose criteria search on a field
// the writer's policy hides: each notification would answer that search.
// (Criteria are also matched on the author's view of each change, so a
// policy changed later, or FHIRPath criteria, reveal nothing either.)
func (g *Gate) checkCriteria(res map[string]any) error {
	if g.typ != "Subscription" {
		return nil
	}
	typ, q, err := subscription.Criteria(res)
	if err != nil {
		return err
	}
	if err := g.policy.CheckSearch(typ, q); err != nil {
		return fhir.BadRequest("Invalid criteria: "+fhir.AsError(err).Message(), "Subscription.criteria")
	}
	return nil
}

func (g *Gate) Create(ctx context.Context, res map[string]any, o repo.WriteOptions) (*repo.Resource, error) {
	if err := CheckContent(g.typ, res); err != nil {
		return nil, err
	}
	if err := g.checkCriteria(res); err != nil {
		return nil, err
	}
	if err := g.checkBotSchedule(ctx, res); err != nil {
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
// between, unless the caller named a version itself (If-Match).
func (g *Gate) Update(ctx context.Context, i Interaction, res map[string]any, o repo.WriteOptions) (*repo.Resource, error) {
	if err := CheckContent(g.typ, res); err != nil {
		return nil, err
	}
	if err := g.checkCriteria(res); err != nil {
		return nil, err
	}
	if err := g.checkBotSchedule(ctx, res); err != nil {
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
		// Checked once the caller may write the Project at all, so that
		// nothing is told about projects they cannot see.
		if err := g.checkProjectPolicy(ctx, res); err != nil {
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
	return g.repo.Delete(ctx, g.sc, g.typ, id)
}
