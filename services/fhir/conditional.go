package fhirsvc

import (
	"context"
	"net/url"
	"strings"
	"sync"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
)

// keyLocks serialises conditional writes with the same condition in this
// process, so two racing "create if none exists" make one resource.
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	users int
}

func (k *keyLocks) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.users++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// conditionKey is what conditional writes with one condition in one
// project lock on.
func conditionKey(project, typ, cond string) string {
	return project + "|" + typ + "|" + cond
}

// match runs a condition (a search query, under the caller's policy) and
// returns its one match, nil for none, or 412 for several.
func match(ctx context.Context, g *access.Gate, cond string) (*repo.Resource, error) {
	q, err := conditionQuery(g.Type(), cond)
	if err != nil {
		return nil, err
	}
	page, err := g.Search(ctx, q)
	if err != nil {
		return nil, err
	}
	return oneMatch(page)
}

// conditionQuery is the search a condition ("a=b", or "?a=b" as some
// clients send it) runs: two results at most, enough to tell one match
// from several, whatever _count it gives.
func conditionQuery(typ, cond string) (*search.Query, error) {
	params, err := url.ParseQuery(strings.TrimPrefix(cond, "?"))
	if err != nil {
		return nil, fhir.BadRequest("Invalid condition: "+err.Error(), "If-None-Exist")
	}
	if len(params) == 0 {
		return nil, fhir.BadRequest("A conditional operation needs search parameters")
	}
	params.Set("_count", "2")
	return search.Parse(typ, params)
}

// oneMatch is a condition's outcome: its one match, nil for none, 412
// for several.
func oneMatch(page *repo.Page) (*repo.Resource, error) {
	switch len(page.Resources) {
	case 0:
		return nil, nil
	case 1:
		return page.Resources[0], nil
	}
	return nil, fhir.MultipleMatches()
}

// conditionalUpdate is PUT /fhir/R4/<type>?<query>: update the one match,
// create when there is none, refuse several.
func (s *Service) conditionalUpdate(ctx context.Context, r *bus.Request, g *access.Gate, res map[string]any) (*bus.Response, error) {
	defer s.conditions.lock(conditionKey(g.Project(), g.Type(), r.RawQuery))()
	found, err := match(ctx, g, r.RawQuery)
	if err != nil {
		return nil, err
	}
	if err := bindCondition(res, found); err != nil {
		return nil, err
	}
	opts := repo.WriteOptions{Author: r.Principal.Profile, Strict: s.strict(ctx, g.Project())}
	if found == nil {
		out, err := g.Create(ctx, res, opts)
		if err != nil {
			return nil, err
		}
		return s.afterWrite(ctx, r, resourceResponse(201, out), out)
	}
	opts.IfMatch = ifMatch(r.Get("If-Match"))
	out, err := g.Update(ctx, access.Update, res, opts)
	if err != nil {
		return nil, err
	}
	return s.afterWrite(ctx, r, resourceResponse(200, out), out)
}

// bindCondition gives a conditional update's resource the id of what its
// condition found: none when it found nothing (the server names the
// create), and a body naming another id is refused.
func bindCondition(res map[string]any, found *repo.Resource) error {
	if found == nil {
		delete(res, "id")
		return nil
	}
	if id, ok := res["id"].(string); ok && id != found.ID {
		return fhir.BadRequest("Resource id does not match the resource the condition found", "id")
	}
	res["id"] = found.ID
	return nil
}

// validate is POST /fhir/R4/<type>/$validate: the checks of a create,
// nothing stored.
func (s *Service) validate(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	g, err := s.target(ctx, r, access.Read)
	if err != nil {
		return nil, err
	}
	res, err := decodeBody(r, g.Type())
	if err != nil {
		return nil, err
	}
	delete(res, "meta")
	if err := repo.Check(res, s.strict(ctx, g.Project())); err != nil {
		return nil, err
	}
	return bus.OK(), nil
}
