package membership

import (
	"context"
	"encoding/json"
	"reflect"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
)

// member reads the membership named in the path, within the project.
func (s *Service) member(ctx context.Context, r *bus.Request) (*repo.Resource, error) {
	projectID := r.Param("projectId")
	if err := access.ProjectAdmin(r.Principal, projectID); err != nil {
		return nil, err
	}
	res, err := s.repo.Read(ctx, repo.Scope{Project: projectID}, "ProjectMembership", r.Param("membershipId"))
	if err != nil {
		return nil, err
	}
	return res, nil
}

func (s *Service) getMember(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	res, err := s.member(ctx, r)
	if err != nil {
		return nil, err
	}
	return bus.FHIR(200, res.JSON), nil
}

// changeableFields are what an admin may change on a membership
// (docs/API.md, "E3 — promote (and update) a member").
var changeableFields = map[string]bool{"admin": true, "accessPolicy": true, "access": true, "active": true, "meta": true}

// updateMember is POST /admin/projects/{projectId}/members/{membershipId}
// with the complete membership: E3's replace form (docs/API.md).
func (s *Service) updateMember(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	cur, err := s.member(ctx, r)
	if err != nil {
		return nil, err
	}
	if !r.IsJSON() {
		return nil, fhir.UnsupportedMediaType()
	}
	next, err := fhir.Decode(r.Body)
	if err != nil {
		return nil, err
	}
	return s.saveMember(ctx, r, cur, next)
}

// patchMember is PATCH /admin/projects/{projectId}/members/{membershipId}
// with a JSON Patch such as replace /admin: E3's patch form (docs/API.md).
func (s *Service) patchMember(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	cur, err := s.member(ctx, r)
	if err != nil {
		return nil, err
	}
	if r.MediaType() != "application/json-patch+json" {
		return nil, fhir.UnsupportedMediaType()
	}
	ops, err := fhir.ParsePatch(r.Body)
	if err != nil {
		return nil, err
	}
	patched, err := fhir.ApplyPatch(ops, cur.JSON)
	if err != nil {
		return nil, err
	}
	next, err := fhir.Decode(patched)
	if err != nil {
		return nil, err
	}
	return s.saveMember(ctx, r, cur, next)
}

// saveMember refuses any change outside changeableFields (naming the
// field), checks the policies, stores, and updates the session bucket so
// the member's next request sees the change.
func (s *Service) saveMember(ctx context.Context, r *bus.Request, cur *repo.Resource, next map[string]any) (*bus.Response, error) {
	old, err := cur.Decode()
	if err != nil {
		return nil, err
	}
	// A form's blank fields are absent, as the write would store them, so
	// they are not read as changes.
	fhir.DropEmpty(next)
	if err := checkMemberChange(old, next); err != nil {
		return nil, err
	}
	if err := s.checkPolicies(ctx, cur.Project, next); err != nil {
		return nil, err
	}
	next["meta"] = old["meta"]
	out, err := s.repo.Update(ctx, repo.Scope{Project: cur.Project}, next, repo.WriteOptions{Author: r.Principal.Profile})
	if err != nil {
		return nil, err
	}
	rev, err := projects.Project(ctx, s.nc, "ProjectMembership", out.ID, out.Project)
	if err != nil {
		return nil, err
	}
	return bus.FHIR(200, out.JSON).WithSession(session.MembershipsBucket, rev), nil
}

// checkMemberChange refuses a change to a membership beyond what an admin
// may change, naming the first such field in alphabetical order, so the
// answer does not depend on map order.
func checkMemberChange(old, next map[string]any) error {
	keys := map[string]any{}
	for k := range old {
		keys[k] = nil
	}
	for k := range next {
		keys[k] = nil
	}
	for _, k := range sortedKeys(keys) {
		if changeableFields[k] {
			continue
		}
		if !reflect.DeepEqual(normalize(old[k]), normalize(next[k])) {
			return fhir.BadRequest("Field "+k+" of a membership cannot be changed here; only admin, accessPolicy, access and active can", k)
		}
	}
	if v, ok := next["admin"]; ok {
		if _, isBool := v.(bool); !isBool {
			return fhir.BadRequest("admin must be a boolean", "admin")
		}
	}
	return nil
}

