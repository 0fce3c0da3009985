package federation

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/google/uuid"
	"github.com/hashicorp/golang-lru/v2/expirable"
	"golang.org/x/oauth2"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/egress"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/authserver"
	"github.com/pinion-health/pinion/services/identity/clients"
	"github.com/pinion-health/pinion/services/identity/factors"
	"github.com/pinion-health/pinion/services/identity/signin"
)

// Bounds on what /auth/external reads: the query a browser brings back
// from the provider, and how long the provider may take to answer.
const (
	maxExternalState = 4096
	maxExternalCode  = 2048
	externalTimeout  = 10 * time.Second
)

// externalState is the state Medplum's client sends to the provider and
// the provider hands back to /auth/external: the sign-in it continues
// (Medplum's ExternalAuthState). It comes from the browser, so it is
// trusted for nothing but what the person could ask for anyway: it picks
// a provider (the client's, or the domain's), and the sign-in it makes is
// confined to the client's project when the client's provider vouched.
// A sign-in Pinion's own page started carries no such state: the server
// keeps it (page.go).
type externalState struct {
	Domain              string `json:"domain"`
	ProjectID           string `json:"projectId"`
	ClientID            string `json:"clientId"`
	Scope               string `json:"scope"`
	Nonce               string `json:"nonce"`
	Launch              string `json:"launch"`
	CodeChallenge       string `json:"codeChallenge"`
	CodeChallengeMethod string `json:"codeChallengeMethod"`
	RedirectURI         string `json:"redirectUri"`
}

// serverOnlyStateFields are fields a state from the browser may not carry:
// earlier versions of the sign-in page put them in a state the browser
// held, and a forged one opened a session for anyone (issue 52).
var serverOnlyStateFields = []string{"authorize", "browser"}

// identityProvider is Medplum's IdentityProvider, on a ClientApplication
// or a DomainConfiguration. issuer (and jwksUrl, or the issuer's
// discovery document) are what Pinion checks the ID token against.
type identityProvider struct {
	Issuer          string `json:"issuer"`
	Audience        string `json:"audience"`
	JWKSURL         string `json:"jwksUrl"`
	AuthorizeURL    string `json:"authorizeUrl"`
	TokenURL        string `json:"tokenUrl"`
	TokenAuthMethod string `json:"tokenAuthMethod"`
	UserInfoURL     string `json:"userInfoUrl"`
	ClientID        string `json:"clientId"`
	ClientSecret    string `json:"clientSecret"`
	UsePkce         bool   `json:"usePkce"`
	UseSubject      bool   `json:"useSubject"`
}

// externalClaims are the ID token claims a sign-in uses.
type externalClaims struct {
	Subject       string   `json:"sub"`
	Email         string   `json:"email"`
	EmailVerified *bool    `json:"email_verified"`
	Nonce         string   `json:"nonce"`
	AMR           []string `json:"amr"`
}

// assertsFactor reports whether the provider says the person gave a
// second factor (RFC 8176's amr values for one): what a project that
// trusts its provider (trustIdentityProviderMfa) takes for Pinion's own.
func (c *externalClaims) assertsFactor() bool {
	return slices.ContainsFunc(c.AMR, func(m string) bool { return m == "mfa" || m == "otp" || m == "hwk" })
}

// verifiers caches one ID token verifier per provider (issuer, key set,
// audience), so its key set, which go-oidc refreshes when it meets an
// unknown key id, is not fetched on every sign-in.
type verifiers = expirable.LRU[string, *oidc.IDTokenVerifier]

const (
	maxVerifiers = 256
	verifierTTL  = time.Hour
)

// signingAlgs are the ID token algorithms accepted from a provider named
// by its key set URL (a discovered provider says its own): asymmetric
// only, so nobody holding the client secret can mint one.
var signingAlgs = []string{oidc.RS256, oidc.RS384, oidc.RS512, oidc.ES256, oidc.ES384, oidc.ES512, oidc.PS256, oidc.EdDSA}

// badExternal is the answer for a code the provider would not exchange or
// an ID token that does not verify; the reason is logged, not told.
var badExternal = fhir.BadRequest("Failed to verify code - check your identity provider configuration")

