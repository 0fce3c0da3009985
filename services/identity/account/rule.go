package account

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
)

// A person's own security state — their password, second factors (the
// authenticator, its recovery codes, passkeys), external links and
// account-wide requirements — belongs to the person. It changes only by:
//
//   - the person, through a sign-in of their own (OwnerOf): a sign-in a
//     project's identity provider vouched for is that project's word, not
//     the person's, and counts only where that project holds the account;
//   - a super admin (AdminOver);
//   - an admin of a project that holds every membership of the person (a
//     project-scoped user is always such a case): an admin of one project
//     among several cannot reach into the others (AdminOver).
//
// A project's requirements (mfaRequired on a membership or in its
// settings, requireExternalSignIn) apply when signing in to that project,
// at the one gate every sign-in passes (checkSignIn), and nowhere else.
// Every route that changes such state asks OwnerOf or AdminOver; the
// table test of who may do what is TestAccountBelongsToThePerson.

// notTheAccountsOwner refuses a change of someone's own security state by
// a caller the rule above does not allow.
func notTheAccountsOwner() error {
	return fhir.ForbiddenText("Only the person, a super admin, or an admin of a project that holds all of the person's Memberships may change the person's sign-in security")
}

// providerSignIn refuses a change of the person's own security state
// through a sign-in a project's identity provider vouched for.
func providerSignIn() error {
	return fhir.ForbiddenText("A sign-in through a project's identity provider cannot change the account's security: sign in with your password")
}

// maxHeldMemberships bounds the Memberships read to decide whether one
// project holds an account; a person with more is held by none.
const maxHeldMemberships = 100

// HoldsAccount reports whether project holds the whole account of user
// (an id): a user scoped to the project, or a server-wide one whose every
// membership, active or not, is in it (an inactive one may be made active
// again by its own project's admins).
func (s *Service) HoldsAccount(ctx context.Context, project, user string) (bool, error) {
	if project == "" {
		return false, nil
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, "User", user)
	if fhir.Missing(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var u struct {
		Project *fhir.Reference `json:"project"`
	}
	if err := json.Unmarshal(res.JSON, &u); err != nil {
		return false, err
	}
	if u.Project != nil {
		return u.Project.Reference == "Project/"+project, nil
	}
	q, err := search.Parse("ProjectMembership", url.Values{"user": {"User/" + user}, "_count": {"100"}})
	if err != nil {
		return false, err
	}
	page, err := s.repo.Search(ctx, repo.AllProjects, "ProjectMembership", q)
	if err != nil {
		return false, err
	}
	if len(page.Resources) >= maxHeldMemberships {
		return false, nil
	}
	for _, m := range page.Resources {
		if m.Project != project {
			return false, nil
		}
	}
	return true, nil
}

// OwnerOf is the user id of a person acting on their own account with
// their token: 401 without one, 403 for a client or bot, and 403 for a
// token from a sign-in a project's identity provider vouched for, unless
// that project holds the whole account.
func (s *Service) OwnerOf(ctx context.Context, r *bus.Request) (string, error) {
	uid, err := SignedInUser(r)
	if err != nil {
		return "", err
	}
	l, err := s.sessions.GetLogin(ctx, r.Principal.LoginID)
	if errors.Is(err, session.ErrNotFound) {
		return "", fhir.Unauthorized()
	}
	if err != nil {
		return "", err
	}
	if err := s.ProviderMayChange(ctx, l.ProviderProject, uid); err != nil {
		return "", err
	}
	return uid, nil
}

// ProviderMayChange refuses a change of user's own state by a sign-in that
// the identity provider of providerProject vouched for, unless that
// project holds the account; a sign-in no project's provider vouched for
// passes.
func (s *Service) ProviderMayChange(ctx context.Context, providerProject, user string) error {
	if providerProject == "" {
		return nil
	}
	held, err := s.HoldsAccount(ctx, providerProject, user)
	if err != nil {
		return err
	}
	if !held {
		return providerSignIn()
	}
	return nil
}

// AdminOver refuses an admin's change of another person's own security
// state unless actor is a super admin or an admin of a project that holds
// the whole account. The caller has checked that actor administers the
// project the request names.
func (s *Service) AdminOver(ctx context.Context, actor *bus.Principal, user string) error {
	if actor == nil {
		return fhir.Unauthorized()
	}
	if actor.SuperAdmin {
		return nil
	}
	if !actor.Admin {
		return notTheAccountsOwner()
	}
	held, err := s.HoldsAccount(ctx, actor.Project, user)
	if err != nil {
		return err
	}
	if !held {
		return notTheAccountsOwner()
	}
	return nil
}

// superSetPasswordRequest is POST /admin/super/setpassword's body
// (Medplum's): the address of the user, their project for a
// project-scoped one, and the new password.
type superSetPasswordRequest struct {
	Email     string `json:"email"`
	Password  string `json:"password"`
	ProjectID string `json:"projectId"`
}

// SuperSetPassword is POST /admin/super/setpassword, Medplum's: a super
// admin sets a person's password (the one caller besides the person who
// may; a project's admins give a password only to a person their invite
// creates). As after a set-password link, every sign-in of the person
// ends, and the new password meets the rules a person's own does.
func (s *Service) SuperSetPassword(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if r.Principal == nil || !r.Principal.SuperAdmin {
		return nil, fhir.Forbidden()
	}
	var in superSetPasswordRequest
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	email, ok := FormEmail(in.Email)
	var issues []fhir.Issue
	if !ok || !ValidEmail(email) {
		issues = append(issues, fhir.FieldIssue("email", "Valid email address is required"))
	}
	switch {
	case TooShort(in.Password):
		issues = append(issues, fhir.FieldIssue("password", ShortPasswordText))
	case TooLong(in.Password):
		issues = append(issues, fhir.FieldIssue("password", PasswordLengthText))
	case s.PasswordBreached(ctx, in.Password):
		issues = append(issues, fhir.FieldIssue("password", auth.BreachedText))
	}
	if len(issues) > 0 {
		return nil, fhir.Invalid(issues...)
	}
	userID, err := s.UserByEmail(ctx, email, in.ProjectID)
	if err != nil {
		return nil, err
	}
	if userID == "" {
		return nil, fhir.BadRequest("User not found")
	}
	hash, err := auth.HashPassword(ctx, in.Password)
	if err != nil {
		return nil, err
	}
	if err := s.SetPasswordHash(ctx, userID, hash); err != nil {
		return nil, err
	}
	rev, err := s.sessions.EndSessions(ctx, "User/"+userID)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "password set by a super admin", "user", userID, "by", r.Principal.Profile)
	return bus.OK().WithSession(session.EndedBucket, rev), nil
}
