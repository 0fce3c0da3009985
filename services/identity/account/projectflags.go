package account

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/pinion-health/pinion/pkg/fhir"
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
	var p struct {
		Setting []struct {
			Name         string `json:"name"`
			ValueBoolean *bool  `json:"valueBoolean"`
		} `json:"setting"`
	}
	if err := json.Unmarshal(res.JSON, &p); err != nil {
		return false, err
	}
	for _, st := range p.Setting {
		if st.Name == name && st.ValueBoolean != nil && *st.ValueBoolean {
			return true, nil
		}
	}
	return false, nil
}