// ExternalCallback is GET /auth/external?code&state, where a provider
// sends the browser back. A state Pinion's sign-in page started is a
// nonce the server keeps (page.go); any other is Medplum's
// client's JSON state. The code is exchanged at the provider, its ID
// token verified (signature against the provider's keys, issuer,
// audience, expiry and nonce; Medplum only decodes it), the person found
// by e-mail or, with useSubject, by the subject as a membership's
// externalId, and the sign-in finished as Medplum finishes it: a redirect
// to the client's redirect URI with login and code, or to the app's
// sign-in page with the login, which asks for a second factor first
// where a password sign-in would.
func (s *Service) ExternalCallback(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	code, rawState := r.Query.Get("code"), r.Query.Get("state")
	switch {
	case code == "":
		return nil, fhir.BadRequest("Missing code")
	case rawState == "":
		return nil, fhir.BadRequest("Missing state")
	case len(code) > maxExternalCode || len(rawState) > maxExternalState:
		return nil, fhir.BadRequest("Invalid state")
	}
	if !strings.HasPrefix(strings.TrimSpace(rawState), "{") {
		return s.externalPageCallback(ctx, r, code, rawState)
	}
	st, err := readExternalState(rawState)
	if err != nil {
		return nil, err
	}
	idp, client, err := s.externalProvider(ctx, st)
	if err != nil {
		return nil, err
	}
	if idp == nil {
		return nil, fhir.BadRequest("Identity provider not found")
	}
	verifier := ""
	if idp.UsePkce {
		// As Medplum sends it: the state's challenge is the verifier.
		verifier = st.CodeChallenge
	}
	claims, err := s.verifyExternalCode(ctx, idp, code, verifier, st.Nonce, false)
	if err != nil {
		return nil, err
	}
	email, externalID, err := claims.identity(idp)
	if err != nil {
		return nil, err
	}
	if st.Domain != "" && !strings.HasSuffix(email, "@"+strings.ToLower(st.Domain)) {
		return nil, fhir.BadRequest("Email address does not match domain")
	}
	projectID := st.ProjectID
	proof := factors.Proof{Method: signin.AuthExternal, ProviderMFA: claims.assertsFactor()}
	if client != nil {
		if projectID != "" && projectID != client.Project {
			return nil, fhir.BadRequest("Invalid project")
		}
		projectID = client.Project
		if client.vouched {
			// The client's own provider: its word reaches its project only.
			proof.ProviderProject = client.Project
		}
	}
	userRef, choices, err := s.externalMember(ctx, email, externalID, projectID)
	if err != nil {
		return nil, err
	}
	step, _, err := s.factors.Step(ctx, account.UserIDOf(userRef), projectID, proof)
	if err != nil {
		return nil, err
	}
	scope := cmp.Or(st.Scope, "openid offline")
	nonce := cmp.Or(st.Nonce, uuid.NewString())
	now := time.Now()
	l := session.Login{
		User: userRef, Client: st.ClientID, Scope: scope, Nonce: nonce,
		Challenge: st.CodeChallenge, ChallengeMethod: st.CodeChallengeMethod,
		AuthTime: now.Unix(), Start: now.UnixMilli(), Project: projectID,
		MFA: step, ProviderProject: proof.ProviderProject, ProviderMFA: proof.ProviderMFA,
	}
	loginID := uuid.NewString()
	var target *url.URL
	if step == "" && len(choices) == 1 && st.RedirectURI != "" && client != nil {
		// Exactly a registered address (Medplum also takes a prefix of one).
		if !slices.Contains(clients.RegisteredRedirects(client.doc), st.RedirectURI) {
			return nil, fhir.BadRequest("Invalid redirect URI")
		}
		if target, err = url.Parse(st.RedirectURI); err != nil {
			return nil, fhir.BadRequest("Invalid redirect URI")
		}
		err := s.signins.CheckSignIn(ctx, choices[0].ID, r.Remote, proof)
		switch {
		case errors.Is(err, signin.ErrFactorOwed):
			// The project requires a factor: the app's page asks for it.
			if _, err := s.signins.OwedEnrolment(ctx, loginID, &l); err != nil {
				return nil, err
			}
			target = nil
		case err != nil:
			return nil, err
		default:
			l.Membership = choices[0].ID
			q := target.Query()
			q.Set("login", loginID)
			q.Set("code", authserver.NewCode(loginID, &l, now))
			target.RawQuery = q.Encode()
		}
	}
	if target == nil {
		// The app's sign-in page asks GET /auth/login/<login> for the
		// second factor owed, the memberships, or the code when there is
		// one.
		page := "signin"
		if st.Launch != "" {
			page = "oauth"
		}
		if target, err = url.Parse(strings.TrimSuffix(s.cfg.AppBaseURL, "/") + "/" + page); err != nil {
			return nil, err
		}
		q := url.Values{"login": {loginID}, "scope": {scope}, "nonce": {nonce}}
		if st.CodeChallenge != "" {
			q.Set("code_challenge", st.CodeChallenge)
			q.Set("code_challenge_method", st.CodeChallengeMethod)
		}
		target.RawQuery = q.Encode()
	}
	l.SetOrigin(signin.AuthExternal, r.Remote, r.Get("User-Agent"))
	if err := s.putExternalSignIn(ctx, loginID, &l); err != nil {
		return nil, err
	}
	return &bus.Response{Status: 302, Header: map[string]string{"Location": target.String(), "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}}, nil
}

// readExternalState reads Medplum's JSON state, refusing one that names
// a field only the server may set.
func readExternalState(raw string) (externalState, error) {
	var st externalState
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &fields); err != nil {
		return st, fhir.BadRequest("Invalid state")
	}
	for _, f := range serverOnlyStateFields {
		if _, ok := fields[f]; ok {
			return st, fhir.BadRequest("Invalid state")
		}
	}
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return st, fhir.BadRequest("Invalid state")
	}
	if st.CodeChallenge != "" && st.CodeChallengeMethod != "plain" && st.CodeChallengeMethod != "S256" {
		return st, fhir.BadRequest("Invalid code challenge method")
	}
	return st, nil
}

