package federation

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/egress"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/factors"
	"github.com/pinion-health/pinion/services/identity/signin"
)

// Bounds on POST /auth/google: Google's ID tokens are one or two KiB, and
// a client id is about 75 characters.
const (
	googleBodyLimit      = 16 << 10
	maxGoogleCredential  = 8192
	maxGoogleClientID    = 256
	googleVerifierPrefix = "google\n"
)

// googleIssuers are the two spellings of Google's issuer that its ID
// tokens carry (Google's documentation accepts both).
var googleIssuers = []string{"https://accounts.google.com", "accounts.google.com"}

// badGoogleCredential answers a credential that does not verify; the
// reason is logged, not told.
var badGoogleCredential = fhir.BadRequest("Invalid googleCredential")

// googleRequest is POST /auth/google's body: what Google's Sign-In button
// hands the app, and the sign-in it continues (Medplum's shape).
type googleRequest struct {
	GoogleClientID      string `json:"googleClientId"`
	GoogleCredential    string `json:"googleCredential"`
	ProjectID           string `json:"projectId"`
	ClientID            string `json:"clientId"`
	CreateUser          bool   `json:"createUser"`
	Scope               string `json:"scope"`
	Nonce               string `json:"nonce"`
	CodeChallenge       string `json:"codeChallenge"`
	CodeChallengeMethod string `json:"codeChallengeMethod"`
}

// check finds what is wrong with the fields, with Medplum's texts.
func (in *googleRequest) check() error {
	var issues []fhir.Issue
	switch {
	case in.GoogleClientID == "":
		issues = append(issues, fhir.FieldIssue("googleClientId", "Missing googleClientId"))
	case len(in.GoogleClientID) > maxGoogleClientID:
		issues = append(issues, fhir.FieldIssue("googleClientId", "Invalid googleClientId"))
	}
	switch {
	case in.GoogleCredential == "":
		issues = append(issues, fhir.FieldIssue("googleCredential", "Missing googleCredential"))
	case len(in.GoogleCredential) > maxGoogleCredential:
		issues = append(issues, fhir.FieldIssue("googleCredential", "Invalid googleCredential"))
	}
	if in.CodeChallenge != "" && in.CodeChallengeMethod != "plain" && in.CodeChallengeMethod != "S256" {
		issues = append(issues, fhir.FieldIssue("codeChallengeMethod", "Invalid code challenge method"))
	}
	if len(issues) > 0 {
		return fhir.Invalid(issues...)
	}
	// As Medplum: a projectId that is neither an id nor "new" is ignored.
	if in.ProjectID != "new" && uuid.Validate(in.ProjectID) != nil {
		in.ProjectID = ""
	}
	return nil
}

// googleClaims are the ID token claims a Google sign-in uses.
type googleClaims struct {
	Email         string `json:"email"`
	EmailVerified bool   `json:"email_verified"`
	GivenName     string `json:"given_name"`
	FamilyName    string `json:"family_name"`
}

