package registration

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/authserver"
	"github.com/pinion-health/pinion/services/identity/clients"
	"github.com/pinion-health/pinion/services/identity/factors"
	"github.com/pinion-health/pinion/services/identity/signin"
)

// registerBodyLimit bounds the bodies of /auth/newuser, /auth/newproject
// and /auth/newpatient: a few short fields (names and e-mail are at most
// 128 and 72 characters, PKCE values 128).
const registerBodyLimit = 4096

// OffText is Medplum's refusal of every registration when it is off.
const OffText = "Registration is disabled"

// Medplum's bounds and texts for a new user's fields (newuser.ts).
const (
	maxName          = 128
	minEmail         = 3
	maxEmail         = 72
	badEmailText     = "Valid email address between 3 and 72 characters is required"
	firstNameLenText = "First name must be between 1 and 128 characters"
	lastNameLenText  = "Last name must be between 1 and 128 characters"
	openRegText      = "Project does not allow open registration"
	hasMemberText    = "Login already has a membership"
)

// newUserRequest is POST /auth/newuser's body (Medplum's NewUserRequest).
type newUserRequest struct {
	FirstName           string `json:"firstName"`
	LastName            string `json:"lastName"`
	Email               string `json:"email"`
	Password            string `json:"password"`
	ProjectID           string `json:"projectId"`
	ClientID            string `json:"clientId"`
	Scope               string `json:"scope"`
	Nonce               string `json:"nonce"`
	CodeChallenge       string `json:"codeChallenge"`
	CodeChallengeMethod string `json:"codeChallengeMethod"`
	RecaptchaToken      string `json:"recaptchaToken"`
	RecaptchaSiteKey    string `json:"recaptchaSiteKey"`
}

// check finds what is wrong with the fields, one issue per field, with
// Medplum's texts. Lengths count characters, not bytes.
func (in newUserRequest) check() error {
	var issues []fhir.Issue
	if n := utf8.RuneCountInString(in.FirstName); n < 1 || n > maxName {
		issues = append(issues, fhir.FieldIssue("firstName", firstNameLenText))
	}
	if n := utf8.RuneCountInString(in.LastName); n < 1 || n > maxName {
		issues = append(issues, fhir.FieldIssue("lastName", lastNameLenText))
	}
	email := auth.NormalEmail(in.Email)
	if n := utf8.RuneCountInString(email); n < minEmail || n > maxEmail || !account.ValidEmail(email) || strings.ContainsAny(email, "<> ") {
		issues = append(issues, fhir.FieldIssue("email", badEmailText))
	}
	if account.TooShort(in.Password) || account.TooLong(in.Password) {
		issues = append(issues, fhir.FieldIssue("password", account.PasswordLengthText))
	}
	if in.CodeChallenge != "" && in.CodeChallengeMethod != "plain" && in.CodeChallengeMethod != "S256" {
		issues = append(issues, fhir.FieldIssue("codeChallengeMethod", "Invalid code challenge method"))
	}
	if len(issues) > 0 {
		return fhir.Invalid(issues...)
	}
	return nil
}

// NewUser is POST /auth/newuser: a person creates their own account and
// gets a sign-in with no profile yet ({login}), which /auth/newproject or
// /auth/newpatient completes. Without a project the user is server-wide;
// with one (projectId, or a client's project) the user belongs to that
// project, which must let patients sign up.
func (s *Service) NewUser(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if s.cfg.Disabled {
		return nil, fhir.BadRequest(OffText)
	}
	if len(r.Body) > registerBodyLimit {
		return nil, fhir.TooLarge("The body of /auth/newuser is at most 4096 bytes")
	}
	var in newUserRequest
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	userID, project, err := s.createAccount(ctx, r.Remote, in)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	l := session.Login{
		User: "User/" + userID, Client: in.ClientID, Scope: cmp.Or(in.Scope, "openid"), Nonce: cmp.Or(in.Nonce, uuid.NewString()),
		Challenge: in.CodeChallenge, ChallengeMethod: in.CodeChallengeMethod,
		AuthTime: now.Unix(), Start: now.UnixMilli(), Project: project,
	}
	loginID := uuid.NewString()
	if err := s.signins.PutSignIn(ctx, r, loginID, &l); err != nil {
		return nil, err
	}
	return bus.JSON(200, map[string]any{"login": loginID}), nil
}

