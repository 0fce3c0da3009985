package botexec

import (
	"context"
	"strings"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
)

// createBot is POST /admin/projects/<id>/bot: a Bot and, as Medplum does,
// a membership whose profile is the bot, so it acts under its own access
// policy.
func (s *Service) createBot(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	projectID := r.Param("projectId")
	if err := access.ProjectAdmin(r.Principal, projectID); err != nil {
		return nil, err
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
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	if strings.TrimSpace(in.Name) == "" {
		return nil, fhir.BadRequest("Bot name is required", "name")
	}
	if in.Timeout != nil && (*in.Timeout < 1 || *in.Timeout > maxTimeout) {
		return nil, fhir.BadRequest("Bot timeout must be between 1 and 900 seconds", "timeout")
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
	bot, err := s.repo.Create(ctx, repo.Scope{Project: projectID}, b, repo.WriteOptions{Project: projectID, Author: r.Principal.Profile})
	if err != nil {
		return nil, err
	}
	s.forgetIdentifiers()
	if err := projects.AddOwnMembership(ctx, s.repo, s.sessions, project, "Bot/"+bot.ID, in.Name, in.AccessPolicy, r.Principal.User); err != nil {
		return nil, err
	}
	resp := bus.FHIR(201, bot.JSON)
	resp.Header["Location"] = s.cfg.BaseURL + "fhir/R4/Bot/" + bot.ID
	return resp, nil
}
