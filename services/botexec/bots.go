package botexec

import (
	"context"
	"encoding/json"
	"errors"
	"mime"
	"strings"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
)

// createBot is POST /admin/projects/<id>/bot: a Bot and, as Medplum does,
// a membership whose profile is the bot, so it acts under its own access
// policy.
func (s *Service) createBot(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	projectID := r.Param("projectId")
	if err := access.ProjectAdmin(r.Principal, projectID); err != nil {
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(r.Get("Content-Type")); mt != "application/json" && mt != "application/fhir+json" {
		return nil, fhir.UnsupportedMediaType()
	}
	var in struct {
		Name           string           `json:"name"`
		Description    string           `json:"description"`
		Identifier     []map[string]any `json:"identifier"`
		RuntimeVersion string           `json:"runtimeVersion"`
		Timeout        *int             `json:"timeout"`
		RunAsUser      bool             `json:"runAsUser"`
		AccessPolicy   *fhir.Reference  `json:"accessPolicy"`
	}
	if err := json.Unmarshal(r.Body, &in); err != nil {
		return nil, fhir.BadRequest("Content could not be parsed")
	}
	if strings.TrimSpace(in.Name) == "" {
		return nil, fhir.BadRequest("Bot name is required", "name")
	}
	if in.Timeout != nil && (*in.Timeout < 1 || *in.Timeout > maxTimeout) {
		return nil, fhir.BadRequest("Bot timeout must be between 1 and 900 seconds", "timeout")
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
	b := map[string]any{"resourceType": "Bot", "name": in.Name, "runtimeVersion": "vmcontext"}
	if in.Description != "" {
		b["description"] = in.Description
	}
	if len(in.Identifier) > 0 {
		ids := make([]any, len(in.Identifier))
		for i, x := range in.Identifier {
			ids[i] = x
		}
		b["identifier"] = ids
	}
	if in.Timeout != nil {
		b["timeout"] = *in.Timeout
	}
	if in.RunAsUser {
		b["runAsUser"] = true
	}
	bot, err := s.repo.Create(ctx, sc, b, repo.WriteOptions{Project: projectID, Author: r.Principal.Profile})
	if err != nil {
		return nil, err
	}
	ref := "Bot/" + bot.ID
	m := map[string]any{
		"resourceType": "ProjectMembership",
		"project":      map[string]any{"reference": "Project/" + projectID, "display": pj.Name},
		"user":         map[string]any{"reference": ref, "display": in.Name},
		"profile":      map[string]any{"reference": ref, "display": in.Name},
		"admin":        false,
	}
	if in.AccessPolicy != nil {
		m["accessPolicy"] = map[string]any{"reference": in.AccessPolicy.Reference}
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
	resp := bus.FHIR(201, bot.JSON)
	resp.Header["Location"] = s.cfg.BaseURL + "fhir/R4/Bot/" + bot.ID
	return resp, nil
}