// createAccount is a registration, from /auth/newuser or the /register
// pages alike: the fields' checks, reCAPTCHA, the breached-password check,
// the project it joins, the per-address and per-domain limits, the user,
// and the verification e-mail. It returns the new user's id and project
// ("" for a server-wide user).
func (s *Service) createAccount(ctx context.Context, remote string, in newUserRequest) (userID, project string, err error) {
	if s.cfg.Disabled {
		return "", "", fhir.BadRequest(OffText)
	}
	if err := in.check(); err != nil {
		return "", "", err
	}
	if project, err = s.namedProject(ctx, in.ProjectID, in.ClientID); err != nil {
		return "", "", err
	}
	// A project site's reCAPTCHA key may choose the project; Medplum
	// checks that the project takes registrations before the token.
	var secret string
	if project, secret, err = s.recaptchaSecret(ctx, in.RecaptchaSiteKey, project); err != nil {
		return "", "", err
	}
	if project != "" {
		if _, err := s.patientPolicy(ctx, project); err != nil {
			return "", "", err
		}
	}
	if err := s.checkRecaptcha(ctx, secret, in.RecaptchaToken, remote); err != nil {
		return "", "", err
	}
	if s.accounts.PasswordBreached(ctx, in.Password) {
		return "", "", fhir.BadRequest(auth.BreachedText, "password")
	}
	email := auth.NormalEmail(in.Email)
	if err := s.limiter.Register(remote, email); err != nil {
		return "", "", err
	}
	if userID, err = s.registerUser(ctx, project, in.FirstName, in.LastName, email, in.Password); err != nil {
		return "", "", err
	}
	s.log.InfoContext(ctx, "user registered", "user", userID, "project", project)
	// The account exists whatever befalls the e-mail: a failure to queue it
	// is logged, not answered (a retry would find the address taken).
	if err := s.accounts.SendVerification(ctx, userID, email, in.FirstName); err != nil {
		s.log.ErrorContext(ctx, "verification e-mail not queued", "user", userID, "err", err)
	}
	return userID, project, nil
}

// ProviderAccount makes the account an identity provider's sign-in asked
// for (Medplum's createUser): no password, its names and address from the
// provider, which verified the address. It is a registration like
// /auth/newuser's: off when registration is, counted by the same limits,
// and into a project only one that lets patients sign up. When another
// sign-in made the account meanwhile, that account is the one.
func (s *Service) ProviderAccount(ctx context.Context, remote, projectID, clientID, firstName, lastName, email, method string) (string, error) {
	if s.cfg.Disabled {
		return "", fhir.BadRequest(OffText)
	}
	project, err := s.namedProject(ctx, projectID, clientID)
	if err != nil {
		return "", err
	}
	if project != "" {
		if _, err := s.patientPolicy(ctx, project); err != nil {
			return "", err
		}
	}
	if err := s.limiter.Register(remote, email); err != nil {
		return "", err
	}
	id := uuid.NewString()
	doc, err := resource.Map(providerUser(project, firstName, lastName, email))
	if err != nil {
		return "", err
	}
	if _, err := s.repo.Create(ctx, repo.AllProjects, doc, repo.WriteOptions{ID: id, Project: project}); err != nil {
		return "", fmt.Errorf("create user: %w", err)
	}
	owner, err := s.repo.Claim(ctx, repo.UserEmailKey(project, email), id)
	if err != nil {
		return "", err
	}
	if owner != id {
		if err := s.repo.Delete(ctx, repo.AllProjects, "User", id); err != nil && !fhir.Missing(err) {
			s.log.WarnContext(ctx, "a provider's registration that lost its e-mail left its user", "user", id, "err", err)
		}
		return owner, nil
	}
	s.log.InfoContext(ctx, "user registered", "user", id, "project", project, "authMethod", method)
	return id, nil
}

// providerUser is the User an identity provider's sign-in registers: the
// provider verified its address.
func providerUser(project, firstName, lastName, email string) *resource.User {
	u := resource.NewUser(project, firstName, lastName, email)
	u.EmailVerified = true
	return u
}

