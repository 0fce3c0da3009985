package botexec

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"path"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

// deploy is POST Bot/<id>/$deploy {code, filename}, as Medplum's
// deploy.ts: the code (JavaScript or TypeScript, transpiled here once to
// CommonJS; a syntax error is 400 with line and column) becomes the Binary
// that Bot.executableCode names, titled with the filename sent. The bot's
// sourceCode, which `medplum bot save` writes, is left alone. Without code
// the bot's current executable code is deployed again, which for Pinion's
// sandbox means checking it is there.
func (s *Service) deploy(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	pol, err := s.policies.For(ctx, r.Principal)
	if err != nil {
		return nil, err
	}
	var in struct {
		Code     string `json:"code"`
		Filename string `json:"filename"`
	}
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	if in.Code == "" {
		return s.redeploy(ctx, pol, r.Param("id"))
	}
	if in.Filename == "" {
		in.Filename = "index.js"
	}
	in.Filename = path.Base(in.Filename)
	// Deploying updates the bot: the same check as a FHIR update of it.
	cur, err := s.readBot(ctx, pol, r.Param("id"), access.Update)
	if err != nil {
		return nil, err
	}
	// Nesting is checked here, cheaply; whatever else would take the
	// compiler down takes down only the worker it runs in.
	if err := sandbox.CheckNesting(in.Code, in.Filename); err != nil {
		return nil, err
	}
	js, err := s.pool.Compile(ctx, "Bot/"+cur.ID, "", in.Code, in.Filename)
	if err != nil {
		return nil, err
	}
	bsc := repo.Scope{Project: cur.Project}
	exe, err := s.repo.Create(ctx, bsc, binary("application/javascript", js), repo.WriteOptions{Author: r.Principal.Profile})
	if err != nil {
		return nil, err
	}
	b, err := cur.Decode()
	if err != nil {
		return nil, err
	}
	b["executableCode"] = map[string]any{"contentType": "application/javascript", "title": in.Filename, "url": "Binary/" + exe.ID}
	if _, err := s.repo.Update(ctx, bsc, b, repo.WriteOptions{Author: r.Principal.Profile}); err != nil {
		return nil, err
	}
	return bus.Outcome(fhir.OK()), nil
}

// redeploy is $deploy without code: the bot's executable code must exist.
func (s *Service) redeploy(ctx context.Context, pol *access.Policy, id string) (*bus.Response, error) {
	cur, err := s.readBot(ctx, pol, id, access.Read)
	if err != nil {
		return nil, err
	}
	var b bot
	if err := json.Unmarshal(cur.JSON, &b); err != nil {
		return nil, err
	}
	b.ID, b.Project = cur.ID, cur.Project
	if b.Code.URL == "" {
		return nil, fhir.BadRequest("Bot missing executable code")
	}
	if _, err := s.program(ctx, &b); err != nil {
		return nil, err
	}
	return bus.Outcome(fhir.OK()), nil
}

func binary(contentType, text string) map[string]any {
	return map[string]any{"resourceType": "Binary", "contentType": contentType, "data": base64.StdEncoding.EncodeToString([]byte(text))}
}
