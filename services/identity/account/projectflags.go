package account

import (
	"context"
	"errors"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
)

// ProjectFlag reads a Project.setting valueBoolean (mfaRequired,
// requireVerifiedEmail, requireExternalSignIn); unset is false, and so is
// every setting of a project that is gone.
func (s *Service) ProjectFlag(ctx context.Context, projectID, name string) (bool, error) {
	res, err := s.repo.Read(ctx, repo.AllProjects, "Project", projectID)
	if fhir.Missing(err) || errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	on, _ := projects.Setting(res.JSON, name)
	return on, nil
}