// namedProject is the project a registration names ("" for a
// server-wide user): projectId ("new" means none, as in Medplum's app) or
// the client's project; the two must agree. A project takes registrations
// only when patients may sign up to it (patientPolicy, checked by the
// caller once reCAPTCHA has settled the project).
func (s *Service) namedProject(ctx context.Context, projectID, clientID string) (string, error) {
	if projectID == "new" {
		projectID = ""
	}
	if clientID != "" && clients.Builtin(clientID, s.cfg.BaseURL) == nil {
		if err := uuid.Validate(clientID); err != nil {
			return "", fhir.NotFound()
		}
		c, err := s.repo.Read(ctx, repo.AllProjects, "ClientApplication", clientID)
		if err != nil {
			return "", err
		}
		if projectID != "" && projectID != c.Project {
			return "", fhir.BadRequest("Client and project do not match")
		}
		projectID = c.Project
	}
	return projectID, nil
}

// patientPolicy is the access policy a patient signing up to the project
// gets (its defaultPatientAccessPolicy), or Medplum's refusal when it has
// none. An unknown project is refused the same way, so the answer does not
// tell which project ids exist.
func (s *Service) patientPolicy(ctx context.Context, projectID string) (string, error) {
	if uuid.Validate(projectID) != nil {
		return "", fhir.BadRequest(openRegText)
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, "Project", projectID)
	if fhir.Missing(err) {
		return "", fhir.BadRequest(openRegText)
	}
	if err != nil {
		return "", err
	}
	var p struct {
		Policy *fhir.Reference `json:"defaultPatientAccessPolicy"`
	}
	if err := json.Unmarshal(res.JSON, &p); err != nil {
		return "", err
	}
	if p.Policy == nil || p.Policy.Reference == "" {
		return "", fhir.BadRequest(openRegText)
	}
	// A policy of another project would lend that project's rules.
	if err := projects.CheckPolicyRef(ctx, s.repo, projectID, p.Policy.Reference, "defaultPatientAccessPolicy"); err != nil {
		return "", err
	}
	return p.Policy.Reference, nil
}

// registerUser stores a new user with this password, unless the address is
// taken in that scope (Medplum's "Email already registered"). The e-mail
// claim, taken after the create so it never names a missing user, decides
// a race between two registrations of one address.
func (s *Service) registerUser(ctx context.Context, project, firstName, lastName, email, password string) (string, error) {
	taken := fhir.BadRequest("Email already registered", "email")
	key := repo.UserEmailKey(project, email)
	if owner, err := s.repo.ClaimOwner(ctx, key); err != nil {
		return "", err
	} else if owner != "" {
		return "", taken
	}
	hash, err := auth.HashPassword(ctx, password)
	if err != nil {
		return "", err
	}
	id := uuid.NewString()
	u, err := resource.Map(resource.NewUser(project, firstName, lastName, email))
	if err != nil {
		return "", err
	}
	if _, err := s.repo.Create(ctx, repo.AllProjects, u, repo.WriteOptions{ID: id, Project: project}); err != nil {
		return "", fmt.Errorf("create user: %w", err)
	}
	if err := s.accounts.SetPasswordHash(ctx, id, hash); err != nil {
		return "", err
	}
	owner, err := s.repo.Claim(ctx, key, id)
	if err != nil {
		return "", err
	}
	if owner != id {
		if err := s.repo.Delete(ctx, repo.AllProjects, "User", id); err != nil && !fhir.Missing(err) {
			s.log.WarnContext(ctx, "a registration that lost its e-mail left its user", "user", id, "err", err)
		}
		return "", taken
	}
	return id, nil
}

// newProjectRequest is POST /auth/newproject's body.
type newProjectRequest struct {
	Login       string `json:"login"`
	ProjectName string `json:"projectName"`
}

// check finds what is wrong with the fields, with Medplum's texts.
func (in newProjectRequest) check() error {
	var issues []fhir.Issue
	if uuid.Validate(in.Login) != nil {
		issues = append(issues, fhir.FieldIssue("login", "Login ID is required."))
	}
	if n := utf8.RuneCountInString(strings.TrimSpace(in.ProjectName)); n < 4 || n > 72 {
		issues = append(issues, fhir.FieldIssue("projectName", "Project name must be between 4 and 72 characters"))
	}
	if len(issues) > 0 {
		return fhir.Invalid(issues...)
	}
	return nil
}

