package account

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/mail"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/store"
)

// consumeInviteSteps runs identity's steps of the invite saga (the user,
// and the e-mail) until the returned stop.
func (s *Service) consumeInviteSteps(ctx context.Context) (stop func(), err error) {
	stopUser, err := s.invites.Run(ctx, invite.StepUser, s.InviteUser, s.log)
	if err != nil {
		return nil, err
	}
	stopEmail, err := s.invites.Run(ctx, invite.StepEmail, s.InviteEmail, s.log)
	if err != nil {
		stopUser()
		return nil, err
	}
	return func() { stopUser(); stopEmail() }, nil
}

// InviteUser is the saga's first step: find the invitee's User or create
// it. Ids derive from the invite id, so a redelivered step finds its own
// earlier work instead of doing it twice.
func (s *Service) InviteUser(ctx context.Context, data []byte) error {
	_, rec, pending, err := s.invites.Load(ctx, data)
	if err != nil || !pending {
		return err
	}
	req := rec.Request
	if rec.Steps[invite.StepUser].State == "done" {
		return s.invites.Advance(ctx, rec, invite.StepUser)
	}
	scope := ""
	if req.ProjectScoped {
		scope = req.ProjectID
	}
	candidate := uuid.NewSHA1(IDNamespace, []byte("invite-user:"+rec.ID)).String()
	userID, isNew := candidate, true
	if req.Email != "" {
		// An existing user with this e-mail in this scope is reused.
		owner, err := s.repo.ClaimOwner(ctx, repo.UserEmailKey(scope, req.Email))
		if err != nil {
			return err
		}
		if owner != "" && owner != candidate {
			userID, isNew = owner, false
		}
	}
	if isNew {
		if err := s.CreateUser(ctx, candidate, scope, req); err != nil {
			return err
		}
		if req.Email != "" {
			// Claimed after the create, so that a claim never names a user
			// that does not exist (sign-in and later invites trust it). The
			// claim decides a race between two invites of one person: the
			// loser drops the user it made and reuses the winner's.
			owner, err := s.repo.Claim(ctx, repo.UserEmailKey(scope, req.Email), candidate)
			if err != nil {
				return err
			}
			if owner != candidate {
				if err := s.repo.Delete(ctx, repo.AllProjects, "User", candidate); err != nil && !fhir.Missing(err) {
					return err
				}
				userID, isNew = owner, false
			}
		}
	}
	// An invite's mfaRequired is its project's, written on the membership
	// it makes (membership's step), never on the person's account.
	if _, err := s.invites.Save(ctx, rec, func(r *invite.Record) error {
		r.UserID, r.NewUser = userID, isNew
		invite.MarkStep(r, invite.StepUser, "done", "")
		return nil
	}); err != nil {
		return err
	}
	return s.invites.Advance(ctx, rec, invite.StepUser)
}

// InviteEmail is the saga's last step, once the membership is made: queue
// the invitation e-mail, with a link that sets a new user's password, and
// announce the end of the invite. The link is made here, by the service
// that keeps passwords, so it passes through no other step, and only for an
// invite that succeeded.
func (s *Service) InviteEmail(ctx context.Context, data []byte) error {
	_, rec, _, err := s.invites.Load(ctx, data)
	if err != nil {
		return err
	}
	// Queued and sent already (a redelivery), or nothing to send.
	if rec.Status != "done" || rec.Steps[invite.StepEmail].State != "pending" {
		return nil
	}
	link := ""
	if rec.NewUser {
		if _, link, err = s.NewPasswordRequest(ctx, rec.UserID, "invite", rec.ID); err != nil {
			return err
		}
	}
	if err := mail.Queue(ctx, s.js, mail.Invitation(rec, link, s.cfg.BaseURL)); err != nil {
		return err
	}
	return s.invites.Advance(ctx, rec, invite.StepEmail)
}

// CreateUser stores a User with a fixed id; an earlier attempt's user counts.
func (s *Service) CreateUser(ctx context.Context, id, project string, req invite.Request) error {
	u, err := resource.Map(resource.NewUser(project, req.FirstName, req.LastName, req.Email))
	if err != nil {
		return err
	}
	_, err = s.repo.Create(ctx, repo.AllProjects, u, repo.WriteOptions{ID: id, Project: project})
	if errors.Is(err, fhir.ErrConflict) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("create user: %w", err)
	}
	if req.PasswordHash != "" {
		return s.SetPasswordHash(ctx, id, req.PasswordHash)
	}
	return nil
}

