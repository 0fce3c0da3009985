package membership

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
)

// createProject is POST /admin/Project (E1 in docs/API.md): super admins
// create projects.
func (s *Service) createProject(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if err := access.SuperAdmin(r.Principal); err != nil {
		return nil, err
	}
	if !r.IsJSON() {
		return nil, fhir.UnsupportedMediaType()
	}
	body, err := fhir.Decode(r.Body)
	if err != nil {
		return nil, err
	}
	p, err := s.newProject(ctx, r.Principal, body)
	if err != nil {
		return nil, err
	}
	return s.projectCreated(p), nil
}

// projectCreated is the 201 answer naming a new project.
func (s *Service) projectCreated(p *repo.Resource) *bus.Response {
	resp := bus.FHIR(201, p.JSON)
	resp.Header["Location"] = s.cfg.BaseURL + "fhir/R4/Project/" + p.ID
	return resp
}

// newProject creates a project (and its owner's admin membership, when it
// names one) for a super admin, from a decoded Project.
func (s *Service) newProject(ctx context.Context, by *bus.Principal, body map[string]any) (*repo.Resource, error) {
	var err error
	if rt, _ := body["resourceType"].(string); rt != "Project" {
		return nil, fhir.BadRequest("Incorrect resource type", "resourceType")
	}
	if name, _ := body["name"].(string); strings.TrimSpace(name) == "" {
		return nil, fhir.BadRequest("Project name is required", "name")
	}
	if _, ok := body["strictMode"]; !ok {
		body["strictMode"] = true
	}
	delete(body, "id")
	delete(body, "meta")

	// The owner, if named, must be a server-scoped User: checked before any write.
	var owner *userInfo
	if o, ok := body["owner"].(map[string]any); ok {
		ref, _ := o["reference"].(string)
		if owner, err = s.ownerUser(ctx, ref); err != nil {
			return nil, err
		}
	} else if _, present := body["owner"]; present {
		return nil, fhir.BadRequest("Invalid owner", "owner")
	}

	id := uuid.NewString()
	// A project belongs to itself: its admins see it through their project scope.
	p, err := s.repo.Create(ctx, repo.AllProjects, body, repo.WriteOptions{ID: id, Project: id, Author: by.Profile, Strict: true})
	if err != nil {
		return nil, err
	}
	if owner != nil {
		if err := s.addOwner(ctx, id, body["name"].(string), owner, by.User); err != nil {
			return nil, err
		}
	}
	return p, nil
}

type userInfo struct {
	Ref       string
	FirstName string `json:"firstName"`
	LastName  string `json:"lastName"`
	Email     string `json:"email"`
	Project   *fhir.Reference
}

func (s *Service) ownerUser(ctx context.Context, ref string) (*userInfo, error) {
	typ, id, ok := fhir.SplitReference(ref)
	if !ok || typ != "User" {
		return nil, fhir.BadRequest("Only Users are permitted to be the owner of a new Project", "owner")
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, "User", id)
	if fhir.Missing(err) {
		return nil, fhir.BadRequest("Owner not found", "owner")
	}
	if err != nil {
		return nil, err
	}
	u := &userInfo{Ref: "User/" + id}
	var raw struct {
		FirstName string          `json:"firstName"`
		LastName  string          `json:"lastName"`
		Email     string          `json:"email"`
		Project   *fhir.Reference `json:"project"`
	}
	if err := json.Unmarshal(res.JSON, &raw); err != nil {
		return nil, err
	}
	if raw.Project != nil {
		return nil, fhir.BadRequest("Project owner must not belong to another Project", "owner")
	}
	u.FirstName, u.LastName, u.Email = raw.FirstName, raw.LastName, raw.Email
	return u, nil
}

// addOwner gives the owner a Practitioner profile and an admin membership.
func (s *Service) addOwner(ctx context.Context, projectID, projectName string, u *userInfo, invitedBy string) error {
	_, err := projects.AddMember(ctx, s.repo, s.nc, projectID, projectName, projects.Person{
		User: u.Ref, FirstName: u.FirstName, LastName: u.LastName, Email: u.Email,
		ProfileType: "Practitioner", Admin: true, InvitedBy: invitedBy,
	})
	return err
}
