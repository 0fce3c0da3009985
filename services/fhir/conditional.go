package fhir

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

// match runs a condition (a search query, under the caller's policy) and
// returns its one match, nil for none, or 412 for several.
func match(ctx context.Context, g *access.Gate, query string) (*repo.Resource, error) {
	params, err := url.ParseQuery(strings.TrimPrefix(query, "?"))
	if err != nil {
		return nil, fhir.BadRequest("Invalid condition: "+err.Error(), "If-None-Exist")
	}
	if len(params) == 0 {
		return nil, fhir.BadRequest("A conditional operation needs search parameters")
	}
	params.Set("_count", "2")
	q, err := search.Parse(g.Type(), params)
	if err != nil {
		return nil, err
	}
	page, err := g.Search(ctx, q)
	if err != nil {
		return nil, err
	}
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
	defer s.conditions.lock(g.Project() + "|" + g.Type() + "|" + r.RawQuery)()
	found, err := match(ctx, g, r.RawQuery)
	if err != nil {
		return nil, err
	}
	opts := repo.WriteOptions{Author: r.Principal.Profile, Strict: s.strict(ctx, g.Project())}
	if found == nil {
		delete(res, "id")
		out, err := g.Create(ctx, res, opts)
		if err != nil {
			return nil, err
		}
		return s.afterWrite(ctx, resourceResponse(201, out), out)
	}
	if id, ok := res["id"].(string); ok && id != found.ID {
		return nil, fhir.BadRequest("Resource id does not match the resource the condition found", "id")
	}
	res["id"] = found.ID
	opts.IfMatch = ifMatch(r.Get("If-Match"))
	out, err := g.Update(ctx, access.Update, res, opts)
	if err != nil {
		return nil, err
	}
	return s.afterWrite(ctx, resourceResponse(200, out), out)
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
	return bus.Outcome(fhir.OK()), nil
}