// NewProject is POST /auth/newproject: the person of a sign-in with no
// profile yet creates a project, as $init does (strict, owned by them),
// becomes its admin with a Practitioner profile, and the sign-in gets a
// code for that membership.
func (s *Service) NewProject(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if len(r.Body) > registerBodyLimit {
		return nil, fhir.TooLarge("The body of /auth/newproject is at most 4096 bytes")
	}
	var in newProjectRequest
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	if err := in.check(); err != nil {
		return nil, err
	}
	l, u, err := s.openSignIn(ctx, in.Login)
	if err != nil {
		return nil, err
	}
	membership, err := s.foundProject(ctx, r, l.User, u, in.ProjectName)
	if err != nil {
		return nil, err
	}
	return s.grantMembership(ctx, r, in.Login, membership)
}

// foundProject creates a project named name (checked already) owned by
// user, as Medplum's createProject does (strict, with a default client),
// with user as its admin under a Practitioner profile, and returns that
// membership's id.
func (s *Service) foundProject(ctx context.Context, r *bus.Request, user string, u *registeredUser, name string) (string, error) {
	if u.Project != nil {
		// A project's own user (a patient who signed up) owns no other project.
		return "", fhir.BadRequest("Project owner must not belong to another Project")
	}
	name = strings.TrimSpace(name)
	id := uuid.NewString()
	project := map[string]any{"resourceType": "Project", "name": name, "strictMode": true, "owner": map[string]any{"reference": user}}
	if _, err := s.repo.Create(ctx, repo.AllProjects, project, repo.WriteOptions{ID: id, Project: id, Author: user, Strict: true}); err != nil {
		return "", err
	}
	// The client an app of the project signs in with from the start, as
	// Medplum makes it: its secret is the admin's to read in the project.
	client := map[string]any{"resourceType": "ClientApplication", "name": name + " Default Client", "description": "Default client for " + name}
	if _, _, err := s.clients.CreateClient(ctx, &projects.Info{ID: id, Name: name}, projects.Agent{Resource: client, Author: user, InvitedBy: user}); err != nil {
		return "", err
	}
	membership, err := projects.AddMember(ctx, s.repo, s.nc, id, name, projects.Person{
		User: user, FirstName: u.FirstName, LastName: u.LastName, Email: u.Email,
		ProfileType: "Practitioner", Admin: true,
	})
	if err != nil {
		return "", err
	}
	s.log.InfoContext(ctx, "project registered", "project", id, "user", user)
	e := audit.Event{Kind: audit.ProjectCreated.Name, Project: id, Who: user, Address: r.Remote,
		Entities: []audit.Entity{{What: "Project/" + id, Detail: r.Method + " " + r.Path}}}
	if err := s.audit.Record(ctx, e); err != nil {
		s.log.ErrorContext(ctx, "a project was registered, but the audit trail did not take its event", "project", id, "err", err)
		return "", fhir.Unavailable("The audit trail is unavailable; the project was made but not recorded")
	}
	return membership, nil
}

// newPatientRequest is POST /auth/newpatient's body.
type newPatientRequest struct {
	Login     string `json:"login"`
	ProjectID string `json:"projectId"`
}

// NewPatient is POST /auth/newpatient: a user registered in a project
// signs up as a patient there, with a Patient profile and a membership
// under the project's defaultPatientAccessPolicy.
func (s *Service) NewPatient(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if len(r.Body) > registerBodyLimit {
		return nil, fhir.TooLarge("The body of /auth/newpatient is at most 4096 bytes")
	}
	var in newPatientRequest
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	var issues []fhir.Issue
	if in.Login == "" {
		issues = append(issues, fhir.FieldIssue("login", "Missing login"))
	}
	if in.ProjectID == "" {
		issues = append(issues, fhir.FieldIssue("projectId", "Project ID is required"))
	}
	if len(issues) > 0 {
		return nil, fhir.Invalid(issues...)
	}
	if uuid.Validate(in.Login) != nil {
		return nil, fhir.NotFound()
	}
	l, u, err := s.openSignIn(ctx, in.Login)
	if err != nil {
		return nil, err
	}
	membership, err := s.joinAsPatient(ctx, l.User, u, in.ProjectID)
	if err != nil {
		return nil, err
	}
	return s.grantMembership(ctx, r, in.Login, membership)
}

