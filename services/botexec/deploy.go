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
	in, err := readDeployInput(r)
	if err != nil {
		return nil, err
	}
	if in.Code == "" {
		return s.redeploy(ctx, pol, r.Param("id"))
	}
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
	b["executableCode"] = executableCode(in.Filename, exe.ID)
	if _, err := s.repo.Update(ctx, bsc, b, repo.WriteOptions{Author: r.Principal.Profile}); err != nil {
		return nil, err
	}
	return bus.OK(), nil
}

// redeploy is $deploy without code: the bot's executable code must exist.
// It changes nothing, but it is a deploy: who may not deploy the bot is
// told so (only admins, or a policy naming Bot), not told it went well.
func (s *Service) redeploy(ctx context.Context, pol *access.Policy, id string) (*bus.Response, error) {
	cur, err := s.readBot(ctx, pol, id, access.Update)
	if err != nil {
		return nil, err
	}
	b, err := decodeBot(cur.ID, cur.Project, cur.JSON)
	if err != nil {
		return nil, err
	}
	if err := hasCode(&b); err != nil {
		return nil, err
	}
	if _, err := s.program(ctx, &b); err != nil {
		return nil, err
	}
	return bus.OK(), nil
}

// deployInput is $deploy's body.
type deployInput struct {
	// Code is the source to deploy; without it the bot's current code is
	// deployed again.
	Code string `json:"code"`
	// Filename titles the deployed code and tells TypeScript from
	// JavaScript: its base name only, index.js when not given.
	Filename string `json:"filename"`
}

// readDeployInput reads $deploy's JSON body (415 for another type, 400 for
// bad JSON).
func readDeployInput(r *bus.Request) (*deployInput, error) {
	var in deployInput
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	if in.Filename == "" {
		in.Filename = "index.js"
	}
	in.Filename = path.Base(in.Filename)
	return &in, nil
}

// hasCode refuses a redeploy of a bot that has no executable code, in
// Medplum's words (running one says "No executable code").
func hasCode(b *bot) error {
	if b.Code.URL == "" {
		return fhir.BadRequest("Bot missing executable code")
	}
	return nil
}

// executableCode is the Bot.executableCode that names deployed JavaScript.
func executableCode(filename, binaryID string) map[string]any {
	return map[string]any{"contentType": "application/javascript", "title": filename, "url": "Binary/" + binaryID}
}

// binary is a Binary resource holding text.
func binary(contentType, text string) map[string]any {
	return map[string]any{"resourceType": "Binary", "contentType": contentType, "data": base64.StdEncoding.EncodeToString([]byte(text))}
}
