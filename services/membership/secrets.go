package membership

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
)

// setSecrets is POST /admin/projects/:projectId/secrets: an array of
// {name, valueString|valueBoolean|valueDecimal|valueInteger} that replaces
// Project.secret. Bots read them as event.secrets; they are never logged.
func (s *Service) setSecrets(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	projectID := r.Param("projectId")
	if err := access.ProjectAdmin(r.Principal, projectID); err != nil {
		return nil, err
	}
	if !r.IsJSON() {
		return nil, fhir.UnsupportedMediaType()
	}
	var in []map[string]any
	if err := json.Unmarshal(r.Body, &in); err != nil {
		return nil, fhir.BadRequest("Secrets must be an array of {name, value[x]}")
	}
	seen := map[string]bool{}
	secrets := make([]any, 0, len(in))
	for i, sec := range in {
		expr := fmt.Sprintf("[%d]", i)
		name, _ := sec["name"].(string)
		if name == "" {
			return nil, fhir.BadRequest("Secret name is required", expr+".name")
		}
		if seen[name] {
			return nil, fhir.BadRequest("Duplicate secret name: "+name, expr+".name")
		}
		seen[name] = true
		values := 0
		for k := range sec {
			switch k {
			case "name":
			case "valueString", "valueBoolean", "valueDecimal", "valueInteger":
				values++
			default:
				return nil, fhir.BadRequest("Unknown secret field: "+k, expr+"."+k)
			}
		}
		if values != 1 {
			return nil, fhir.BadRequest("A secret has exactly one value", expr)
		}
		secrets = append(secrets, sec)
	}
	cur, err := s.repo.Read(ctx, repo.System, "Project", projectID)
	if err != nil {
		return nil, fhir.NotFound()
	}
	p, err := cur.Decode()
	if err != nil {
		return nil, err
	}
	if len(secrets) == 0 {
		delete(p, "secret")
	} else {
		p["secret"] = secrets
	}
	out, err := s.repo.Update(ctx, repo.System, p, repo.WriteOptions{Author: r.Principal.Profile})
	if err != nil {
		return nil, err
	}
	return bus.FHIR(200, out.JSON), nil
}