// passwordDoc is a user's password hash, kept beside the other secrets.
type passwordDoc struct {
	Hash string `json:"hash"`
}

func (s *Service) SetPasswordHash(ctx context.Context, userID, hash string) error {
	return s.secrets.Save(ctx, "User/"+userID, passwordDoc{Hash: hash})
}

func (s *Service) PasswordHash(ctx context.Context, userID string) (string, error) {
	var d passwordDoc
	_, _, err := s.secrets.Load(ctx, "User/"+userID, &d)
	return d.Hash, err
}

// passwordRequest is a one-time, expiring secret to set a password with.
type passwordRequest struct {
	ID      string    `json:"id"`
	User    string    `json:"user"`
	Type    string    `json:"type"` // invite or reset
	Digest  string    `json:"digest"`
	Expires time.Time `json:"expires"`
	Used    bool      `json:"used"`
}

// latestRequestKey holds the id of a user's newest password request: it
// works, and an older link, perhaps in a mailbox someone else reads, is
// spent once a newer one is sent; except the invitation's.
func latestRequestKey(userID string) string { return "pwreq-latest:" + userID }

// inviteRequestKey holds the id of a user's pending invitation link. It
// stays good beside newer (reset) links until one of them is used or it
// expires: anyone may ask for a reset of an invited address, and that must
// not spend the invitation.
func inviteRequestKey(userID string) string { return "pwreq-invite:" + userID }

// passwordRequestTTL is how long a set-password link stays good.
const passwordRequestTTL = 7 * 24 * time.Hour

// NewPasswordRequest stores a request and returns the link for the e-mail.
// key makes it idempotent: a retried step gets a fresh secret for the same
// request id, and only the last link sent works.
func (s *Service) NewPasswordRequest(ctx context.Context, userID, typ, key string) (id, link string, err error) {
	id = uuid.NewSHA1(IDNamespace, []byte("pwreq:"+typ+":"+key)).String()
	if key == "" {
		id = uuid.NewString()
	}
	secret := auth.NewSecret()
	err = s.secrets.Save(ctx, "pwreq:"+id, passwordRequest{
		ID: id, User: userID, Type: typ, Digest: auth.SecretDigest(secret),
		Expires: time.Now().Add(passwordRequestTTL).UTC(),
	})
	if err != nil {
		return "", "", fmt.Errorf("password request: %w", err)
	}
	if err := s.repo.SetSecret(ctx, latestRequestKey(userID), []byte(id)); err != nil {
		return "", "", fmt.Errorf("password request: %w", err)
	}
	if typ == "invite" {
		if err := s.repo.SetSecret(ctx, inviteRequestKey(userID), []byte(id)); err != nil {
			return "", "", fmt.Errorf("password request: %w", err)
		}
	}
	return id, s.cfg.BaseURL + "setpassword/" + id + "/" + secret, nil
}

// CheckPasswordLink finds the request a set-password link names and checks
// it may still be used: 404 when there is none, 400 with Medplum's text
// when it was used (or a newer one sent), expired, or the secret is wrong.
func (s *Service) CheckPasswordLink(ctx context.Context, id, secret string) (pr passwordRequest, raw []byte, err error) {
	raw, found, err := s.secrets.Load(ctx, "pwreq:"+id, &pr)
	if err != nil {
		return pr, nil, err
	}
	if !found {
		return pr, nil, fhir.NotFound()
	}
	latest, err := s.repo.Secret(ctx, latestRequestKey(pr.User))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return pr, nil, err
	}
	invited, err := s.repo.Secret(ctx, inviteRequestKey(pr.User))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return pr, nil, err
	}
	if string(invited) == id {
		latest = invited // the pending invitation works beside newer links
	}
	if err := pr.usable(id, string(latest), secret, time.Now()); err != nil {
		return pr, nil, err
	}
	return pr, raw, nil
}

// usable checks that the request stored as id may still be used with this
// secret at now; latest is the id of the user's newest request, or id when
// it is the user's pending invitation: the ones that work. The texts are
// Medplum's; the pages tell them apart.
func (pr passwordRequest) usable(id, latest, secret string, now time.Time) error {
	switch {
	case pr.Used, latest != id:
		return fhir.BadRequest("Already used")
	case now.After(pr.Expires):
		return fhir.BadRequest("Request expired")
	case !auth.SecretMatches(pr.Digest, secret):
		return fhir.BadRequest("Incorrect secret")
	}
	return nil
}

