package identity

import (
	"context"
	"encoding/json"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
)

// me answers GET /auth/me: who the token's login is, as Medplum's client
// reads it right after every sign-in.
func (s *Service) me(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	p := r.Principal
	if p == nil {
		return nil, fhir.Unauthorized()
	}
	read := func(ref string) (json.RawMessage, error) {
		typ, id, ok := fhir.SplitReference(ref)
		if !ok {
			return nil, nil
		}
		res, err := s.repo.Read(ctx, repo.System, typ, id)
		if err != nil {
			return nil, err
		}
		return res.JSON, nil
	}
	out := map[string]any{"config": map[string]any{}}
	for _, f := range []struct{ key, ref string }{
		{"user", p.User}, {"profile", p.Profile}, {"project", "Project/" + p.Project},
		{"membership", "ProjectMembership/" + p.Membership},
	} {
		b, err := read(f.ref)
		if err != nil {
			return nil, err
		}
		if b != nil {
			out[f.key] = b
		}
	}
	return bus.JSON(200, out), nil
}
