package identity

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/clients"
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

// login is POST /auth/login: e-mail and password, with PKCE.
func (s *Service) login(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	var in loginRequest
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	in.Email = auth.NormalEmail(in.Email)
	if err := in.check(); err != nil {
		return nil, err
	}
	if err := s.clientProject(ctx, &in); err != nil {
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
	mfa, rec, err := s.factors.Step(ctx, userID, in.ProjectID, factors.Proof{Method: authPassword})
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
		if err := s.putSignIn(ctx, r, loginID, &l); err != nil {
			return nil, err
		}
		return s.mfaLoginAnswer(ctx, loginID, mfa, userID, rec)
	}
	resp, err := s.loginResult(ctx, r, loginID, &l)
	if err != nil {
		return nil, err
	}
	if err := s.putSignIn(ctx, r, loginID, &l); err != nil {
		return nil, err
	}
	return resp, nil
}

// loginResult is the answer of a sign-in whose factors are all given, as
// Medplum's sendLoginResult: the memberships to choose from, or, with one,
// a code for it (set on l, which the caller stores).
func (s *Service) loginResult(ctx context.Context, r *bus.Request, loginID string, l *session.Login) (*bus.Response, error) {
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
	if err := s.checkSignIn(ctx, choices[0].ID, r.Remote, factors.ProofOf(l)); err != nil {
		if errors.Is(err, errFactorOwed) {
			return s.owedEnrolment(ctx, loginID, l)
		}
		return nil, err
	}
	l.Membership = choices[0].ID
	code := newCode(loginID, l, time.Now())
	return bus.JSON(200, map[string]any{"login": loginID, "code": code}), nil
}

// clientProject confines a sign-in for a client to the client's project,
// as Medplum does: the client must exist (404), a projectId that names
// another project is refused, and the code goes only to a membership in
// the client's project. First-party clients and clients registered in a
// super-admin project serve every project.
func (s *Service) clientProject(ctx context.Context, in *loginRequest) error {
	if in.ClientID == "" || clients.Builtin(in.ClientID, s.cfg.BaseURL) != nil {
		return nil
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, "ClientApplication", in.ClientID)
	if err != nil {
		return err
	}
	_, anyProject, err := s.clients.ProjectOf(ctx, res.Project)
	switch {
	case err != nil:
		return err
	case anyProject:
		return nil
	case in.ProjectID != "" && in.ProjectID != res.Project:
		return fhir.BadRequest("Invalid projectId", "projectId")
	}
	in.ProjectID = res.Project
	return nil
}

// codeLifetime is how long an authorization code can be redeemed: a client
// redeems it at once, and one found later in a log or a browser history
// must be worthless (RFC 6749 §4.1.2 advises at most ten minutes).
const codeLifetime = time.Minute

