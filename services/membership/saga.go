package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/saga"
	"github.com/pinion-health/pinion/pkg/search"
)

// membershipIDNamespace derives the id of the membership an invite
// creates. Never change it: those ids are stored.
var membershipIDNamespace = uuid.MustParse("0b8c5f6e-2f57-4c1e-8d0a-5a7d1c3e9f42")

// inviteMembership is the saga's third step: create the membership, unless
// the invitee already is a member (409, or an update with upsert).
func (s *Service) inviteMembership(ctx context.Context, data []byte) error {
	_, rec, pending, err := s.invites.Load(ctx, data)
	if err != nil {
		return err
	}
	if !pending {
		// Delivered again after the end: the e-mail step may be all that
		// was left to publish.
		if rec.Status == "done" {
			return s.invites.Advance(ctx, rec, invite.StepMembership)
		}
		return nil
	}
	req := rec.Request
	userRef := "User/" + rec.UserID
	if !req.ForceNewMembership && req.Email != "" {
		// The same person at the other scope is already a member: Medplum's rule.
		otherUser, err := s.repo.ClaimOwner(ctx, repo.UserEmailKey(otherScope(req), req.Email))
		if err != nil {
			return err
		}
		if otherUser != "" && otherUser != rec.UserID {
			held, err := s.repo.ClaimOwner(ctx, repo.MembershipKey(req.ProjectID, "User/"+otherUser))
			if err != nil {
				return err
			}
			if held != "" {
				return s.conflict(ctx, rec, "User is already a member of this project")
			}
		}
	}
	candidate := uuid.NewSHA1(membershipIDNamespace, []byte("invite-membership:"+rec.ID)).String()
	memberID := candidate
	if !req.ForceNewMembership {
		owner, err := s.repo.Claim(ctx, repo.MembershipKey(req.ProjectID, userRef), candidate)
		if err != nil {
			return err
		}
		if owner != candidate {
			if !req.Upsert {
				return s.conflict(ctx, rec, "User is already a member of this project")
			}
			if memberID, err = s.upsertMembership(ctx, rec, owner); err != nil {
				return err
			}
		}
	}
	if memberID == candidate {
		if req.ExternalID != "" {
			owner, err := s.repo.Claim(ctx, repo.ExternalIDKey(req.ProjectID, req.ExternalID), candidate)
			if err != nil {
				return err
			}
			if owner != candidate {
				_ = s.repo.Release(ctx, repo.MembershipKey(req.ProjectID, userRef), candidate)
				return s.conflict(ctx, rec, "Membership with externalId "+req.ExternalID+" already exists")
			}
		}
		pm, err := newMembership(req, userRef, rec.ProfileRef)
		if err != nil {
			return err
		}
		m, err := resource.Map(pm)
		if err != nil {
			return err
		}
		if req.MFARequired {
			// The project's requirement, on the membership it makes: it
			// exists exactly when the membership does.
			projects.RequireMFA(m)
		}
		_, err = s.repo.Create(ctx, repo.AllProjects, m, repo.WriteOptions{ID: candidate, Project: req.ProjectID})
		if err != nil && !(errors.Is(err, fhir.ErrConflict)) {
			return fmt.Errorf("create membership: %w", err)
		}
	}
	if err := s.publishMembership(ctx, memberID); err != nil {
		return err
	}
	rec, err = s.invites.Save(ctx, rec, func(r *invite.Record) error {
		r.MembershipID = memberID
		r.Status = "done"
		invite.MarkStep(r, invite.StepMembership, "done", "")
		return nil
	})
	if err != nil {
		return err
	}
	// The e-mail step, when there is one, announces the end once the
	// e-mail is queued, as Medplum answers once it has sent it.
	return s.invites.Advance(ctx, rec, invite.StepMembership)
}

// otherScope is the scope (a project id, or "" for the server) where the
// invitee, if already a user there, is the same person: a project-scoped
// invite looks at server users, a server-scoped one at this project's.
func otherScope(req invite.Request) string {
	if req.ProjectScoped {
		return ""
	}
	return req.ProjectID
}

// newMembership is the ProjectMembership an invite creates: the invite's
// template, with the project, user and profile it names, each displayed.
func newMembership(req invite.Request, userRef, profileRef string) (*resource.ProjectMembership, error) {
	display := req.Email
	if display == "" {
		display = req.ExternalID
	}
	pm := &resource.ProjectMembership{
		ResourceType: "ProjectMembership",
		Project:      resource.Reference{Reference: "Project/" + req.ProjectID, Display: req.ProjectName},
		User:         resource.Reference{Reference: userRef, Display: display},
		Profile:      resource.Reference{Reference: profileRef, Display: req.FirstName + " " + req.LastName},
	}
	if len(req.Membership) > 0 {
		b, err := json.Marshal(req.Membership)
		if err != nil {
			return nil, fmt.Errorf("membership template: %w", err)
		}
		if err := json.Unmarshal(b, &pm.Other); err != nil {
			return nil, fmt.Errorf("membership template: %w", err)
		}
	}
	return pm, nil
}

// conflict ends an invite with 409. What the invite found or created
// stays: the user and profile may be shared with a concurrent invite of the
// same person that won, and a profile is reused by the next invite anyway.
func (s *Service) conflict(ctx context.Context, rec *invite.Record, text string) error {
	return saga.Permanent(fhir.Conflict(text))
}

// upsertMembership applies the invite's template to the existing membership.
func (s *Service) upsertMembership(ctx context.Context, rec *invite.Record, id string) (string, error) {
	cur, err := s.repo.Read(ctx, repo.AllProjects, "ProjectMembership", id)
	if err != nil {
		return "", err
	}
	pm, err := cur.Decode()
	if err != nil {
		return "", err
	}
	if ref, _ := refOf(pm["profile"]); ref != rec.ProfileRef {
		return "", saga.Permanent(fhir.Conflict("User is already a member of this project with a different profile"))
	}
	for k, v := range rec.Request.Membership {
		pm[k] = v
	}
	if rec.Request.MFARequired {
		projects.RequireMFA(pm)
	}
	if _, err := s.repo.Update(ctx, repo.AllProjects, pm, repo.WriteOptions{}); err != nil {
		return "", err
	}
	return id, nil
}

// publishMembership has a membership's rights projected to the session
// bucket, so the gateway honours them once the invite is answered.
func (s *Service) publishMembership(ctx context.Context, id string) error {
	_, err := projects.Project(ctx, s.nc, "ProjectMembership", id, "")
	return err
}

// membershipsOfUser lists a user's memberships in a project.
func (s *Service) membershipsOfUser(ctx context.Context, projectID, userRef string) ([]*repo.Resource, error) {
	q, err := search.Parse("ProjectMembership", url.Values{"user": {userRef}, "project": {"Project/" + projectID}, "_count": {"100"}})
	if err != nil {
		return nil, err
	}
	page, err := s.repo.Search(ctx, repo.AllProjects, "ProjectMembership", q)
	if err != nil {
		return nil, err
	}
	return page.Resources, nil
}
