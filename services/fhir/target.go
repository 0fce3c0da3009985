package fhirsvc

import (
	"context"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhirschema"
)

// target checks the path's resource type and the caller's right to the
// interaction, and returns the gate to reach resources through: 401 for
// an anonymous caller, 403 when the policy grants no such interaction on
// the type, 400 for an unknown type.
func (s *Service) target(ctx context.Context, r *bus.Request, i access.Interaction) (*access.Gate, error) {
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
	return pol.Gate(s.repo, typ, r.Param("id")), nil
}
