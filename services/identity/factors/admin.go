package factors

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/services/identity/account"
)

// Reset is POST /admin/projects/:projectId/members/:membershipId/$reset-mfa:
// a project's admin (or a super admin) removes a member's authenticator
// and passkeys when a device is lost; a project's admin only when the
// project holds every membership of the person (adminOver). The member enrols again at their next sign-in
// (where MFA is required) or from their account; the project's audit
// trail records who reset whose factor.
func (s *Service) Reset(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	projectID, membershipID := r.Param("projectId"), r.Param("membershipId")
	if err := access.ProjectAdmin(r.Principal, projectID); err != nil {
		return nil, err
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, "ProjectMembership", membershipID)
	if err != nil {
		return nil, err
	}
	if res.Project != projectID {
		return nil, fhir.NotFound()
	}
	var m struct {
		User *fhir.Reference `json:"user"`
	}
	if err := json.Unmarshal(res.JSON, &m); err != nil {
		return nil, err
	}
	if m.User == nil || !strings.HasPrefix(m.User.Reference, "User/") {
		return nil, fhir.BadRequest("Only a user's membership has MFA")
	}
	uid := account.UserIDOf(m.User.Reference)
	// Factors are the person's, across every project: an admin of one
	// project among several cannot wipe them.
	if err := s.accounts.AdminOver(ctx, r.Principal, uid); err != nil {
		return nil, err
	}
	if _, err := s.Update(ctx, uid, func(rec *Record) error {
		// A new secret: the lost device's never works again.
		rec.Enrolled, rec.Secret, rec.LastStep, rec.Recovery = false, newTOTPSecret(), 0, nil
		return nil
	}); err != nil {
		return nil, err
	}
	// The passkeys go too: the lost device may hold one.
	if _, err := s.UpdatePasskeys(ctx, uid, func(rec *PasskeyRecord) error {
		rec.Keys = nil
		return nil
	}); err != nil {
		return nil, err
	}
	if err := s.audit.Record(ctx, audit.Event{Kind: audit.MFAReset.Name, Project: projectID, Who: r.Principal.Profile,
		Address: r.Remote, Entities: []audit.Entity{{What: "ProjectMembership/" + membershipID}, {What: m.User.Reference}}}); err != nil {
		return nil, err
	}
	s.log.Info("mfa reset", "user", uid, "membership", membershipID, "by", r.Principal.Profile)
	return bus.OK(), nil
}

// maxOverview bounds the memberships one overview reads (a console page
// shows 50).
const maxOverview = 100

// Overview is GET /admin/projects/:projectId/mfa?membership=<id>,<id>:
// the project's admins see, for each membership named, whether its user
// has an authenticator enrolled and how many passkeys, never the factors
// themselves: {members: [{membership, user, enrolled, passkeys}]}.
// Memberships of other projects, and those of clients and bots, are left
// out.
func (s *Service) Overview(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	projectID := r.Param("projectId")
	if err := access.ProjectAdmin(r.Principal, projectID); err != nil {
		return nil, err
	}
	var ids []string
	for _, v := range r.Query["membership"] {
		ids = append(ids, strings.Split(v, ",")...)
	}
	if len(ids) > maxOverview {
		return nil, fhir.Invalid(fhir.FieldIssue("membership", "At most 100 memberships at once"))
	}
	type state struct {
		Membership string `json:"membership"`
		User       string `json:"user"`
		Enrolled   bool   `json:"enrolled"`
		Passkeys   int    `json:"passkeys"`
	}
	out := []state{}
	for _, id := range ids {
		if id == "" || len(id) > 64 {
			continue
		}
		res, err := s.repo.Read(ctx, repo.AllProjects, "ProjectMembership", id)
		if fhir.Missing(err) || errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var m struct {
			User *fhir.Reference `json:"user"`
		}
		if res.Project != projectID || json.Unmarshal(res.JSON, &m) != nil || m.User == nil || !strings.HasPrefix(m.User.Reference, "User/") {
			continue
		}
		uid := account.UserIDOf(m.User.Reference)
		rec, _, err := s.Load(ctx, uid)
		if err != nil {
			return nil, err
		}
		n, err := s.PasskeyCount(ctx, uid)
		if err != nil {
			return nil, err
		}
		out = append(out, state{Membership: id, User: m.User.Reference, Enrolled: rec.Enrolled, Passkeys: n})
	}
	return NoStore(bus.JSON(200, map[string]any{"members": out})), nil
}
