package botexec

import (
	"bytes"
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
// (the web app's Deploy posts no body at all) the code the bot's
// executableCode names is deployed: Medplum's editor saves it first.
func (s *Service) deploy(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	pol, err := s.policies.For(ctx, r.Principal)
	if err != nil {
		return nil, err
	}
	in, err := readDeployInput(r)
	if err != nil {
		return nil, err
	}
	// Deploying updates the bot: the same check as a FHIR update of it.
	cur, err := s.readBot(ctx, pol, r.Param("id"), access.Update)
	if err != nil {
		return nil, err
	}
	if in.Code == "" {
		if in, err = s.savedCode(ctx, pol, cur); err != nil {
			return nil, err
		}
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

// savedCode is what a $deploy without code deploys: the Binary the bot's
// executableCode names, read as the caller reads it, as Medplum's
// deployBot reads it (a super admin's editor saves it in the super admin's
// own project; the deploy then copies it into the bot's). It is compiled
// like code sent inline, under the attachment's title, because what an
// editor saves need not be the CommonJS the sandbox runs (an ES module, or
// TypeScript).
func (s *Service) savedCode(ctx context.Context, pol *access.Policy, cur *repo.Resource) (*deployInput, error) {
	var b struct {
		Code struct {
			URL   string `json:"url"`
			Title string `json:"title"`
		} `json:"executableCode"`
	}
	if err := json.Unmarshal(cur.JSON, &b); err != nil {
		return nil, err
	}
	if b.Code.URL == "" {
		return nil, fhir.BadRequest("Bot missing executable code")
	}
	id, err := codeBinary(s.cfg.BaseURL, b.Code.URL)
	if err != nil {
		return nil, err
	}
	bin, err := pol.Gate(s.repo, "Binary", id).Read(ctx, id)
	if fhir.Missing(err) {
		return nil, fhir.BadRequest("Bot missing executable code")
	}
	if err != nil {
		return nil, err
	}
	code, err := programSource(bin.JSON)
	if err != nil {
		return nil, err
	}
	if code == "" {
		return nil, fhir.BadRequest("Bot missing executable code")
	}
	return &deployInput{Code: code, Filename: deployFilename(b.Code.Title)}, nil
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
// bad JSON). No body at all, of whatever type, is a deploy without code:
// Medplum's web app posts nothing, and Medplum reads that as {}.
func readDeployInput(r *bus.Request) (*deployInput, error) {
	var in deployInput
	if len(bytes.TrimSpace(r.Body)) > 0 {
		if err := r.DecodeJSON(&in); err != nil {
			return nil, err
		}
	}
	in.Filename = deployFilename(in.Filename)
	return &in, nil
}

// deployFilename is the base name that titles deployed code, index.js when
// none is given.
func deployFilename(name string) string {
	if name == "" {
		return "index.js"
	}
	return path.Base(name)
}

// executableCode is the Bot.executableCode that names deployed JavaScript.
func executableCode(filename, binaryID string) map[string]any {
	return map[string]any{"contentType": "application/javascript", "title": filename, "url": "Binary/" + binaryID}
}

// binary is a Binary resource holding text.
func binary(contentType, text string) map[string]any {
	return map[string]any{"resourceType": "Binary", "contentType": contentType, "data": base64.StdEncoding.EncodeToString([]byte(text))}
}
