package membership

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
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
			if len(list) == 0 {
				delete(p, field)
			} else {
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
	return bus.FHIR(200, out.JSON), nil
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

// parseSecrets checks a secrets body: each entry a name, unique, and
// exactly one value of the type its field names. Numbers keep the digits
// they were sent with.
func parseSecrets(body []byte) ([]any, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var in []map[string]any
	// Anything after the array is refused, a stray `]` too (which d.More
	// would let through, and so clear the secrets).
	if err := d.Decode(&in); err != nil {
		return nil, fhir.BadRequest("Secrets must be an array of {name, value[x]}")
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, fhir.BadRequest("Secrets must be an array of {name, value[x]}")
	}
	seen := map[string]bool{}
	secrets := make([]any, 0, len(in))
	for i, sec := range in {
		expr := fmt.Sprintf("[%d]", i)
		name, _ := sec["name"].(string)
		if strings.TrimSpace(name) == "" {
			return nil, fhir.BadRequest("Secret name is required", expr+".name")
		}
		if seen[name] {
			return nil, fhir.BadRequest("Duplicate secret name: "+name, expr+".name")
		}
		seen[name] = true
		values := 0
		// In key order, so that of two bad fields the same one is named each time.
		for _, k := range sortedKeys(sec) {
			if k == "name" {
				continue
			}
			if !validSecretValue(k, sec[k]) {
				if t := secretTypes[k]; t != "" {
					return nil, fhir.BadRequest(k+" must be "+t, expr+"."+k)
				}
				return nil, fhir.BadRequest("Unknown secret field: "+k, expr+"."+k)
			}
			values++
		}
		if values != 1 {
			return nil, fhir.BadRequest("A secret has exactly one value", expr)
		}
		secrets = append(secrets, sec)
	}
	return secrets, nil
}

// secretTypes are the value fields of a ProjectSetting, as described to a
// caller who sent the wrong type.
var secretTypes = map[string]string{
	"valueString": "a string", "valueBoolean": "true or false",
	"valueDecimal": "a number", "valueInteger": "a 32-bit integer",
}

// validSecretValue reports whether v is a value of the ProjectSetting
// field named; false for any other field.
func validSecretValue(field string, v any) bool {
	switch field {
	case "valueString":
		s, ok := v.(string)
		return ok && s != ""
	case "valueBoolean":
		_, ok := v.(bool)
		return ok
	case "valueDecimal":
		_, ok := v.(json.Number)
		return ok
	case "valueInteger":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		_, err := strconv.ParseInt(string(n), 10, 32)
		return err == nil
	}
	return false
}
