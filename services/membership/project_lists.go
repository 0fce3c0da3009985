package membership

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
)

// setSecrets is POST /admin/projects/:projectId/secrets: an array of
// {name, valueString|valueBoolean|valueDecimal|valueInteger} that replaces
// Project.secret. Bots read them as event.secrets; they are never logged.
func (s *Service) setSecrets(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.replaceList(ctx, r, "secret", parseSecrets)
}

// setSites is POST /admin/projects/:projectId/sites: an array of Project.site
// entries ({name, domain[], ...}) that replaces the project's sites.
func (s *Service) setSites(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.replaceList(ctx, r, "site", parseSites)
}

// replaceList replaces one list field of the project with the parsed body,
// for the project's admins. A write between the read and this one is not
// lost: repo.Modify writes conditional on the version read, and retries.
func (s *Service) replaceList(ctx context.Context, r *bus.Request, field string, parse func([]byte) ([]any, error)) (*bus.Response, error) {
	projectID := r.Param("projectId")
	if err := access.ProjectAdmin(r.Principal, projectID); err != nil {
		return nil, err
	}
	if !r.IsJSON() {
		return nil, fhir.UnsupportedMediaType()
	}
	list, err := readList(r.Body, parse)
	if err != nil {
		return nil, err
	}
	out, err := s.repo.Modify(ctx, repo.AllProjects, "Project", projectID, repo.WriteOptions{Author: r.Principal.Profile},
		func(cur *repo.Resource) (map[string]any, error) {
			p, err := cur.Decode()
			if err != nil {
				return nil, err
			}
			switch {
			case len(list) == 0:
				delete(p, field)
			case field == "site":
				p[field] = keepSiteSecrets(list, p[field])
			default:
				p[field] = list
			}
			return p, nil
		})
	if errors.Is(err, fhir.ErrGone) {
		err = fhir.NotFound() // a deleted project is no project (projects.Read)
	}
	if err != nil {
		return nil, err
	}
	if r.Principal.SuperAdmin {
		return bus.FHIR(200, out.JSON), nil
	}
	shown, err := withoutSiteSecrets(out.JSON)
	if err != nil {
		return nil, err
	}
	return bus.FHIR(200, shown), nil
}

// readList reads a body that replaces a project's list: only an array
// does, for `null` or an object must not clear the list.
func readList(body []byte, parse func([]byte) ([]any, error)) ([]any, error) {
	if !bytes.HasPrefix(bytes.TrimSpace(body), []byte("[")) {
		return nil, fhir.BadRequest("The body must be a JSON array")
	}
	return parse(body)
}

// parseSites checks a sites body's shape; the fields of each site are
// checked against Project.site when the project is written.
func parseSites(body []byte) ([]any, error) {
	var in []map[string]any
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fhir.BadRequest("Sites must be an array of {name, domain[]}")
	}
	out := make([]any, len(in))
	for i, site := range in {
		out[i] = site
	}
	return out, nil
}

// parseSecrets checks a secrets body (projects.ParseSecrets, which bots'
// own secrets share).
func parseSecrets(body []byte) ([]any, error) { return projects.ParseSecrets(body) }

// validSecretValue reports whether v is a value of the ProjectSetting
// field named.
func validSecretValue(field string, v any) bool { return projects.ValidSecretValue(field, v) }
