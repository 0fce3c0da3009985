package projects

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/repo"
)

// Person is someone given a profile and a membership in a project: a
// project's owner (membership's project creation, identity's
// /auth/newproject) or a patient signing themselves up (/auth/newpatient).
type Person struct {
	User                       string // User/<id>
	FirstName, LastName, Email string
	// ProfileType is Practitioner or Patient.
	ProfileType string
	Admin       bool
	// AccessPolicy, when set, is the membership's AccessPolicy/<id>.
	AccessPolicy string
	// InvitedBy, when set, is who added them (a User reference).
	InvitedBy string
}

// ErrAlreadyMember is AddMember's answer for a user who has a membership
// in the project already.
var ErrAlreadyMember = errors.New("already a member of the project")

// AddMember gives p a profile in the project and a membership for it, and
// waits for the membership's session entry, so a sign-in may use it at
// once. The membership holds the claim of the user's one membership in the
// project, as an invited member's does: inviting them again is a 409.
func AddMember(ctx context.Context, r *repo.Repo, nc *nats.Conn, projectID, projectName string, p Person) (string, error) {
	prof := map[string]any{"resourceType": p.ProfileType}
	name := map[string]any{}
	if p.FirstName != "" {
		name["given"] = []any{p.FirstName}
	}
	if p.LastName != "" {
		name["family"] = p.LastName
	}
	if len(name) > 0 {
		prof["name"] = []any{name}
	}
	if p.Email != "" {
		use := "work"
		if p.ProfileType == "Patient" {
			use = "home"
		}
		prof["telecom"] = []any{map[string]any{"system": "email", "use": use, "value": p.Email}}
	}
	sc := repo.Scope{Project: projectID}
	pr, err := r.Create(ctx, sc, prof, repo.WriteOptions{Project: projectID})
	if err != nil {
		return "", err
	}
	m, err := resource.Map(memberMembership(projectID, projectName, p, p.ProfileType+"/"+pr.ID))
	if err != nil {
		return "", err
	}
	id := uuid.NewString()
	if owner, err := r.Claim(ctx, repo.MembershipKey(projectID, p.User), id); err != nil {
		return "", err
	} else if owner != id {
		return "", ErrAlreadyMember
	}
	pm, err := r.Create(ctx, sc, m, repo.WriteOptions{ID: id, Project: projectID})
	if err != nil {
		return "", err
	}
	if _, err := Project(ctx, nc, "ProjectMembership", pm.ID, projectID); err != nil {
		return "", err
	}
	return pm.ID, nil
}

// memberMembership is the membership of p, whose profile is profile:
// admin only when p is.
func memberMembership(projectID, projectName string, p Person, profile string) *resource.ProjectMembership {
	m := &resource.ProjectMembership{
		ResourceType: "ProjectMembership",
		Project:      resource.Reference{Reference: "Project/" + projectID, Display: projectName},
		User:         resource.Reference{Reference: p.User},
		Profile:      resource.Reference{Reference: profile},
	}
	if p.Admin {
		m.Admin = new(true)
	}
	if p.AccessPolicy != "" {
		m.AccessPolicy = &resource.Reference{Reference: p.AccessPolicy}
	}
	if p.InvitedBy != "" {
		m.InvitedBy = &resource.Reference{Reference: p.InvitedBy}
	}
	return m
}
