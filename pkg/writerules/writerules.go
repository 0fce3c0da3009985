// Package writerules decides what a resource of a given type must be for
// a write to store it, beyond its FHIR definition (pkg/fhirschema, which
// the repository applies to every write): a client's redirect URIs, an
// access policy's criteria, a subscription's channel, a bot's schedule.
// Who may write it is pkg/access's question, not this package's.
//
// The rules are one table, in rules.go: a rule for a type is added there
// and to the examples in rules_test.go, and every route that writes the
// type applies it. The FHIR interactions (create, update, patch,
// conditional writes, batch and transaction entries, GraphQL mutations)
// reach it through access.Gate; an /admin route that creates a resource
// of its own calls Check itself.
package writerules

import (
	"context"
	"encoding/json"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
)

// A Rule checks a resource about to be written: nil accepts it, and a
// refusal is a *fhir.Error (so far always a 400 naming the field at
// fault). Most rules read the resource alone; the few that need more ask
// env, and none writes anything.
type Rule func(ctx context.Context, res map[string]any, env Env) error

// Reader reads a stored resource; *repo.Repo is one.
type Reader interface {
	Read(ctx context.Context, sc repo.Scope, typ, id string) (*repo.Resource, error)
}

// Env is what the rules that look beyond the resource are given: the
// store, where the resource lands, and what the writer may search.
// access.Gate gives the caller's; InProject serves an /admin route.
type Env interface {
	Reader
	// Project is the project res is in once written ("" when there is
	// none to tell).
	Project(ctx context.Context, res map[string]any) (string, error)
	// CheckSearch refuses a search the writer may not run: one that reads
	// a field its access policy hides (access.Policy.CheckSearch).
	CheckSearch(typ string, q *search.Query) error
}

// Check runs the rules for typ on res, in the table's order, and returns
// the first refusal. The empty values a write drops anyway (a form's
// "redirectUri": "") are dropped from res first, in place: what is checked
// is what will be stored.
func Check(ctx context.Context, typ string, res map[string]any, env Env) error {
	fhir.DropEmpty(res)
	return run(ctx, rules[typ], res, env)
}

// CheckAfterAccess runs the rules for typ kept until the writer is known
// to be allowed the write (afterAccess in rules.go): their answers tell of
// other projects' resources, which nobody else is to learn anything about.
func CheckAfterAccess(ctx context.Context, typ string, res map[string]any, env Env) error {
	return run(ctx, afterAccess[typ], res, env)
}

func run(ctx context.Context, list []Rule, res map[string]any, env Env) error {
	for _, rule := range list {
		if err := rule(ctx, res, env); err != nil {
			return err
		}
	}
	return nil
}

// InProject is the Env of a write into project made by a route of its own
// rather than the FHIR API (POST /admin/projects/:projectId/bot): its
// reads come from r, and it refuses no search, as no such route writes a
// resource whose rules search (a Subscription).
func InProject(r Reader, project string) Env {
	return inProject{Reader: r, project: project}
}

type inProject struct {
	Reader
	project string
}

func (e inProject) Project(context.Context, map[string]any) (string, error) {
	return e.project, nil
}

func (inProject) CheckSearch(string, *search.Query) error { return nil }

// ProjectFeatures is Project.features ("" or a missing project: none):
// what a bot's schedule needs (botcron.Enabled), read at write by the
// rules and at every run by botexec's scheduler.
func ProjectFeatures(ctx context.Context, r Reader, project string) ([]string, error) {
	if project == "" {
		return nil, nil
	}
	p, err := r.Read(ctx, repo.AllProjects, "Project", project)
	if fhir.Missing(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var v struct {
		Features []string `json:"features"`
	}
	if err := json.Unmarshal(p.JSON, &v); err != nil {
		return nil, err
	}
	return v.Features, nil
}
