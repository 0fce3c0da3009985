package authserver

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
)

// humanName is what OpenID Connect's name claims take from a FHIR HumanName.
type humanName struct {
	Given  []string `json:"given"`
	Family string   `json:"family"`
}

// addClaims sets the name claims (OIDC Core §5.1) from the name.
func (n humanName) addClaims(out map[string]any) {
	given := strings.Join(n.Given, " ")
	out["given_name"] = given
	out["family_name"] = n.Family
	out["name"] = strings.TrimSpace(given + " " + n.Family)
}

// Userinfo is OpenID Connect's UserInfo endpoint (Core §5.3) for the
// token's subject: sub and fhirUser always, the name with the "profile"
// scope, the e-mail with "email".
func (s *Service) Userinfo(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	p := r.Principal
	if p == nil {
		return nil, fhir.Unauthorized()
	}
	_, sub, _ := fhir.SplitReference(p.User)
	out := map[string]any{"sub": sub, "fhirUser": p.Profile}
	if HasScope(p.Scope, "profile") {
		if typ, id, ok := fhir.SplitReference(p.Profile); ok {
			res, err := s.repo.Read(ctx, repo.AllProjects, typ, id)
			if err != nil {
				return nil, err
			}
			var prof struct {
				Name []humanName `json:"name"`
			}
			if err := json.Unmarshal(res.JSON, &prof); err != nil {
				return nil, err
			}
			if len(prof.Name) > 0 {
				prof.Name[0].addClaims(out)
			}
		}
	}
	if HasScope(p.Scope, "email") && strings.HasPrefix(p.User, "User/") {
		res, err := s.repo.Read(ctx, repo.AllProjects, "User", sub)
		if err != nil {
			return nil, err
		}
		var u struct {
			Email string `json:"email"`
		}
		if err := json.Unmarshal(res.JSON, &u); err != nil {
			return nil, err
		}
		if u.Email != "" {
			out["email"] = u.Email
			out["email_verified"] = false // Pinion does not verify addresses
		}
	}
	resp := bus.JSON(200, out)
	resp.Header["Cache-Control"] = "no-store"
	return resp, nil
}