// putExternalSignIn stores the login and lists it among the user's
// sessions, as putSignIn does for a password.
func (s *Service) putExternalSignIn(ctx context.Context, loginID string, l *session.Login) error {
	if _, err := s.sessions.PutLogin(ctx, loginID, *l); err != nil {
		return err
	}
	// The trail's sign-in event (recorded by route) names the person.
	audit.Note(ctx, l.User, l.Project)
	u, err := s.sessions.UserLogins(ctx)
	if err != nil {
		return err
	}
	return u.Add(ctx, l.User, loginID, time.UnixMilli(l.Start))
}

// externalClient is the ClientApplication a state names.
type externalClient struct {
	Project string
	doc     map[string]any
	// vouched: the provider used is the client's own, written by its
	// project's admins, whose word reaches that project only.
	vouched bool
}

// externalProvider finds the provider a sign-in used, as Medplum does:
// the state's client's, else its domain's.
func (s *Service) externalProvider(ctx context.Context, st externalState) (*identityProvider, *externalClient, error) {
	var client *externalClient
	if st.ClientID != "" {
		res, err := s.repo.Read(ctx, repo.AllProjects, "ClientApplication", st.ClientID)
		if err != nil {
			return nil, nil, err
		}
		doc, err := res.Decode()
		if err != nil {
			return nil, nil, err
		}
		client = &externalClient{Project: res.Project, doc: doc}
		if idp, err := providerOf(res.JSON); err != nil || idp != nil {
			client.vouched = idp != nil
			return idp, client, err
		}
	}
	if st.Domain == "" {
		return nil, client, nil
	}
	idp, err := s.domainProvider(ctx, st.Domain)
	return idp, client, err
}

// domainProvider is the identity provider of a domain's
// DomainConfiguration (written by super admins), or nil.
func (s *Service) domainProvider(ctx context.Context, domain string) (*identityProvider, error) {
	q, err := search.Parse("DomainConfiguration", url.Values{"domain": {strings.ToLower(domain)}, "_count": {"1"}})
	if err != nil {
		return nil, err
	}
	page, err := s.repo.Search(ctx, repo.AllProjects, "DomainConfiguration", q)
	if err != nil || len(page.Resources) == 0 {
		return nil, err
	}
	return providerOf(page.Resources[0].JSON)
}

