package clients

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/services/identity/account"
)

// SuperAdmin is the super-admin client, and whether this start created its
// secret (then Secret is set, to be shown once).
type SuperAdmin struct {
	ClientID  string `json:"clientId"`
	Secret    string `json:"clientSecret,omitempty"`
	ProjectID string `json:"projectId"`
	Created   bool   `json:"-"`
}

// Fixed ids make the bootstrap idempotent across restarts and instances.
var (
	SuperAdminProjectID = uuid.NewSHA1(account.IDNamespace, []byte("project:superadmin")).String()
)

// SuperAdminMembershipID is the fixed id of the super-admin membership of user (a reference).
func SuperAdminMembershipID(user string) string {
	return uuid.NewSHA1(account.IDNamespace, []byte("superadmin-membership:"+user)).String()
}

const SuperAdminFile = "superadmin.json"

// BootstrapSuperAdmin makes the super-admin project, its client (with the
// configured credentials, or generated ones saved to superadmin.json) and
// the client's membership, unless they exist.
func (s *Service) BootstrapSuperAdmin(ctx context.Context) (SuperAdmin, error) {
	b := SuperAdmin{ProjectID: SuperAdminProjectID}
	if err := s.Ensure(ctx, "Project", SuperAdminProjectID, map[string]any{
		"resourceType": "Project", "name": "Super Admin", "superAdmin": true, "strictMode": true,
	}, SuperAdminProjectID); err != nil {
		return b, err
	}

	b.ClientID, b.Secret = s.cfg.SuperAdminClientID, s.cfg.SuperAdminSecret
	path := ""
	if s.cfg.DataDir != "" {
		path = filepath.Join(s.cfg.DataDir, SuperAdminFile)
	}
	if b.ClientID == "" && path != "" {
		if data, err := os.ReadFile(path); err == nil {
			var saved SuperAdmin
			if json.Unmarshal(data, &saved) == nil && saved.ClientID != "" {
				b.ClientID = saved.ClientID
			}
		}
	}
	generated := false
	if b.ClientID == "" {
		b.ClientID = uuid.NewString()
		b.Secret = auth.NewSecret()
		generated = true
	}
	if err := s.Ensure(ctx, "ClientApplication", b.ClientID, map[string]any{
		"resourceType": "ClientApplication", "name": "Super Admin Client",
		"description": "Created at first start; its membership is in the super-admin project.",
	}, SuperAdminProjectID); err != nil {
		return b, err
	}
	if b.Secret != "" {
		// A configured secret always wins: changing the variable rotates it.
		if err := s.SetSecret(ctx, b.ClientID, b.Secret); err != nil {
			return b, err
		}
	}
	ref := "ClientApplication/" + b.ClientID
	mid := SuperAdminMembershipID(ref)
	pm, err := resource.Map(superAdminMembership(ref))
	if err != nil {
		return b, err
	}
	if err := s.Ensure(ctx, "ProjectMembership", mid, pm, SuperAdminProjectID); err != nil {
		return b, err
	}
	if _, err := projects.Project(ctx, s.nc, "ProjectMembership", mid, SuperAdminProjectID); err != nil {
		return b, fmt.Errorf("session membership: %w", err)
	}
	if generated {
		b.Created = true
		if path != "" {
			data, _ := json.MarshalIndent(b, "", "  ")
			if err := os.WriteFile(path, append(data, '\n'), 0o600); err != nil {
				return b, fmt.Errorf("write %s: %w", path, err)
			}
		}
	}
	return b, nil
}

// superAdminMembership is the super-admin client's membership, an admin
// of the super-admin project.
func superAdminMembership(ref string) *resource.ProjectMembership {
	return &resource.ProjectMembership{
		ResourceType: "ProjectMembership",
		Project:      resource.Reference{Reference: "Project/" + SuperAdminProjectID, Display: "Super Admin"},
		User:         resource.Reference{Reference: ref, Display: "Super Admin Client"},
		Profile:      resource.Reference{Reference: ref, Display: "Super Admin Client"},
		Admin:        new(true),
	}
}

// Ensure creates a resource with a fixed id unless it already exists.
func (s *Service) Ensure(ctx context.Context, typ, id string, res map[string]any, project string) error {
	_, err := s.repo.Read(ctx, repo.AllProjects, typ, id)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fhir.ErrNotFound) {
		return err
	}
	_, err = s.repo.Create(ctx, repo.AllProjects, res, repo.WriteOptions{ID: id, Project: project})
	if errors.Is(err, fhir.ErrConflict) {
		return nil // another instance created it first
	}
	return err
}
