package authserver

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/clients"
)

// Basic is HTTP Basic client authentication on the API (the gateway asks,
// with the id and secret it read from the Authorization header): the same
// checks as the token endpoint, answered with the client's login. Failures
// count against the sign-in limiter, per client and address, as password
// failures do; the caller gets 401 (403 for a blocked address) without
// learning which check failed.
func (s *Service) Basic(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	var in bus.BasicAuth
	if err := json.Unmarshal(r.Body, &in); err != nil || in.ID == "" || in.Secret == "" {
		return nil, fhir.Unauthorized()
	}
	key := "client:" + in.ID
	if err := s.limiter.Allow(r.Remote, key); err != nil {
		return nil, err
	}
	c, _, err := s.clients.Authenticate(ctx, in.ID, r.Remote, session.AppliedRevision(r.Get(session.AppliedHeader)), s.clients.SecretProof(ctx, in.ID, in.Secret))
	switch {
	case errors.Is(err, clients.ErrAddress):
		s.limiter.Released(r.Remote, key)
		return nil, fhir.AddressNotAllowed()
	case errors.Is(err, clients.ErrUnknown), errors.Is(err, clients.ErrSecret), errors.Is(err, clients.ErrInactive):
		s.limiter.Failed(r.Remote, key)
		return nil, fhir.Unauthorized()
	case err != nil:
		s.limiter.Released(r.Remote, key)
		return nil, err
	}
	s.limiter.Succeeded(r.Remote, key)
	return bus.JSON(200, bus.BasicLogin{LoginID: c.LoginID}), nil
}
