package signin

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/authserver"
	"github.com/pinion-health/pinion/services/identity/factors"
)

// loginRequest is POST /auth/login's body.
type loginRequest struct {
	Email               string `json:"email"`
	Password            string `json:"password"`
	Scope               string `json:"scope"`
	ProjectID           string `json:"projectId"`
	ClientID            string `json:"clientId"`
	Nonce               string `json:"nonce"`
	CodeChallenge       string `json:"codeChallenge"`
	CodeChallengeMethod string `json:"codeChallengeMethod"`
}

// check finds what is wrong with a sign-in's fields, one issue per field
// with Medplum's texts, before anything is looked up.
func (in loginRequest) check() error {
	var issues []fhir.Issue
	if !account.ValidEmail(in.Email) {
		issues = append(issues, fhir.FieldIssue("email", "Valid email address is required"))
	}
	if account.TooShort(in.Password) {
		issues = append(issues, fhir.FieldIssue("password", account.ShortPasswordText))
	}
	if in.CodeChallenge != "" && in.CodeChallengeMethod != "plain" && in.CodeChallengeMethod != "S256" {
		issues = append(issues, fhir.FieldIssue("codeChallengeMethod", "Invalid code challenge method"))
	}
	if len(issues) > 0 {
		return fhir.Invalid(issues...)
	}
	return nil
}

// Login is POST /auth/login: e-mail and password, with PKCE.
func (s *Service) Login(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	var in loginRequest
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	in.Email = auth.NormalEmail(in.Email)
	if err := in.check(); err != nil {
		return nil, err
	}
	var err error
	if in.ProjectID, err = s.clients.SignInProject(ctx, in.ClientID, in.ProjectID); err != nil {
		return nil, err
	}
	if err := s.limiter.Allow(r.Remote, strings.ToLower(in.Email)); err != nil {
		return nil, err
	}
	email := strings.ToLower(in.Email)
	// An unknown e-mail costs the same reads and password check and gets
	// the same answer as a wrong password (Medplum answers "User not
	// found", which tells anyone which addresses have accounts).
	userID, err := s.accounts.CheckPassword(ctx, email, in.Password, in.ProjectID)
	if err != nil {
		s.limiter.Released(r.Remote, email)
		return nil, err
	}
	if err := s.recordPassword(ctx, r, email, userID, in.ClientID, in.ProjectID); err != nil {
		s.limiter.Released(r.Remote, email)
		return nil, err
	}
	if userID == "" {
		s.limiter.Failed(r.Remote, email)
		return nil, fhir.BadRequest("Email or password is invalid")
	}
	s.limiter.Succeeded(r.Remote, email)
	choices, err := s.accounts.Memberships(ctx, "User/"+userID, in.ProjectID)
	if err != nil {
		return nil, err
	}
	if len(choices) == 0 {
		return nil, fhir.BadRequest("User not found")
	}
	mfa, rec, err := s.factors.Step(ctx, userID, in.ProjectID, factors.Proof{Method: AuthPassword})
	if err != nil {
		return nil, err
	}
	scope := in.Scope
	if scope == "" {
		scope = "openid"
	}
	l := session.Login{
		User: "User/" + userID, Client: in.ClientID, Scope: scope, Nonce: in.Nonce,
		Challenge: in.CodeChallenge, ChallengeMethod: in.CodeChallengeMethod,
		AuthTime: time.Now().Unix(), Start: time.Now().UnixMilli(), Project: in.ProjectID,
	}
	loginID := uuid.NewString()
	if mfa != "" {
		// No profile and no code until the second factor is given.
		l.MFA = mfa
		if err := s.PutSignIn(ctx, r, loginID, &l); err != nil {
			return nil, err
		}
		return s.MFALoginAnswer(ctx, loginID, mfa, userID, rec)
	}
	resp, err := s.LoginResult(ctx, r, loginID, &l)
	if err != nil {
		return nil, err
	}
	if err := s.PutSignIn(ctx, r, loginID, &l); err != nil {
		return nil, err
	}
	return resp, nil
}