// checkSignIn applies a membership's sign-in conditions, every sign-in
// path's one gate: its access-policy IP rules (Medplum's check and
// answer); the project of the identity provider that vouched, if any
// (its sign-ins reach that project only); an identity provider's sign-in
// where the project requires that; a verified e-mail where it requires
// one; and a second factor where it requires one (errFactorOwed, which
// the caller turns into the enrolment step).
func (s *Service) checkSignIn(ctx context.Context, membership, remote string, p factors.Proof) error {
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

// newCode makes an authorization code issued at now: the login id and a
// secret whose digest the login keeps, so the code finds its login without
// a search.
func newCode(loginID string, l *session.Login, now time.Time) string {
	secret := auth.NewSecret()
	l.CodeDigest = auth.SecretDigest(secret)
	l.CodeAt = now.UnixMilli()
	return loginID + "." + secret
}

// chooseProfile is POST /auth/profile: pick the membership of a login.
func (s *Service) chooseProfile(ctx context.Context, r *bus.Request) (*bus.Response, error) {
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
		if err := profileOpen(l); err != nil {
			return err
		}
		choices, err := s.accounts.Memberships(ctx, l.User, l.Project)
		if err != nil {
			return err
		}
		for _, c := range choices {
			if c.ID == in.Profile {
				err := s.checkSignIn(ctx, c.ID, r.Remote, factors.ProofOf(l))
				if errors.Is(err, errFactorOwed) {
					// This project requires a factor the person has not
					// given: enrol, then choose again.
					resp, err = s.owedEnrolment(ctx, in.Login, l)
					return err
				}
				if err != nil {
					return err
				}
				l.Membership = c.ID
				resp = bus.JSON(200, map[string]any{"login": in.Login, "code": newCode(in.Login, l, time.Now())})
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

// profileOpen refuses to choose the profile of a login that has one, or
// is over, with Medplum's texts.
func profileOpen(l *session.Login) error {
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

// authorizationCode redeems a code (once) for tokens, checking PKCE.
// The code is bound to the client and redirect URI of its request.
func (s *Service) authorizationCode(ctx context.Context, r *bus.Request, form url.Values) (*bus.Response, error) {
	g, no := readCodeGrant(form)
	if no != nil {
		return nil, no
	}
	tc, no, err := s.presentedClient(ctx, r, form)
	if err != nil {
		return nil, err
	}
	if no != nil {
		return nil, no
	}
	g.clientID = tc.ID
	loginID := g.loginID
	var terr *refusal
	var refresh string
	l, rev, err := s.sessions.UpdateLoginRev(ctx, loginID, func(l *session.Login) error {
		terr = nil
		ended, err := s.sessions.SessionsEnded(ctx, l.User)
		if err != nil {
			return err
		}
		if v := redeemCode(l, g, time.Now(), ended); v.refused != nil {
			terr = v.refused
			return v.settle(l)
		}
		if terr, err = s.authenticatedFor(ctx, tc, l.Client); err != nil || terr != nil {
			return cmp.Or(err, errStop)
		}
		l.Granted = true
		refresh = rotateRefresh(l)
		return nil
	})
	if terr != nil {
		if err == nil { // the login was revoked: let the caller's next request see it
			terr = terr.revoked(rev)
		}
		return nil, terr
	}
	if errors.Is(err, session.ErrNotFound) {
		return nil, &refusal{"invalid_grant", "Invalid code", 0}
	}
	if err != nil {
		return nil, err
	}
	return s.userTokens(ctx, loginID, l, refresh)
}

// wantsRefresh reports whether the sign-in asked for a refresh token.
func wantsRefresh(scope string) bool {
	return hasScope(scope, "offline_access") || hasScope(scope, "offline")
}

// rotateRefresh gives the login a new refresh secret (when it asked for
// refresh tokens) and returns it; the old one stops working.
func rotateRefresh(l *session.Login) string {
	if !wantsRefresh(l.Scope) {
		return ""
	}
	secret := auth.NewSecret()
	l.RefreshDigest = auth.SecretDigest(secret)
	return secret
}

var errStop = errors.New("stop")

func verifierMatches(challenge, method, verifier string) bool {
	want := verifier
	if method == "S256" {
		d := sha256.Sum256([]byte(verifier))
		want = base64.RawURLEncoding.EncodeToString(d[:])
	}
	return subtle.ConstantTimeCompare([]byte(challenge), []byte(want)) == 1
}

// refreshToken rotates a refresh token; a spent one revokes the login.
// The token is bound to its client, and to the person's consent to it.
func (s *Service) refreshToken(ctx context.Context, r *bus.Request, form url.Values) (*bus.Response, error) {
	raw := form.Get("refresh_token")
	if raw == "" {
		return nil, &refusal{"invalid_request", "Invalid refresh token", 0}
	}
	tc, no, err := s.presentedClient(ctx, r, form)
	if err != nil {
		return nil, err
	}
	if no != nil {
		return nil, no
	}
	c, err := s.verifier().Verify(raw)
	if err != nil || c.RefreshSecret == "" || c.LoginID == "" {
		return nil, &refusal{"invalid_grant", "Invalid refresh token", 0}
	}
	var terr *refusal
	var refresh string
	l, rev, err := s.sessions.UpdateLoginRev(ctx, c.LoginID, func(l *session.Login) error {
		terr = nil
		ended, err := s.sessions.SessionsEnded(ctx, l.User)
		if err != nil {
			return err
		}
		if v := renewRefresh(l, c.RefreshSecret, tc.ID, ended); v.refused != nil {
			terr = v.refused
			return v.settle(l)
		}
		if terr, err = s.authenticatedFor(ctx, tc, l.Client); err != nil || terr != nil {
			return cmp.Or(err, errStop)
		}
		if l.Consented {
			ok, err := s.consents.Given(ctx, l.User, l.Client, "")
			if err != nil {
				return err
			}
			if !ok {
				// The person withdrew their consent: the sign-in ends.
				terr = &refusal{"invalid_grant", "Consent withdrawn", 0}
				l.Revoked = true
				return nil
			}
		}
		refresh = rotateRefresh(l)
		return nil
	})
	if terr != nil {
		if err == nil {
			terr = terr.revoked(rev)
		}
		return nil, terr
	}
	if errors.Is(err, session.ErrNotFound) {
		return nil, &refusal{"invalid_grant", "Invalid refresh token", 0}
	}
	if err != nil {
		return nil, err
	}
	return s.userTokens(ctx, c.LoginID, l, refresh)
}

// userTokens issues access and id tokens, and a refresh token carrying
// refresh (the login's current refresh secret) when there is one.
func (s *Service) userTokens(ctx context.Context, loginID string, l *session.Login, refresh string) (*bus.Response, error) {
	m, err := s.sessions.GetMembership(ctx, l.Membership)
	if errors.Is(err, session.ErrNotFound) || err == nil && !m.Active {
		return nil, &refusal{"invalid_grant", "Profile not active", 0}
	}
	if err != nil {
		return nil, err
	}
	_, uid, _ := fhir.SplitReference(l.User)
	ac := &auth.Claims{LoginID: loginID, Username: uid, Profile: m.Profile, Scope: l.Scope, ClientID: l.Client}
	ac.Subject = uid
	ac.Audience = jwt.ClaimStrings{s.cfg.BaseURL}
	granted := access.GrantedScope(l.Scope)
	accessToken, err := s.signer.Sign(ac, s.cfg.TokenLifetime)
	if err != nil {
		return nil, err
	}
	idc := &auth.Claims{LoginID: loginID, FHIRUser: m.Profile, Nonce: l.Nonce, ClientID: l.Client, AuthTime: l.AuthTime}
	idc.Subject = uid
	idc.Audience = jwt.ClaimStrings{firstNonEmpty(l.Client, s.cfg.BaseURL)}
	idTok, err := s.signIDToken(idc)
	if err != nil {
		return nil, err
	}
	project, profile := s.clients.MemberRefs(ctx, l.Membership, m.Project, m.Profile)
	body := map[string]any{
		"token_type": "Bearer", "expires_in": int(s.cfg.TokenLifetime.Seconds()),
		// The scopes really honoured (RFC 6749 §3.3), not all that were asked.
		"scope":        granted,
		"access_token": accessToken, "id_token": idTok,
		"project": project,
		"profile": profile,
	}
	if strings.HasPrefix(m.Profile, "Patient/") {
		_, pid, _ := fhir.SplitReference(m.Profile)
		body["patient"] = pid
	}
	// Super admins never get refresh tokens (Medplum's rule).
	if refresh != "" && !m.SuperAdmin {
		rc := &auth.Claims{LoginID: loginID, RefreshSecret: refresh, ClientID: l.Client}
		rc.Audience = jwt.ClaimStrings{s.cfg.BaseURL}
		if body["refresh_token"], err = s.signer.Sign(rc, session.RefreshLifetime); err != nil {
			return nil, err
		}
	}
	resp := bus.JSON(200, body)
	resp.Header["Cache-Control"] = "no-store"
	resp.Header["Pragma"] = "no-cache"
	return resp, nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// verifier checks tokens this service signed (refresh tokens).
func (s *Service) verifier() *auth.Verifier {
	pub := &s.signer.Key.Private.PublicKey
	return &auth.Verifier{Issuer: s.cfg.BaseURL, Audience: s.cfg.BaseURL, Keys: func(kid string) *ecdsa.PublicKey {
		if kid == s.signer.Key.ID {
			return pub
		}
		return nil
	}}
}
