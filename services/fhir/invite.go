package fhirsvc

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/saga"
	"github.com/pinion-health/pinion/pkg/search"
)

// inviteProfileIDNamespace derives the id of the profile an invite
// creates. Never change it: those ids are stored.
var inviteProfileIDNamespace = uuid.MustParse("3c6b2a51-0f9d-4e27-9b1e-7d2e4f8a6c13")

// inviteProfile is the saga's second step: reuse the project's profile of
// that type with the invitee's e-mail, or create one.
func (s *Service) inviteProfile(ctx context.Context, data []byte) error {
	_, rec, pending, err := s.invites.Load(ctx, data)
	if err != nil || !pending {
		return err
	}
	if rec.Steps[invite.StepProfile].State == "done" {
		return s.invites.Advance(ctx, rec, invite.StepProfile)
	}
	req := rec.Request
	ref := req.Profile
	if ref == "" {
		if ref, err = s.inviteeProfile(ctx, rec.ID, req); err != nil {
			return err
		}
	}
	if _, err := s.invites.Save(ctx, rec, func(r *invite.Record) error {
		r.ProfileRef = ref
		invite.MarkStep(r, invite.StepProfile, "done", "")
		return nil
	}); err != nil {
		return err
	}
	return s.invites.Advance(ctx, rec, invite.StepProfile)
}

// inviteeProfile finds or creates the invitee's profile. With an e-mail,
// the profile is claimed under (project, type, e-mail): two invites of one
// person racing each other end with the same profile. The claim is looked
// up before the search because it is one key read and holds the winner of
// a race whose loser's profile a search could still see (412); the search
// finds a profile made outside any invite, which holds no claim.
func (s *Service) inviteeProfile(ctx context.Context, inviteID string, req invite.Request) (string, error) {
	key := repo.ProfileKey(req.ProjectID, req.ResourceType, req.Email)
	if req.Email != "" {
		if owner, err := s.repo.ClaimOwner(ctx, key); err != nil {
			return "", err
		} else if owner != "" {
			return req.ResourceType + "/" + owner, nil
		}
		found, err := s.profileByEmail(ctx, req.ProjectID, req.ResourceType, req.Email)
		if err != nil {
			return "", err
		}
		if found != "" {
			_, id, _ := fhir.SplitReference(found)
			owner, err := s.repo.Claim(ctx, key, id)
			if err != nil {
				return "", err
			}
			return req.ResourceType + "/" + owner, nil
		}
	}
	id := profileID(inviteID)
	_, err := s.repo.Create(ctx, repo.AllProjects, newProfile(req), repo.WriteOptions{ID: id, Project: req.ProjectID})
	if err := profileCreateError(err); err != nil {
		return "", err
	}
	if req.Email == "" {
		return req.ResourceType + "/" + id, nil
	}
	owner, err := s.repo.Claim(ctx, key, id)
	if err != nil {
		return "", err
	}
	if owner != id {
		// Another invite of the same person won: drop ours (nothing refers
		// to it yet) and share theirs.
		if err := s.repo.Delete(ctx, repo.AllProjects, req.ResourceType, id); err != nil {
			return "", err
		}
		return req.ResourceType + "/" + owner, nil
	}
	return req.ResourceType + "/" + id, nil
}

// profileID is the id of the profile an invite creates: the same on every
// delivery of the step, so a retry finds what an earlier attempt made.
func profileID(inviteID string) string {
	return uuid.NewSHA1(inviteProfileIDNamespace, []byte("invite-profile:"+inviteID)).String()
}

// newProfile is the profile an invite creates for its invitee: the name,
// the e-mail as a work address, and a RelatedPerson's patient.
func newProfile(req invite.Request) map[string]any {
	p := map[string]any{
		"resourceType": req.ResourceType,
		"name":         []any{map[string]any{"given": []any{req.FirstName}, "family": req.LastName}},
	}
	if req.Email != "" {
		p["telecom"] = []any{map[string]any{"system": "email", "use": "work", "value": req.Email}}
	}
	if req.Patient != "" {
		p["patient"] = map[string]any{"reference": req.Patient}
	}
	return p
}

// profileCreateError is what a create of the profile failing with err
// means for the step: nothing when it exists already (an earlier attempt
// made it), permanent when refused (a retry cannot fix a 4xx), and worth
// a retry otherwise.
func profileCreateError(err error) error {
	var fe *fhir.Error
	switch {
	case err == nil, errors.Is(err, fhir.ErrConflict):
		return nil
	case errors.As(err, &fe) && fe.Status < 500:
		return saga.Permanent(err)
	}
	return fmt.Errorf("create profile: %w", err)
}

// profileByEmail is projects.ProfileByEmail for the saga: several
// matches will not change on a retry.
func (s *Service) profileByEmail(ctx context.Context, project, typ, email string) (string, error) {
	ref, err := projects.ProfileByEmail(ctx, s.repo, project, typ, email)
	if errors.Is(err, fhir.ErrPreconditionFailed) {
		return "", saga.Permanent(err)
	}
	return ref, err
}

// memberOf returns the id of a membership whose profile is ref, or "".
func (s *Service) memberOf(ctx context.Context, project, ref string) (string, error) {
	q, err := search.Parse("ProjectMembership", url.Values{"profile": {ref}, "_count": {"1"}})
	if err != nil {
		return "", err
	}
	page, err := s.repo.Search(ctx, repo.Scope{Project: project}, "ProjectMembership", q)
	if err != nil || len(page.Resources) == 0 {
		return "", err
	}
	return page.Resources[0].ID, nil
}
