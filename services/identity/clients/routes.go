package clients

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/writerules"
)

// Create is POST /admin/projects/:projectId/client: a new
// ClientApplication from the body's ClientApplication fields, with its
// secret, and a membership whose profile is the client.
func (s *Service) Create(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	req, err := projects.ReadAgentRequest(ctx, s.repo, projects.AgentInput{By: r.Principal, ProjectID: r.Param("projectId"), JSON: r.IsJSON(), Body: r.Body},
		"ClientApplication", "Client", "secret", "retiringSecret")
	if err != nil {
		return nil, err
	}
	if err := writerules.Check(ctx, "ClientApplication", req.Resource, writerules.InProject(s.repo, req.Project.ID)); err != nil {
		return nil, err
	}
	client, secret, err := s.CreateClient(ctx, req.Project, projects.Agent{
		Resource: req.Resource, Policy: req.Policy, Author: r.Principal.Profile, InvitedBy: r.Principal.User,
	})
	if err != nil {
		return nil, err
	}
	return clientResponse(201, client, secret)
}

// CreateClient creates a ClientApplication (a.Resource, checked already)
// in project with a new secret and its membership, and returns it with
// that secret; a.ID is chosen here.
func (s *Service) CreateClient(ctx context.Context, project *projects.Info, a projects.Agent) (*repo.Resource, string, error) {
	a.ID = uuid.NewString()
	secret := auth.NewSecret()
	// The digest is stored before the client exists: a client is never
	// visible without its secret.
	if err := s.SetSecret(ctx, a.ID, secret); err != nil {
		return nil, "", err
	}
	client, err := projects.CreateAgent(ctx, s.repo, s.nc, project, a)
	if err != nil {
		s.DropSecret(context.WithoutCancel(ctx), a.ID)
		return nil, "", err
	}
	return client, secret, nil
}

// clientResponse is a ClientApplication with a secret just generated (later
// only the project's admins read it again: pkg/clientsecret).
func clientResponse(status int, client *repo.Resource, secret string) (*bus.Response, error) {
	out, err := client.Decode()
	if err != nil {
		return nil, err
	}
	if secret != "" {
		out["secret"] = secret
	}
	resp := bus.JSON(status, out)
	resp.Header["Content-Type"] = bus.FHIRContentType
	return resp, nil
}

// RotateSecret is POST /admin/projects/:projectId/client/:clientId/$rotate-secret:
// a new secret, shown this once, without the current one (an admin who lost
// it can still recover the client); the old one retires for the grace period.
func (s *Service) RotateSecret(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	projectID := r.Param("projectId")
	if err := access.AdminWrite(r.Principal, projectID, "ClientApplication"); err != nil {
		return nil, err
	}
	client, err := s.repo.Read(ctx, repo.Scope{Project: projectID}, "ClientApplication", r.Param("clientId"))
	if err != nil {
		return nil, err
	}
	defer s.lock(client.ID)()
	cur, err := s.Credentials(ctx, client.ID)
	if err != nil {
		return nil, err
	}
	secret, err := s.Rotate(ctx, client.ID, cur)
	if err != nil {
		return nil, err
	}
	return clientResponse(200, client, secret)
}

// RotateOperation is Medplum's POST /fhir/R4/ClientApplication/:id/$rotate-secret,
// for project admins: a Parameters (or plain JSON) body naming one secret.
// With the current `secret`, the client gets a new one and the current one
// retires (for the grace period, or until retired here); with the
// `retiringSecret`, that one stops working at once. The secret named must
// be the client's: knowing it is what allows the change.
func (s *Service) RotateOperation(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	p := r.Principal
	if err := access.AdminWrite(p, "", "ClientApplication"); err != nil {
		return nil, err
	}
	in, err := operationInput(r, "secret", "retiringSecret")
	if err != nil {
		return nil, err
	}
	current, retiring := in["secret"], in["retiringSecret"]
	switch {
	case current == "" && retiring == "":
		return nil, fhir.BadRequest("Secret to rotate must be provided")
	case current != "" && retiring != "":
		return nil, fhir.BadRequest("Only one secret can be rotated at a time")
	}
	sc := repo.Scope{Project: p.Project}
	if p.SuperAdmin {
		sc = repo.AllProjects
	}
	client, err := s.repo.Read(ctx, sc, "ClientApplication", r.Param("id"))
	if err != nil {
		return nil, err
	}
	// The secret checked is the one replaced: the lock, and the condition
	// in the write, keep another rotation from coming between.
	defer s.lock(client.ID)()
	cred, err := s.Credentials(ctx, client.ID)
	if err != nil {
		return nil, err
	}
	mismatch := fhir.BadRequest("Provided secret does not match client")
	if current != "" {
		if cred == nil || !auth.SecretMatches(cred.Digest, current) {
			return nil, mismatch
		}
		secret, err := s.Rotate(ctx, client.ID, cred)
		if err != nil {
			return nil, err
		}
		return clientResponse(200, client, secret)
	}
	if cred == nil || !cred.RetiringMatches(retiring) {
		return nil, mismatch
	}
	if err := s.retire(ctx, cred); err != nil {
		return nil, err
	}
	return clientResponse(200, client, "")
}

// operationInput reads string input parameters of a FHIR operation from a
// Parameters resource or, as Medplum also accepts, a plain JSON object.
// Parameters other than those named are a 400.
func operationInput(r *bus.Request, names ...string) (map[string]string, error) {
	if !r.IsJSON() {
		return nil, fhir.UnsupportedMediaType()
	}
	body, err := fhir.Decode(r.Body)
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for _, n := range names {
		known[n] = true
	}
	out := map[string]string{}
	set := func(name string, v any, expr string) error {
		if !known[name] {
			return fhir.BadRequest("Unknown parameter: "+name, expr)
		}
		s, ok := v.(string)
		if !ok {
			return fhir.BadRequest("Parameter "+name+" must be a string", expr)
		}
		out[name] = s
		return nil
	}
	if body["resourceType"] != "Parameters" {
		for k, v := range body {
			if err := set(k, v, k); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	var params struct {
		Parameter []struct {
			Name        string `json:"name"`
			ValueString any    `json:"valueString"`
		} `json:"parameter"`
	}
	if err := json.Unmarshal(r.Body, &params); err != nil {
		return nil, fhir.BadRequest("Content could not be parsed")
	}
	for i, p := range params.Parameter {
		if err := set(p.Name, p.ValueString, fmt.Sprintf("Parameters.parameter[%d]", i)); err != nil {
			return nil, err
		}
	}
	return out, nil
}
