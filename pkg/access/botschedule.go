package access

import (
	"context"
	"encoding/json"

	"github.com/pinion-health/pinion/pkg/botcron"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
)

// CheckBotSchedule refuses a Bot with a schedule (cronString or
// cronTiming) in a project whose features do not include cron and bots:
// Medplum keeps such a schedule and never runs it; here the writer is told.
func CheckBotSchedule(ctx context.Context, r *repo.Repo, project string, res map[string]any) error {
	if !botcron.Has(res) {
		return nil
	}
	features, err := ProjectFeatures(ctx, r, project)
	if err != nil {
		return err
	}
	if !botcron.Enabled(features) {
		return fhir.BadRequest("Bot.cronString and Bot.cronTiming need the project's features to include cron and bots", "cronString")
	}
	return nil
}

// ProjectFeatures is Project.features ("" or a missing project: none).
func ProjectFeatures(ctx context.Context, r *repo.Repo, project string) ([]string, error) {
	if project == "" {
		return nil, nil
	}
	p, err := r.Read(ctx, repo.AllProjects, "Project", project)
	if fhir.Missing(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var v struct {
		Features []string `json:"features"`
	}
	if err := json.Unmarshal(p.JSON, &v); err != nil {
		return nil, err
	}
	return v.Features, nil
}

// botProject is the project a Bot written through the gate is in: the
// current version's (an update), else the caller's, else (a super admin)
// the one its meta names.
func (g *Gate) botProject(ctx context.Context, res map[string]any) (string, error) {
	if id, ok := res["id"].(string); ok && id != "" {
		cur, err := g.repo.Read(ctx, repo.AllProjects, "Bot", id)
		if err == nil {
			return cur.Project, nil
		}
		if !fhir.Missing(err) {
			return "", err
		}
	}
	if p := g.Project(); p != "" {
		return p, nil
	}
	if m, ok := res["meta"].(map[string]any); ok {
		if p, ok := m["project"].(string); ok && p != "" {
			return p, nil
		}
	}
	return g.policy.project, nil
}

func (g *Gate) checkBotSchedule(ctx context.Context, res map[string]any) error {
	if g.typ != "Bot" || !botcron.Has(res) {
		return nil
	}
	project, err := g.botProject(ctx, res)
	if err != nil {
		return err
	}
	return CheckBotSchedule(ctx, g.repo, project, res)
}