// providerOf is a resource's identityProvider, or nil.
func providerOf(raw []byte) (*identityProvider, error) {
	var doc struct {
		IdentityProvider *identityProvider `json:"identityProvider"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	return doc.IdentityProvider, nil
}

// verifyExternalCode exchanges the code at the provider's token endpoint
// (with verifier as the PKCE verifier, when given) and returns the claims
// of its ID token once verified. The token's nonce must be nonce when it
// carries one, and must be there at all when nonceRequired (Pinion's page
// sends one; Medplum's client sends none to the provider).
func (s *Service) verifyExternalCode(ctx context.Context, idp *identityProvider, code, verifier, nonce string, nonceRequired bool) (*externalClaims, error) {
	v, err := s.externalVerifier(ctx, idp)
	if err != nil {
		return nil, err
	}
	style := oauth2.AuthStyleInHeader
	if idp.TokenAuthMethod == "client_secret_post" {
		style = oauth2.AuthStyleInParams
	}
	conf := oauth2.Config{
		ClientID: idp.ClientID, ClientSecret: idp.ClientSecret, RedirectURL: s.cfg.BaseURL + "auth/external",
		Endpoint: oauth2.Endpoint{AuthURL: idp.AuthorizeURL, TokenURL: idp.TokenURL, AuthStyle: style},
	}
	var opts []oauth2.AuthCodeOption
	if verifier != "" {
		opts = append(opts, oauth2.VerifierOption(verifier))
	}
	hc := egress.Client(s.cfg.EgressPrivate, externalTimeout)
	tok, err := conf.Exchange(context.WithValue(ctx, oauth2.HTTPClient, hc), code, opts...)
	if err != nil {
		s.log.Warn("external sign-in: the provider refused the code", "tokenUrl", idp.TokenURL, "err", err)
		return nil, badExternal
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		s.log.Warn("external sign-in: the provider's answer has no id_token", "tokenUrl", idp.TokenURL)
		return nil, badExternal
	}
	idt, err := v.Verify(ctx, raw)
	if err != nil {
		s.log.Warn("external sign-in: ID token refused", "issuer", idp.Issuer, "err", err)
		return nil, badExternal
	}
	var c externalClaims
	if err := idt.Claims(&c); err != nil {
		return nil, badExternal
	}
	// The nonce the sign-in began with: a token minted for another
	// sign-in (replayed) has another.
	if (c.Nonce != "" || nonceRequired) && c.Nonce != nonce {
		s.log.Warn("external sign-in: ID token nonce does not match", "issuer", idp.Issuer)
		return nil, badExternal
	}
	return &c, nil
}

// externalVerifier checks ID tokens of a provider: its issuer's keys, from
// jwksUrl or from the issuer's discovery document; the audience is the
// provider's audience or, by default, its client id.
func (s *Service) externalVerifier(ctx context.Context, idp *identityProvider) (*oidc.IDTokenVerifier, error) {
	if idp.Issuer == "" {
		s.log.Error("identity provider without issuer: its ID tokens cannot be verified", "authorizeUrl", idp.AuthorizeURL)
		return nil, fhir.BadRequest("Identity provider has no issuer: set identityProvider.issuer")
	}
	audience := idp.Audience
	if audience == "" {
		audience = idp.ClientID
	}
	key := idp.Issuer + "\n" + idp.JWKSURL + "\n" + audience
	if v, ok := s.verifiers.Get(key); ok {
		return v, nil
	}
	// The key set outlives this request: its fetches get their own bound.
	kctx := oidc.ClientContext(context.Background(), egress.Client(s.cfg.EgressPrivate, externalTimeout))
	var v *oidc.IDTokenVerifier
	cfg := &oidc.Config{ClientID: audience}
	if idp.JWKSURL != "" {
		cfg.SupportedSigningAlgs = signingAlgs
		v = oidc.NewVerifier(idp.Issuer, oidc.NewRemoteKeySet(kctx, idp.JWKSURL), cfg)
	} else {
		dctx, cancel := context.WithTimeout(kctx, externalTimeout)
		defer cancel()
		p, err := oidc.NewProvider(dctx, idp.Issuer)
		if err != nil {
			s.log.Warn("external sign-in: provider discovery failed", "issuer", idp.Issuer, "err", err)
			return nil, badExternal
		}
		v = p.Verifier(cfg)
	}
	s.verifiers.Add(key, v)
	return v, nil
}

// identity is what names the person: the subject (useSubject) or the
// e-mail, lower case, which must not be marked unverified.
func (c *externalClaims) identity(idp *identityProvider) (email, externalID string, err error) {
	if idp.UseSubject {
		if c.Subject == "" {
			return "", "", fhir.BadRequest("External token does not contain subject")
		}
		return "", c.Subject, nil
	}
	if c.Email == "" {
		return "", "", fhir.BadRequest("External token does not contain email address")
	}
	// An address the provider says it has not verified names nobody.
	if c.EmailVerified != nil && !*c.EmailVerified {
		return "", "", fhir.BadRequest("External token's email address is not verified")
	}
	return strings.ToLower(c.Email), "", nil
}

// externalMember is the user an external identity names and the active
// memberships (in the project, if one is given) they may use: with a
// subject, only those carrying it as externalId.
func (s *Service) externalMember(ctx context.Context, email, externalID, projectID string) (string, []account.Choice, error) {
	userRef, err := s.externalUser(ctx, email, externalID, projectID)
	if err != nil {
		return "", nil, err
	}
	choices, err := s.accounts.Memberships(ctx, userRef, projectID)
	if err != nil {
		return "", nil, err
	}
	if externalID != "" {
		choices = slices.DeleteFunc(choices, func(c account.Choice) bool { return !s.hasExternalID(ctx, c.ID, externalID) })
	}
	if len(choices) == 0 {
		return "", nil, fhir.BadRequest("User not found")
	}
	return userRef, choices, nil
}

// externalUser is the user an external sign-in names: by e-mail (the
// project's own user first, then the server's), or, by subject, the user
// of a membership in the project whose externalId it is.
func (s *Service) externalUser(ctx context.Context, email, externalID, projectID string) (string, error) {
	if externalID != "" {
		params := url.Values{"external-id": {externalID}, "_count": {"2"}}
		if projectID != "" {
			params.Set("project", "Project/"+projectID)
		}
		q, err := search.Parse("ProjectMembership", params)
		if err != nil {
			return "", err
		}
		page, err := s.repo.Search(ctx, repo.AllProjects, "ProjectMembership", q)
		if err != nil {
			return "", err
		}
		users := map[string]bool{}
		for _, res := range page.Resources {
			var m struct {
				User       *fhir.Reference `json:"user"`
				ExternalID string          `json:"externalId"`
			}
			if err := json.Unmarshal(res.JSON, &m); err == nil && m.User != nil && m.ExternalID == externalID {
				users[m.User.Reference] = true
			}
		}
		switch len(users) {
		case 0:
			return "", fhir.BadRequest("User not found")
		case 1:
			for u := range users {
				return u, nil
			}
		}
		// The same subject on two people: refuse rather than guess.
		return "", fhir.BadRequest("External ID matches more than one user")
	}
	// The project's own user first, as /auth/login looks them up.
	if projectID != "" {
		if id, err := s.repo.ClaimOwner(ctx, repo.UserEmailKey(projectID, email)); err != nil || id != "" {
			return "User/" + id, err
		}
	}
	if id, err := s.repo.ClaimOwner(ctx, repo.UserEmailKey("", email)); err != nil || id != "" {
		return "User/" + id, err
	}
	return "", fhir.BadRequest("User not found")
}

// hasExternalID says whether a membership carries this externalId.
func (s *Service) hasExternalID(ctx context.Context, membership, externalID string) bool {
	res, err := s.repo.Read(ctx, repo.AllProjects, "ProjectMembership", membership)
	if err != nil {
		return false
	}
	var m struct {
		ExternalID string `json:"externalId"`
	}
	return json.Unmarshal(res.JSON, &m) == nil && m.ExternalID == externalID
}

// externalLoginAge is how long after an external sign-in the app may ask
// for its result: the browser goes straight from the callback to the page.
const externalLoginAge = 10 * time.Minute

// LoginStatus is GET /auth/login/:login, where Medplum's sign-in page
// continues an external sign-in: the memberships to choose from, or, with
// one, a code. Only an external sign-in's login answers, and only until a
// membership is chosen, so its code is given once; the code is still
// bound to the sign-in's PKCE challenge.
func (s *Service) LoginStatus(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	id := r.Param("login")
	if _, err := uuid.Parse(id); err != nil {
		return nil, fhir.NotFound()
	}
	var resp *bus.Response
	_, err := s.sessions.UpdateLogin(ctx, id, func(l *session.Login) error {
		resp = nil
		if l.AuthMethod != signin.AuthExternal || time.Since(time.UnixMilli(l.Start)) > externalLoginAge {
			return session.ErrNotFound
		}
		if l.MFA != "" && !l.MFAVerified && !l.Revoked && !l.Granted {
			// The second factor first, as after a password: the app posts
			// it to /auth/mfa/verify (or login-enroll) with this login.
			rec, _, err := s.factors.Load(ctx, account.UserIDOf(l.User))
			if err != nil {
				return err
			}
			resp, err = s.signins.MFALoginAnswer(ctx, id, l.MFA, account.UserIDOf(l.User), rec)
			if err != nil {
				return err
			}
			return factors.ErrUnchanged
		}
		if err := signin.ProfileOpen(l); err != nil {
			return err
		}
		var err error
		resp, err = s.signins.LoginResult(ctx, r, id, l)
		return err
	})
	if errors.Is(err, session.ErrNotFound) {
		return nil, fhir.NotFound()
	}
	if err != nil && !errors.Is(err, factors.ErrUnchanged) {
		return nil, err
	}
	return resp, nil
}
