package botexec

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/writerules"
)

// starterCode is the source a new bot starts with.
const starterCode = `import { BotEvent, MedplumClient } from '@medplum/core';

// Runs on $execute: event.input is what the caller sent; what this returns
// is the answer.
export async function handler(medplum: MedplumClient, event: BotEvent): Promise<any> {
  return event.input;
}
`

// createBot is POST /admin/projects/<id>/bot: a Bot from the body's Bot
// fields and, as Medplum does, a membership whose profile is the bot, so it
// acts under its own access policy. Its code comes later, by $deploy.
func (s *Service) createBot(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	// executableCode is what $deploy writes: naming a Binary here would run
	// code that never went through it.
	req, err := projects.ReadAgentRequest(ctx, s.repo, projects.AgentInput{By: r.Principal, ProjectID: r.Param("projectId"), JSON: r.IsJSON(), Body: r.Body},
		"Bot", "Bot", "executableCode")
	if err != nil {
		return nil, err
	}
	res := req.Resource
	if err := checkBotSettings(res); err != nil {
		return nil, err
	}
	// The rules every write of a Bot meets (its schedule), as the FHIR
	// interactions check them.
	if err := writerules.Check(ctx, "Bot", res, writerules.InProject(s.repo, req.Project.ID)); err != nil {
		return nil, err
	}
	// Like Medplum's, a new bot has a TypeScript source to start from, for
	// editors that open Bot.sourceCode.
	var starter *repo.Resource
	if _, ok := res["sourceCode"]; !ok {
		// The bot is checked first, as CreateAgent will check it, so that
		// a bad body writes no starter source either.
		if err := repo.Check(res, false); err != nil {
			return nil, err
		}
		starter, err = s.repo.Create(ctx, repo.Scope{Project: req.Project.ID}, binary("text/typescript", starterCode), repo.WriteOptions{Project: req.Project.ID, Author: r.Principal.Profile})
		if err != nil {
			return nil, err
		}
		res["sourceCode"] = starterSource(starter.ID)
	}
	bot, err := projects.CreateAgent(ctx, s.repo, s.nc, req.Project, projects.Agent{
		Resource: res, ID: uuid.NewString(), Policy: req.Policy, Author: r.Principal.Profile, InvitedBy: r.Principal.User,
	})
	if err != nil {
		if starter != nil {
			_ = s.repo.Delete(context.WithoutCancel(ctx), repo.AllProjects, "Binary", starter.ID)
		}
		return nil, err
	}
	s.forgetIdentifiers()
	resp := bus.FHIR(201, bot.JSON)
	resp.Header["Location"] = s.cfg.BaseURL + "fhir/R4/Bot/" + bot.ID
	return resp, nil
}

// checkBotSettings checks a new bot's runtime and timeout (as decoded,
// numbers as json.Number) and gives it the default runtime when it names
// none.
func checkBotSettings(res map[string]any) error {
	// Every bot runs in Pinion's sandbox; Medplum's two JavaScript runtimes
	// are accepted so its tools work unchanged, the rest is refused.
	switch rt := res["runtimeVersion"]; rt {
	case nil, "":
		res["runtimeVersion"] = "vmcontext"
	case "vmcontext", "awslambda":
	default:
		return fhir.BadRequest("Unsupported bot runtime: Pinion runs bots in its sandbox (vmcontext)", "runtimeVersion")
	}
	if t, ok := res["timeout"]; ok {
		num, _ := t.(json.Number)
		if n, err := num.Int64(); err != nil || n < 1 || n > maxTimeout {
			return fhir.BadRequest("Bot timeout must be between 1 and 900 seconds", "timeout")
		}
	}
	return nil
}

// starterSource is the Bot.sourceCode naming the starter source.
func starterSource(binaryID string) map[string]any {
	return map[string]any{"contentType": "text/typescript", "title": "index.ts", "url": "Binary/" + binaryID}
}
