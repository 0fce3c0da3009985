package botexec

import (
	"context"
	"encoding/base64"
	"path"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

// deploy is POST Bot/<id>/$deploy {code, filename}: JavaScript or
// TypeScript, transpiled once to CommonJS and stored as the Binary that
// Bot.executableCode names. A syntax error is 400 with line and column.
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
		return nil, fhir.BadRequest("Missing code", "code")
	}
	if in.Filename == "" {
		in.Filename = "index.ts"
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
	src, err := s.repo.Create(ctx, bsc, binary("text/typescript", in.Code), repo.WriteOptions{Author: r.Principal.Profile})
	if err != nil {
		return nil, err
	}
	exe, err := s.repo.Create(ctx, bsc, binary("application/javascript", js), repo.WriteOptions{Author: r.Principal.Profile})
	if err != nil {
		return nil, err
	}
	b, err := cur.Decode()
	if err != nil {
		return nil, err
	}
	b["sourceCode"] = map[string]any{"contentType": "text/typescript", "title": in.Filename, "url": "Binary/" + src.ID}
	b["executableCode"] = map[string]any{"contentType": "application/javascript", "title": "index.js", "url": "Binary/" + exe.ID}
	if _, err := s.repo.Update(ctx, bsc, b, repo.WriteOptions{Author: r.Principal.Profile}); err != nil {
		return nil, err
	}
	return bus.Outcome(fhir.OK()), nil
}

func binary(contentType, text string) map[string]any {
	return map[string]any{"resourceType": "Binary", "contentType": contentType, "data": base64.StdEncoding.EncodeToString([]byte(text))}
}
