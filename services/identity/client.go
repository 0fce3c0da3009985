package identity

import (
	"context"
	"strings"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
)

// createClient is POST /admin/projects/:projectId/client: a new
// ClientApplication with its secret shown this once, and a membership whose
// profile is the client.
func (s *Service) createClient(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	projectID := r.Param("projectId")
	if err := access.ProjectAdmin(r.Principal, projectID); err != nil {
		return nil, err
	}
	var in struct {
		Name         string          `json:"name"`
		Description  string          `json:"description"`
		RedirectURI  string          `json:"redirectUri"`
		AccessPolicy *fhir.Reference `json:"accessPolicy"`
	}
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	if strings.TrimSpace(in.Name) == "" {
		return nil, fhir.BadRequest("Client name is required", "name")
	}
	project, err := projects.Get(ctx, s.repo, projectID)
	if err != nil {
		return nil, err
	}
	if in.AccessPolicy != nil {
		if err := projects.CheckPolicy(ctx, s.repo, projectID, in.AccessPolicy.Reference, "accessPolicy"); err != nil {
			return nil, err
		}
	}
	res := map[string]any{"resourceType": "ClientApplication", "name": in.Name}
	if in.Description != "" {
		res["description"] = in.Description
	}
	if in.RedirectURI != "" {
		res["redirectUri"] = in.RedirectURI
	}
	id := uuid.NewString()
	secret := auth.NewSecret()
	// The digest is stored before the client exists: a client is never
	// visible without its secret.
	if err := s.setClientSecret(ctx, id, secret); err != nil {
		return nil, err
	}
	client, err := s.repo.Create(ctx, repo.Scope{Project: projectID}, res, repo.WriteOptions{ID: id, Project: projectID, Author: r.Principal.Profile})
	if err != nil {
		return nil, err
	}
	if err := projects.AddOwnMembership(ctx, s.repo, s.sessions, project, "ClientApplication/"+id, in.Name, in.AccessPolicy, r.Principal.User); err != nil {
		return nil, err
	}
	out, err := client.Decode()
	if err != nil {
		return nil, err
	}
	out["secret"] = secret // shown this once; only its digest is kept
	resp := bus.JSON(201, out)
	resp.Header["Content-Type"] = bus.FHIRContentType
	return resp, nil
}

// rotateSecret is POST /admin/projects/:projectId/client/:clientId/$rotate-secret:
// a new secret, shown this once; the old one keeps working for a day.
func (s *Service) rotateSecret(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	projectID := r.Param("projectId")
	if err := access.ProjectAdmin(r.Principal, projectID); err != nil {
		return nil, err
	}
	client, err := s.repo.Read(ctx, repo.Scope{Project: projectID}, "ClientApplication", r.Param("clientId"))
	if err != nil {
		return nil, err
	}
	secret, err := s.rotateClientSecret(ctx, client.ID)
	if err != nil {
		return nil, err
	}
	out, err := client.Decode()
	if err != nil {
		return nil, err
	}
	out["secret"] = secret
	resp := bus.JSON(200, out)
	resp.Header["Content-Type"] = bus.FHIRContentType
	return resp, nil
}