// UsePasswordLink spends a set-password link and sets the password; every
// sign-in of the user ends. It returns the revision of that ending.
func (s *Service) UsePasswordLink(ctx context.Context, id, secret, password string) (uint64, error) {
	pr, raw, err := s.CheckPasswordLink(ctx, id, secret)
	if err != nil {
		return 0, err
	}
	// Hashed before the link is spent: a hash refused as busy (503) leaves
	// the link to be used again.
	hash, err := auth.HashPassword(ctx, password)
	if err != nil {
		return 0, err
	}
	// Spend the request first, conditionally: of two racing requests one wins.
	spent := pr
	spent.Used = true
	if err := s.secrets.Swap(ctx, "pwreq:"+id, raw, spent); errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		return 0, fhir.BadRequest("Already used")
	} else if err != nil {
		return 0, err
	}
	// A used link spends every other: the newest points at it, and no
	// invitation is pending any more.
	if err := s.repo.SetSecret(ctx, latestRequestKey(pr.User), []byte(id)); err != nil {
		return 0, err
	}
	if err := s.repo.SetSecret(ctx, inviteRequestKey(pr.User), nil); err != nil {
		return 0, err
	}
	if err := s.SetPasswordHash(ctx, pr.User, hash); err != nil {
		return 0, err
	}
	// The link came by e-mail: the address is theirs (as Medplum sets it).
	if err := s.MarkEmailVerified(ctx, pr.User); err != nil {
		return 0, err
	}
	// Whoever signed in with the old password is signed out, refresh
	// tokens included (Medplum 5.1.13 revokes every login of the user too).
	return s.sessions.EndSessions(ctx, "User/"+pr.User)
}

// UserByEmail is the id of the user with this address, the project's own
// user first, then the server-wide one, as Medplum's getUserByEmail; ""
// when there is none.
func (s *Service) UserByEmail(ctx context.Context, email, projectID string) (string, error) {
	if projectID != "" {
		if id, err := s.repo.ClaimOwner(ctx, repo.UserEmailKey(projectID, email)); err != nil || id != "" {
			return id, err
		}
	}
	return s.repo.ClaimOwner(ctx, repo.UserEmailKey("", email))
}

// UserEmail is the e-mail of a user: the account name in the
// authenticator, and the key of the sign-in limiter.
func (s *Service) UserEmail(ctx context.Context, userID string) (string, error) {
	res, err := s.repo.Read(ctx, repo.AllProjects, "User", userID)
	if err != nil {
		return "", err
	}
	var u struct {
		Email string `json:"email"`
	}
	if err := json.Unmarshal(res.JSON, &u); err != nil {
		return "", err
	}
	return strings.ToLower(u.Email), nil
}

func UserIDOf(ref string) string {
	_, id, _ := fhir.SplitReference(ref)
	return id
}

// SignedInUser is the user id of a person's token; clients and bots have
// no authenticator.
func SignedInUser(r *bus.Request) (string, error) {
	if r.Principal == nil {
		return "", fhir.Unauthorized()
	}
	typ, id, _ := fhir.SplitReference(r.Principal.User)
	if typ != "User" {
		return "", fhir.Forbidden()
	}
	return id, nil
}

// Choice is one membership a user may sign in as.
type Choice struct {
	ID      string          `json:"id"`
	Project *fhir.Reference `json:"project"`
	Profile *fhir.Reference `json:"profile"`
}

// Memberships lists the active Memberships of a user (in one project, if given).
func (s *Service) Memberships(ctx context.Context, userRef, projectID string) ([]Choice, error) {
	params := url.Values{"user": {userRef}, "_count": {"100"}}
	if projectID != "" {
		params.Set("project", "Project/"+projectID)
	}
	q, err := search.Parse("ProjectMembership", params)
	if err != nil {
		return nil, err
	}
	page, err := s.repo.Search(ctx, repo.AllProjects, "ProjectMembership", q)
	if err != nil {
		return nil, err
	}
	return activeChoices(page.Resources)
}

// activeChoices are the Memberships one may sign in as: all but those
// marked inactive (a membership without "active" is active, as in Medplum).
func activeChoices(Memberships []*repo.Resource) ([]Choice, error) {
	var out []Choice
	for _, res := range Memberships {
		var m struct {
			Choice
			Active *bool `json:"active"`
		}
		if err := json.Unmarshal(res.JSON, &m); err != nil {
			return nil, err
		}
		if m.Active != nil && !*m.Active {
			continue
		}
		out = append(out, m.Choice)
	}
	return out, nil
}
