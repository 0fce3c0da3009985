package fhirsvc

import (
	"context"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// auditVerify is GET /admin/super/audit/verify?project=<id>: whether a
// project's audit trail is whole, and where it first breaks (a super
// admin's; project "" or absent is the server's own trail).
func (s *Service) auditVerify(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if r.Principal == nil || !r.Principal.SuperAdmin {
		return nil, fhir.Forbidden()
	}
	project := r.Query.Get("project")
	if project != "" && uuid.Validate(project) != nil {
		return nil, fhir.BadRequest("Invalid project", "project")
	}
	rep, err := audit.Verify(ctx, s.repo, project)
	if err != nil {
		return nil, err
	}
	return bus.JSON(200, rep), nil
}
