package membership

import (
	"context"
	"encoding/json"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
)

// initProject is Medplum's POST /fhir/R4/Project/$init: Parameters with
// name and, optionally, owner (a User reference) or ownerEmail. It follows
// the rules of POST /admin/Project (super admins only). An ownerEmail with
// no user yet is invited as the project's admin: the saga creates the user
// and e-mails a set-password link.
func (s *Service) initProject(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if err := access.SuperAdmin(r.Principal); err != nil {
		return nil, err
	}
	if !r.IsJSON() {
		return nil, fhir.UnsupportedMediaType()
	}
	project, ownerEmail, err := initParams(r.Body)
	if err != nil {
		return nil, err
	}
	if ownerEmail != "" {
		if uid, err := s.repo.ClaimOwner(ctx, repo.UserEmailKey("", ownerEmail)); err != nil {
			return nil, err
		} else if uid != "" {
			project["owner"] = map[string]any{"reference": "User/" + uid}
			ownerEmail = ""
		}
	}
	created, err := s.newProject(ctx, r.Principal, project)
	if err != nil {
		return nil, err
	}
	if ownerEmail == "" {
		return s.projectCreated(created), nil
	}
	// A new owner: invite them as the project's admin, then name them owner.
	name, _ := project["name"].(string)
	pm, err := s.inviteMember(ctx, r.Principal, created.ID, ownerInvite(name, ownerEmail))
	if err != nil {
		return nil, err
	}
	var m struct {
		User fhir.Reference `json:"user"`
	}
	if err := json.Unmarshal(pm.JSON, &m); err != nil {
		return nil, err
	}
	cur, err := s.repo.Read(ctx, repo.AllProjects, "Project", created.ID)
	if err != nil {
		return nil, err
	}
	p, err := cur.Decode()
	if err != nil {
		return nil, err
	}
	p["owner"] = map[string]any{"reference": m.User.Reference}
	out, err := s.repo.Update(ctx, repo.AllProjects, p, repo.WriteOptions{Author: r.Principal.Profile})
	if err != nil {
		return nil, err
	}
	return s.projectCreated(out), nil
}

// initParams reads $init's Parameters: the project to create, and the
// e-mail of an owner to find or invite ("" when none). Every parameter is
// checked before anything is looked up.
func initParams(body []byte) (map[string]any, string, error) {
	var in struct {
		ResourceType string `json:"resourceType"`
		Parameter    []struct {
			Name           string          `json:"name"`
			ValueString    string          `json:"valueString"`
			ValueReference *fhir.Reference `json:"valueReference"`
		} `json:"parameter"`
	}
	if err := json.Unmarshal(body, &in); err != nil || in.ResourceType != "Parameters" {
		return nil, "", fhir.BadRequest("Expected a Parameters resource", "resourceType")
	}
	project := map[string]any{"resourceType": "Project"}
	ownerEmail := ""
	for _, p := range in.Parameter {
		switch p.Name {
		case "name":
			project["name"] = p.ValueString
		case "owner":
			if p.ValueReference != nil {
				project["owner"] = map[string]any{"reference": p.ValueReference.Reference}
			}
		case "ownerEmail":
			ownerEmail = auth.NormalEmail(p.ValueString)
		default:
			return nil, "", fhir.BadRequest("Unknown parameter: "+p.Name, "parameter")
		}
	}
	if _, ok := project["owner"]; ok && ownerEmail != "" {
		return nil, "", fhir.BadRequest("Give owner or ownerEmail, not both", "parameter")
	}
	return project, ownerEmail, nil
}

// ownerInvite is the invite that makes a new owner the project's admin:
// a Practitioner named after the project, for $init names no person.
func ownerInvite(projectName, email string) map[string]any {
	return map[string]any{
		"resourceType": "Practitioner", "firstName": projectName, "lastName": "Admin", "email": email, "admin": true,
	}
}
