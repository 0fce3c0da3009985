package identity

import (
	"context"
	"encoding/json"
	"errors"
	"mime"
	"strings"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
)

// createClient is POST /admin/projects/:projectId/client: a new
// ClientApplication with its secret shown this once, and a membership whose
// profile is the client.
func (s *Service) createClient(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	projectID := r.Param("projectId")
	if err := access.ProjectAdmin(r.Principal, projectID); err != nil {
		return nil, err
	}
	mt, _, _ := mime.ParseMediaType(r.Get("Content-Type"))
	if mt != "application/json" && mt != "application/fhir+json" {
		return nil, fhir.UnsupportedMediaType()
	}
	var in struct {
		Name         string          `json:"name"`
		Description  string          `json:"description"`
		RedirectURI  string          `json:"redirectUri"`
		AccessPolicy *fhir.Reference `json:"accessPolicy"`
	}
	if err := json.Unmarshal(r.Body, &in); err != nil {
		return nil, fhir.BadRequest("Content could not be parsed")
	}
	if strings.TrimSpace(in.Name) == "" {
		return nil, fhir.BadRequest("Client name is required", "name")
	}
	project, err := s.repo.Read(ctx, repo.System, "Project", projectID)
	if err != nil {
		var fe *fhir.Error
		if errors.As(err, &fe) && fe.Status < 500 {
			return nil, fhir.NotFound()
		}
		return nil, err
	}
	var pj struct {
		Name       string `json:"name"`
		SuperAdmin bool   `json:"superAdmin"`
	}
	_ = json.Unmarshal(project.JSON, &pj)
	sc := repo.Scope{Project: projectID}
	if in.AccessPolicy != nil {
		typ, id, ok := fhir.SplitReference(in.AccessPolicy.Reference)
		if !ok || typ != "AccessPolicy" {
			return nil, fhir.BadRequest("Invalid access policy", "accessPolicy")
		}
		if _, err := s.repo.Read(ctx, sc, "AccessPolicy", id); err != nil {
			return nil, fhir.BadRequest("Access policy "+in.AccessPolicy.Reference+" does not exist", "accessPolicy")
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
	client, err := s.repo.Create(ctx, sc, res, repo.WriteOptions{ID: id, Project: projectID, Author: r.Principal.Profile})
	if err != nil {
		return nil, err
	}
	ref := "ClientApplication/" + id
	m := map[string]any{
		"resourceType": "ProjectMembership",
		"project":      map[string]any{"reference": "Project/" + projectID, "display": pj.Name},
		"user":         map[string]any{"reference": ref, "display": in.Name},
		"profile":      map[string]any{"reference": ref, "display": in.Name},
	}
	if in.AccessPolicy != nil {
		m["accessPolicy"] = map[string]any{"reference": in.AccessPolicy.Reference}
	}
	if r.Principal.User != "" {
		m["invitedBy"] = map[string]any{"reference": r.Principal.User}
	}
	pm, err := s.repo.Create(ctx, sc, m, repo.WriteOptions{Project: projectID})
	if err != nil {
		return nil, err
	}
	if _, err := s.sessions.PutMembership(ctx, pm.ID, session.Membership{
		Project: projectID, User: ref, Profile: ref, SuperAdmin: pj.SuperAdmin, Active: true,
		AccessPolicy: in.AccessPolicy != nil,
	}); err != nil {
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