// joinAsPatient makes user, registered in projectID, a patient there: a
// Patient profile and a membership under the project's
// defaultPatientAccessPolicy, whose id it returns.
func (s *Service) joinAsPatient(ctx context.Context, user string, u *registeredUser, projectID string) (string, error) {
	// Medplum asks only that the user belong to some project; the project
	// must be this one, or a patient of one clinic could join another.
	if u.Project == nil || u.Project.Reference != "Project/"+projectID {
		return "", fhir.BadRequest("User must be scoped to the project")
	}
	policy, err := s.patientPolicy(ctx, projectID)
	if err != nil {
		return "", err
	}
	info, err := projects.Get(ctx, s.repo, projectID)
	if err != nil {
		return "", err
	}
	membership, err := projects.AddMember(ctx, s.repo, s.nc, projectID, info.Name, projects.Person{
		User: user, FirstName: u.FirstName, LastName: u.LastName, Email: u.Email,
		ProfileType: "Patient", AccessPolicy: policy,
	})
	if errors.Is(err, projects.ErrAlreadyMember) {
		return "", fhir.BadRequest(hasMemberText)
	}
	return membership, err
}

// registeredUser is what registration reads of a sign-in's user.
type registeredUser struct {
	FirstName string          `json:"firstName"`
	LastName  string          `json:"lastName"`
	Email     string          `json:"email"`
	Project   *fhir.Reference `json:"project"`
}

// openSignIn reads a sign-in that may still get a profile, and its user,
// with Medplum's texts for one that may not.
func (s *Service) openSignIn(ctx context.Context, loginID string) (*session.Login, *registeredUser, error) {
	l, err := s.sessions.GetLogin(ctx, loginID)
	if errors.Is(err, session.ErrNotFound) {
		return nil, nil, fhir.NotFound()
	}
	if err != nil {
		return nil, nil, err
	}
	if err := signInOpen(l); err != nil {
		return nil, nil, err
	}
	typ, uid, ok := fhir.SplitReference(l.User)
	if !ok || typ != "User" {
		return nil, nil, fhir.BadRequest("Invalid login")
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, "User", uid)
	if err != nil {
		return nil, nil, err
	}
	var u registeredUser
	if err := json.Unmarshal(res.JSON, &u); err != nil {
		return nil, nil, err
	}
	return l, &u, nil
}

// signInOpen refuses registration steps on a sign-in that is over or has
// a profile already.
func signInOpen(l *session.Login) error {
	switch {
	case l.Membership != "": // Medplum's first check
		return fhir.BadRequest(hasMemberText)
	case l.Revoked:
		return fhir.BadRequest("Login revoked")
	case l.Granted:
		return fhir.BadRequest("Login granted")
	case l.MFA != "" && !l.MFAVerified:
		// A password alone makes no profile for someone with a factor.
		return fhir.BadRequest("MFA verification required")
	}
	return nil
}

// grantMembership sets the membership a registration made on its sign-in
// and answers {login, code}, as Medplum does; where the project requires
// a second factor, the enrolment step comes first. A sign-in that got
// another profile meanwhile keeps it, and this request is refused.
func (s *Service) grantMembership(ctx context.Context, r *bus.Request, loginID, membership string) (*bus.Response, error) {
	var resp *bus.Response
	_, err := s.sessions.UpdateLogin(ctx, loginID, func(l *session.Login) error {
		resp = nil
		if err := signInOpen(l); err != nil {
			return err
		}
		err := s.signins.CheckSignIn(ctx, membership, r.Remote, factors.ProofOf(l))
		if errors.Is(err, signin.ErrFactorOwed) {
			resp, err = s.signins.OwedEnrolment(ctx, loginID, l)
			return err
		}
		if err != nil {
			return err
		}
		l.Membership = membership
		resp = bus.JSON(200, map[string]any{"login": loginID, "code": authserver.NewCode(loginID, l, time.Now())})
		return nil
	})
	if errors.Is(err, session.ErrNotFound) {
		return nil, fhir.NotFound()
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}
