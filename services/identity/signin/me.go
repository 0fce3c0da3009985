package signin

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/presign"
	"github.com/pinion-health/pinion/pkg/repo"
)

// me answers GET /auth/me as Medplum does: the profile, cut-down copies of
// the project and membership (no project secrets), the user configuration
// (or the default menu), the caller's access policy as computed for it,
// and for a person's login the user, cut down, and what the app's
// Security page shows: their sessions and memberships in this project.
// Medplum's client calls it right after every sign-in.
func (s *Service) Me(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	p := r.Principal
	if p == nil {
		return nil, fhir.Unauthorized()
	}
	profile, err := s.readRef(ctx, p.Profile)
	if err != nil {
		return nil, err
	}
	project, err := s.readRef(ctx, "Project/"+p.Project)
	if err != nil {
		return nil, err
	}
	membership, err := s.readRef(ctx, "ProjectMembership/"+p.Membership)
	if err != nil {
		return nil, err
	}
	config, err := s.userConfiguration(ctx, project, membership)
	if err != nil {
		return nil, err
	}
	out := map[string]any{
		"profile":    profile,
		"project":    pick(project, meProjectFields...),
		"membership": pick(membership, meMembershipFields...),
		"config":     config,
	}
	if strings.HasPrefix(p.User, "User/") {
		user, err := s.readRef(ctx, p.User)
		if err != nil {
			return nil, err
		}
		out["user"] = pick(user, meUserFields...)
		if out["security"], err = s.security(ctx, p, user); err != nil {
			return nil, err
		}
	}
	// The policy the server holds the caller to, as Medplum's React
	// components read it to decide what to offer for editing.
	policy, err := s.policies.For(ctx, p)
	if err != nil {
		return nil, err
	}
	out["accessPolicy"] = policy.Document()
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	// As Medplum does: the profile's photo (any attachment naming a
	// Binary the caller may read) as a URL the app's <img> can load.
	urls := presign.New(s.cfg.BaseURL, s.repo)
	if b, err = urls.Rewriter(presign.CallerResolver(s.policies, s.repo, p)).Rewrite(ctx, b); err != nil {
		return nil, err
	}
	return &bus.Response{Status: 200, Header: map[string]string{"Content-Type": bus.JSONContentType}, Body: b}, nil
}

// readRef reads the resource a reference names, in any project; nil for a
// reference that names none.
func (s *Service) readRef(ctx context.Context, ref string) (map[string]any, error) {
	typ, id, ok := fhir.SplitReference(ref)
	if !ok {
		return nil, nil
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, typ, id)
	if err != nil {
		return nil, err
	}
	return res.Decode()
}

// The fields of the project and membership /auth/me shows: what Medplum's
// client reads, and no project secrets.
var (
	meProjectFields    = []string{"resourceType", "id", "name", "description", "strictMode", "superAdmin"}
	meMembershipFields = []string{"resourceType", "id", "identifier", "user", "profile", "admin"}
	// The user: who signed in, nothing of their credentials or settings.
	meUserFields = []string{"resourceType", "id", "email", "identifier"}
)

// pick copies only the named fields of a resource.
func pick(m map[string]any, fields ...string) map[string]any {
	out := map[string]any{}
	for _, f := range fields {
		if v, ok := m[f]; ok {
			out[f] = v
		}
	}
	return out
}