// normalize makes decoded JSON comparable (numbers as text).
func normalize(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// deleteMember removes a member: the profile stays, the owner cannot be
// removed, and the member's tokens stop working at once.
func (s *Service) deleteMember(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	cur, err := s.member(ctx, r)
	if err != nil {
		return nil, err
	}
	rev, err := s.removeMember(ctx, cur)
	if err != nil {
		return nil, err
	}
	return bus.OK().WithSession(session.MembershipsBucket, rev), nil
}

// removeMember deletes a membership and its claims (and its user, when
// scoped to the project and left without one), and returns the memberships
// bucket revision after which no request gets through with it. The
// admin route and SCIM's DELETE both remove a member this way.
func (s *Service) removeMember(ctx context.Context, cur *repo.Resource) (uint64, error) {
	var m struct {
		User       fhir.Reference `json:"user"`
		ExternalID string         `json:"externalId"`
	}
	if err := json.Unmarshal(cur.JSON, &m); err != nil {
		return 0, err
	}
	pj, err := projects.Get(ctx, s.repo, cur.Project)
	if err != nil {
		return 0, err
	}
	if pj.Owner != nil && pj.Owner.Reference == m.User.Reference {
		return 0, fhir.BadRequest("Cannot delete the owner of the project")
	}
	if err := s.repo.Delete(ctx, repo.Scope{Project: cur.Project}, "ProjectMembership", cur.ID); err != nil {
		return 0, err
	}
	// The answer waits for the entry to go: then no request gets through.
	rev, err := projects.Project(ctx, s.nc, "ProjectMembership", cur.ID, cur.Project)
	if err != nil {
		return 0, err
	}
	if err := s.repo.Release(ctx, repo.MembershipKey(cur.Project, m.User.Reference), cur.ID); err != nil {
		return 0, err
	}
	if m.ExternalID != "" {
		if err := s.repo.Release(ctx, repo.ExternalIDKey(cur.Project, m.ExternalID), cur.ID); err != nil {
			return 0, err
		}
	}
	if err := s.dropOrphanUser(ctx, cur.Project, m.User.Reference); err != nil {
		return 0, err
	}
	return rev, nil
}

// dropOrphanUser deletes a user scoped to this project once it has no
// membership left in it (Medplum's fix for orphan users, PR #8451).
func (s *Service) dropOrphanUser(ctx context.Context, projectID, userRef string) error {
	typ, id, ok := fhir.SplitReference(userRef)
	if !ok || typ != "User" {
		return nil
	}
	u, err := s.repo.Read(ctx, repo.AllProjects, "User", id)
	if err != nil {
		if fhir.Missing(err) {
			return nil
		}
		return err
	}
	if u.Project != projectID {
		return nil
	}
	left, err := s.membershipsOfUser(ctx, projectID, userRef)
	if err != nil || len(left) > 0 {
		return err
	}
	var uj struct {
		Email string `json:"email"`
	}
	_ = json.Unmarshal(u.JSON, &uj)
	if err := s.repo.Delete(ctx, repo.AllProjects, "User", id); err != nil && !fhir.Missing(err) {
		return err
	}
	if uj.Email != "" {
		return s.repo.Release(ctx, repo.UserEmailKey(projectID, uj.Email), id)
	}
	return nil
}

// getProject is GET /admin/projects/:projectId.
func (s *Service) getProject(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	projectID := r.Param("projectId")
	if err := access.ProjectAdmin(r.Principal, projectID); err != nil {
		return nil, err
	}
	res, err := projects.Read(ctx, s.repo, projectID)
	if err != nil {
		return nil, err
	}
	var p struct {
		ID       string `json:"id"`
		Name     string `json:"name"`
		Owner    any    `json:"owner,omitempty"`
		Features any    `json:"features,omitempty"`
		Secret   any    `json:"secret,omitempty"`
		Site     any    `json:"site,omitempty"`
	}
	_ = json.Unmarshal(res.JSON, &p)
	if !r.Principal.SuperAdmin {
		hideSiteSecrets(p.Site) // write-only for admins (site_secrets.go)
	}
	return bus.JSON(200, map[string]any{"project": p}), nil
}