// Google is POST /auth/google: a Google ID token (the Sign-In button's
// credential), verified against Google's keys for the server's Google
// client id or a project site's, signs in the user with its address, as
// Medplum's googleHandler. A domain with its own provider answers
// {domain, authorizeUrl} instead; an unknown address is "User not found"
// unless createUser asks for an account (when registration is on).
func (s *Service) Google(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if len(r.Body) > googleBodyLimit {
		return nil, fhir.TooLarge("The body of /auth/google is at most 16384 bytes")
	}
	var in googleRequest
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	if err := in.check(); err != nil {
		return nil, err
	}
	// The project comes from projectId, the client or the Google client
	// id; they must agree.
	projectID, err := s.clients.SignInProject(ctx, in.ClientID, in.ProjectID)
	if err != nil {
		return nil, err
	}
	if s.cfg.GoogleClientID == "" || in.GoogleClientID != s.cfg.GoogleClientID {
		// Another client id is a project site's, and signs in to it only.
		ids, err := s.projectsByGoogleClientID(ctx, in.GoogleClientID, projectID)
		if err != nil {
			return nil, err
		}
		switch len(ids) {
		case 0:
			return nil, fhir.BadRequest("Invalid googleClientId")
		case 1:
			projectID = ids[0]
		}
	}
	claims, err := s.verifyGoogle(ctx, in.GoogleClientID, in.GoogleCredential)
	if err != nil {
		return nil, err
	}
	email := auth.NormalEmail(claims.Email)
	if ext, err := s.externalAuth(ctx, email[strings.LastIndex(email, "@")+1:]); err != nil || ext != nil {
		if err != nil {
			return nil, err
		}
		return bus.JSON(200, ext), nil
	}
	userProject := projectID
	if userProject == "new" {
		userProject = ""
	}
	userID, err := s.accounts.UserByEmail(ctx, email, userProject)
	if err != nil {
		return nil, err
	}
	if userID == "" {
		if !in.CreateUser {
			return nil, fhir.BadRequest("User not found")
		}
		if userID, err = s.registration.ProviderAccount(ctx, r.Remote, userProject, in.ClientID, claims.GivenName, claims.FamilyName, email, signin.AuthGoogle); err != nil {
			return nil, err
		}
	}
	now := time.Now()
	l := session.Login{
		User: "User/" + userID, Client: in.ClientID, Scope: cmp.Or(in.Scope, "openid offline"), Nonce: cmp.Or(in.Nonce, uuid.NewString()),
		Challenge: in.CodeChallenge, ChallengeMethod: in.CodeChallengeMethod,
		AuthTime: now.Unix(), Start: now.UnixMilli(), Project: userProject,
	}
	l.SetOrigin(signin.AuthGoogle, r.Remote, r.Get("User-Agent"))
	loginID := uuid.NewString()
	choices, err := s.accounts.Memberships(ctx, l.User, userProject)
	if err != nil {
		return nil, err
	}
	// A new account has no membership yet: /auth/newproject or
	// /auth/newpatient completes the sign-in, as after /auth/newuser.
	resp := bus.JSON(200, map[string]any{"login": loginID})
	switch {
	case len(choices) == 0 && !in.CreateUser && projectID != "new":
		return nil, fhir.BadRequest("User not found")
	case len(choices) > 0:
		// Google vouches for the address, not for a second factor: the
		// person's own, or a project's requirement, is asked as after a
		// password.
		step, rec, err := s.factors.Step(ctx, userID, userProject, factors.Proof{Method: signin.AuthGoogle})
		if err != nil {
			return nil, err
		}
		if step != "" {
			l.MFA = step
			resp, err = s.signins.MFALoginAnswer(ctx, loginID, step, userID, rec)
		} else {
			resp, err = s.signins.LoginResult(ctx, r, loginID, &l)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := s.putExternalSignIn(ctx, loginID, &l); err != nil {
		return nil, err
	}
	return resp, nil
}

// projectsByGoogleClientID are the projects whose site names this Google
// client id (only projectID, when set); two are enough to know it is not one.
func (s *Service) projectsByGoogleClientID(ctx context.Context, googleClientID, projectID string) ([]string, error) {
	params := url.Values{"google-client-id": {googleClientID}, "_count": {"2"}}
	if projectID != "" {
		params.Set("_id", projectID)
	}
	q, err := search.Parse("Project", params)
	if err != nil {
		return nil, err
	}
	page, err := s.repo.Search(ctx, repo.AllProjects, "Project", q)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(page.Resources))
	for _, res := range page.Resources {
		ids = append(ids, res.ID)
	}
	return ids, nil
}

// verifyGoogle checks a Google ID token: RS256 by one of Google's keys
// (PINION_GOOGLE_JWKS_URL), Google's issuer, this client id as audience,
// not expired, with an address Google has verified.
func (s *Service) verifyGoogle(ctx context.Context, clientID, credential string) (*googleClaims, error) {
	v, ok := s.verifiers.Get(googleVerifierPrefix + clientID)
	if !ok {
		// The key set outlives this request: its fetches get their own bound.
		kctx := oidc.ClientContext(context.Background(), egress.Client(s.cfg.EgressPrivate, externalTimeout))
		// The issuer is checked below: Google's tokens spell it two ways.
		v = oidc.NewVerifier(googleIssuers[0], oidc.NewRemoteKeySet(kctx, s.cfg.GoogleJWKSURL),
			&oidc.Config{ClientID: clientID, SupportedSigningAlgs: []string{oidc.RS256}, SkipIssuerCheck: true})
		s.verifiers.Add(googleVerifierPrefix+clientID, v)
	}
	idt, err := v.Verify(ctx, credential)
	if err == nil && !slices.Contains(googleIssuers, idt.Issuer) {
		err = fmt.Errorf("issuer %q is not Google's", idt.Issuer)
	}
	if err != nil {
		s.log.Warn("google sign-in: ID token refused", "googleClientId", clientID, "err", err)
		return nil, badGoogleCredential
	}
	var c googleClaims
	if err := idt.Claims(&c); err != nil {
		return nil, badGoogleCredential
	}
	if c.Email == "" || !account.ValidEmail(c.Email) {
		return nil, fhir.BadRequest("Google credential does not contain an email address")
	}
	// An address Google has not verified names nobody here.
	if !c.EmailVerified {
		return nil, fhir.BadRequest("Google credential's email address is not verified")
	}
	return &c, nil
}