// LoginResult is the answer of a sign-in whose factors are all given, as
// Medplum's sendLoginResult: the memberships to choose from, or, with one,
// a code for it (set on l, which the caller stores).
func (s *Service) LoginResult(ctx context.Context, r *bus.Request, loginID string, l *session.Login) (*bus.Response, error) {
	choices, err := s.accounts.Memberships(ctx, l.User, l.Project)
	if err != nil {
		return nil, err
	}
	if len(choices) == 0 {
		return nil, fhir.BadRequest("User not found")
	}
	if len(choices) > 1 {
		return bus.JSON(200, map[string]any{"login": loginID, "memberships": choices}), nil
	}
	if err := s.CheckSignIn(ctx, choices[0].ID, r.Remote, factors.ProofOf(l)); err != nil {
		if errors.Is(err, ErrFactorOwed) {
			return s.OwedEnrolment(ctx, loginID, l)
		}
		return nil, err
	}
	l.Membership = choices[0].ID
	code := authserver.NewCode(loginID, l, time.Now())
	return bus.JSON(200, map[string]any{"login": loginID, "code": code}), nil
}

// CheckSignIn applies a membership's sign-in conditions, every sign-in
// path's one gate: its access-policy IP rules (Medplum's check and
// answer); the project of the identity provider that vouched, if any
// (its sign-ins reach that project only); an identity provider's sign-in
// where the project requires that; a verified e-mail where it requires
// one; and a second factor where it requires one (ErrFactorOwed, which
// the caller turns into the enrolment step).
func (s *Service) CheckSignIn(ctx context.Context, membership, remote string, p factors.Proof) error {
	m, err := s.sessions.GetMembership(ctx, membership)
	if err != nil {
		return err
	}
	if !m.AllowsAddress(remote) {
		return fhir.BadRequest("IP address not allowed")
	}
	if p.ProviderProject != "" && m.Project != p.ProviderProject {
		return fhir.BadRequest("Invalid project")
	}
	if err := s.checkExternalOnly(ctx, m, p); err != nil {
		return err
	}
	if err := s.accounts.CheckVerifiedEmail(ctx, m); err != nil {
		return err
	}
	return s.checkFactor(ctx, m, p)
}

// ChooseProfile is POST /auth/profile: pick the membership of a login.
func (s *Service) ChooseProfile(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	var in struct {
		Login   string `json:"login"`
		Profile string `json:"profile"`
	}
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	if in.Login == "" {
		return nil, fhir.BadRequest("Missing login", "login")
	}
	if in.Profile == "" {
		return nil, fhir.BadRequest("Missing profile", "profile")
	}
	var resp *bus.Response
	_, err := s.sessions.UpdateLogin(ctx, in.Login, func(l *session.Login) error {
		resp = nil
		if err := ProfileOpen(l); err != nil {
			return err
		}
		choices, err := s.accounts.Memberships(ctx, l.User, l.Project)
		if err != nil {
			return err
		}
		for _, c := range choices {
			if c.ID == in.Profile {
				err := s.CheckSignIn(ctx, c.ID, r.Remote, factors.ProofOf(l))
				if errors.Is(err, ErrFactorOwed) {
					// This project requires a factor the person has not
					// given: enrol, then choose again.
					resp, err = s.OwedEnrolment(ctx, in.Login, l)
					return err
				}
				if err != nil {
					return err
				}
				l.Membership = c.ID
				resp = bus.JSON(200, map[string]any{"login": in.Login, "code": authserver.NewCode(in.Login, l, time.Now())})
				return nil
			}
		}
		return fhir.BadRequest("Profile not found", "profile")
	})
	if errors.Is(err, session.ErrNotFound) {
		return nil, fhir.NotFound()
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// ProfileOpen refuses to choose the profile of a login that has one, or
// is over, with Medplum's texts.
func ProfileOpen(l *session.Login) error {
	switch {
	case l.Revoked:
		return fhir.BadRequest("Login revoked")
	case l.Granted:
		return fhir.BadRequest("Login granted")
	case l.Membership != "":
		return fhir.BadRequest("Login profile already set")
	case l.MFA != "" && !l.MFAVerified:
		// A password alone chooses nothing for someone with a factor.
		return fhir.BadRequest("MFA verification required")
	}
	return nil
}
