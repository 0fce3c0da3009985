package signin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/kvcas"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/authserver"
	"github.com/pinion-health/pinion/services/identity/clients"
	"github.com/pinion-health/pinion/services/identity/factors"
	"github.com/pinion-health/pinion/services/identity/web"
)

// BrowserSessionTTL bounds a browser's sign-in: after it, the person
// types the password again.
const BrowserSessionTTL = 12 * time.Hour

// BrowserBucket holds signed-in browsers, keyed by a digest of the
// browser id (the cookie itself is never stored), expiring on their own.
const BrowserBucket = "pinion_browser_sessions"

// BrowserSession is a browser's sign-in.
type BrowserSession struct {
	User     string `json:"user"`     // User/<id>
	AuthTime int64  `json:"authTime"` // Unix seconds, OIDC's auth_time
	Start    int64  `json:"start"`    // Unix milliseconds, to compare with a password change
	// Method is how the person signed in: "" for a password, or
	// authExternal through their organisation's provider (a domain's: the
	// pages open no session through a project's provider).
	Method string `json:"method,omitempty"`
	// Factor: a second factor was given (a code, a recovery code, a
	// passkey); ProviderMFA: the provider asserted one (amr).
	Factor      bool `json:"factor,omitempty"`
	ProviderMFA bool `json:"providerMfa,omitempty"`
}

// Proof is what the browser's sign-in has shown.
func (bs *BrowserSession) Proof() factors.Proof {
	return factors.Proof{Method: bs.Method, ProviderMFA: bs.ProviderMFA, Factor: bs.Factor}
}

// SignInBrowser records that browser b is signed in, as bs says.
func (s *Service) SignInBrowser(ctx context.Context, b web.Browser, bs *BrowserSession) error {
	v, err := json.Marshal(bs)
	if err != nil {
		return err
	}
	_, err = s.browsers.Put(ctx, b.Key(), v)
	return err
}

// SignedIn is the browser's live sign-in, or nil. A sign-in older than the
// user's last password change (every session ended) no longer counts.
func (s *Service) SignedIn(ctx context.Context, b web.Browser) (*BrowserSession, error) {
	if b.IsNew {
		return nil, nil
	}
	bs, _, err := kvcas.Entry[BrowserSession](ctx, s.browsers, b.Key())
	if bs == nil || err != nil {
		return nil, err
	}
	ended, err := s.sessions.SessionsEnded(ctx, bs.User)
	if err != nil {
		return nil, err
	}
	if ended > 0 && bs.Start < ended {
		return nil, nil
	}
	return bs, nil
}

// AuthRequest is an authorization request (RFC 6749 §4.1.1 with PKCE and
// OpenID Connect's nonce), as the client sent it.
type AuthRequest struct {
	ResponseType, ClientID, RedirectURI, Scope, State, Nonce string
	Challenge, ChallengeMethod, Prompt, LoginHint            string
	// Launch is SMART's EHR launch: a SmartAppLaunch id (launch.go).
	Launch string
	// MaxAge is OIDC's max_age: a sign-in older than this many seconds
	// asks for the password again. Like prompt, it is not carried by the
	// pages' forms: the sign-in they post is new.
	MaxAge string

	client map[string]any
	// target is where the browser returns: the redirect URI sent, or the
	// client's only one when none was sent (checkRedirect).
	target      string
	project     string // the client's project
	projectName string // and its name, for the consent page
	// anyProject: the client may sign people in to any of their projects
	// (a first-party client, or one registered in a super-admin project);
	// every other client, only to its own project.
	anyProject bool
	firstParty bool // the console or Medplum's CLI: no consent asked
}

func ReadAuthRequest(v url.Values) AuthRequest {
	return AuthRequest{
		ResponseType: v.Get("response_type"), ClientID: v.Get("client_id"), RedirectURI: v.Get("redirect_uri"),
		Scope: cmp.Or(v.Get("scope"), "openid"), State: v.Get("state"), Nonce: v.Get("nonce"),
		Challenge: v.Get("code_challenge"), ChallengeMethod: v.Get("code_challenge_method"),
		Prompt: v.Get("prompt"), LoginHint: v.Get("login_hint"), MaxAge: v.Get("max_age"), Launch: v.Get("launch"),
	}
}

// values are the request's parameters, carried through the pages' forms.
func (a AuthRequest) Values() url.Values {
	v := url.Values{}
	for k, x := range map[string]string{
		"response_type": a.ResponseType, "client_id": a.ClientID, "redirect_uri": a.RedirectURI, "scope": a.Scope,
		"state": a.State, "nonce": a.Nonce, "code_challenge": a.Challenge, "code_challenge_method": a.ChallengeMethod,
		"launch": a.Launch,
	} {
		if x != "" {
			v.Set(k, x)
		}
	}
	return v
}

// redirect sends the browser back to the client with these parameters and
// the request's state (RFC 6749 §4.1.2).
func (a AuthRequest) redirect(params url.Values) *bus.Response {
	if a.State != "" {
		params.Set("state", a.State)
	}
	u := a.target
	if strings.Contains(u, "?") {
		u += "&" + params.Encode()
	} else {
		u += "?" + params.Encode()
	}
	return &bus.Response{Status: 302, Header: map[string]string{"Location": u, "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}}
}

func (a AuthRequest) fail(code, desc string) *bus.Response {
	return a.redirect(url.Values{"error": {code}, "error_description": {desc}})
}

// CheckClient finds the client and checks the redirect URI against the
// ones it registered, exactly. Until both hold, nothing may be redirected
// to: the answer is a page.
func (s *Service) CheckClient(ctx context.Context, a *AuthRequest) (problem string, err error) {
	if a.ClientID == "" {
		return "The application did not say who it is (client_id is missing).", nil
	}
	if a.client = clients.Builtin(a.ClientID, s.cfg.BaseURL); a.client != nil {
		a.firstParty, a.anyProject = true, true
		return a.checkRedirect(), nil
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, "ClientApplication", a.ClientID)
	if err != nil {
		var fe *fhir.Error
		if errors.As(err, &fe) && fe.Status < 500 {
			return "The application is not known here (client_id " + a.ClientID + ").", nil
		}
		return "", err
	}
	if a.client, err = res.Decode(); err != nil {
		return "", err
	}
	a.project = res.Project
	if a.projectName, a.anyProject, err = s.clients.ProjectOf(ctx, a.project); err != nil {
		return "", err
	}
	return a.checkRedirect(), nil
}

// checkRedirect checks the request's redirect URI against the client's,
// exactly (no prefix, no normalising); a request without one goes to the
// client's only one, as RFC 6749 §3.1.2.3 allows.
func (a *AuthRequest) checkRedirect() (problem string) {
	registered := clients.RegisteredRedirects(a.client)
	a.target = a.RedirectURI
	if a.target == "" && len(registered) == 1 {
		a.target = registered[0]
	}
	if a.target == "" || !slices.Contains(registered, a.target) {
		return "The application asked to return to an address it did not register (redirect_uri)."
	}
	return ""
}

// checkRequest finds what is wrong with a request from a known client, as
// an OAuth error code and description to redirect with.
func (a AuthRequest) checkRequest() (code, desc string) {
	switch {
	case a.ResponseType != "code":
		return "unsupported_response_type", "Only response_type=code is supported"
	case a.Challenge == "" && a.client["pkceOptional"] != true:
		return "invalid_request", "Missing code_challenge (PKCE is required)"
	case a.ChallengeMethod != "" && a.ChallengeMethod != "S256" && a.ChallengeMethod != "plain":
		return "invalid_request", "Invalid code_challenge_method"
	case a.Prompt != "" && a.Prompt != "none" && a.Prompt != "login" && a.Prompt != "consent" && a.Prompt != "select_account":
		return "invalid_request", "Invalid prompt"
	case a.MaxAge != "" && a.maxAge() < 0:
		return "invalid_request", "Invalid max_age"
	}
	return "", ""
}

// Authorize is /oauth2/authorize: the browser side of the authorization
// code flow. GET starts it; the sign-in and project pages post back here.
func (s *Service) Authorize(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	b := web.BrowserOf(r)
	params := r.Query
	var form url.Values
	if r.Method == "POST" {
		var refused *bus.Response
		var err error
		if form, refused, err = s.pages.Form(ctx, r, b); form == nil {
			return refused, err
		}
		params = form
	}
	a := ReadAuthRequest(params)
	problem, err := s.CheckClient(ctx, &a)
	if err != nil {
		return nil, err
	}
	if problem != "" {
		return s.pages.Message(400, b, "Sign-in cannot start", "", "", problem, "Go back to the application and try again, or tell its makers.")
	}
	if code, desc := a.checkRequest(); code != "" {
		return a.fail(code, desc), nil
	}
	if refused, err := s.checkLaunch(ctx, a); refused != nil || err != nil {
		return refused, err
	}
	bs, err := s.SignedIn(ctx, b)
	if err != nil {
		return nil, err
	}
	switch {
	case form != nil && form.Has("password"):
		return s.signInPosted(ctx, r, b, a, form)
	case form != nil && form.Has("mfa_code"):
		return s.factorPosted(ctx, r, b, a, form)
	case form != nil && form.Has("passkey"):
		return s.passkeyPosted(ctx, r, b, a, form)
	case form != nil && form.Has("membership") && bs != nil:
		return s.finish(ctx, r, b, a, bs, form)
	case bs != nil && a.Prompt != "login" && !a.tooOld(bs, time.Now()):
		return s.finish(ctx, r, b, a, bs, nil)
	case a.Prompt == "none":
		return a.fail("login_required", "Sign-in required"), nil
	}
	return s.signInPage(ctx, b, a, a.LoginHint, nil)
}

// maxAge is max_age in seconds, -1 when it is not a number of seconds.
func (a AuthRequest) maxAge() int64 {
	n, err := strconv.ParseInt(a.MaxAge, 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// tooOld reports whether the browser's sign-in is older than the request's
// max_age allows (OIDC Core §3.1.2.1): then the person signs in again.
// max_age=0 always asks, as prompt=login does.
func (a AuthRequest) tooOld(bs *BrowserSession, now time.Time) bool {
	if a.MaxAge == "" {
		return false
	}
	n := a.maxAge()
	return n == 0 || now.Unix()-bs.AuthTime > n
}

// signInPage shows the e-mail and password form.
func (s *Service) signInPage(ctx context.Context, b web.Browser, a AuthRequest, email string, errs map[string]string) (*bus.Response, error) {
	csrf, err := s.pages.CSRFToken(ctx, b)
	if err != nil {
		return nil, err
	}
	status := 200
	if len(errs) > 0 {
		status = 400
	}
	resp, err := s.pages.Render(status, "signin", b, web.Data{Title: "Sign in", CSRF: csrf, Email: email, Errors: errs,
		Hidden: a.Values(), App: clientName(a.client), Link: s.cfg.BaseURL + "resetpassword", LinkText: "Forgot your password?",
		Register: s.registration.Link(a)})
	if resp != nil {
		resp.Header["Content-Security-Policy"] = AuthorizeCSP(a.target)
	}
	return resp, err
}

// signInPosted checks the e-mail and password, with the same limits and
// answers as POST /auth/login.
func (s *Service) signInPosted(ctx context.Context, r *bus.Request, b web.Browser, a AuthRequest, form url.Values) (*bus.Response, error) {
	email, ok := account.FormEmail(form.Get("email"))
	if !ok {
		return s.signInPage(ctx, b, a, email, map[string]string{"email": "Valid email address is required"})
	}
	// A domain with its own provider signs in there, password or not.
	if resp, err := s.providers.Page(ctx, b, a, email); resp != nil || err != nil {
		return resp, err
	}
	if err := s.limiter.Allow(r.Remote, email); err != nil {
		return s.signInPage(ctx, b, a, email, map[string]string{"password": fhir.AsError(err).Message()})
	}
	userID, err := s.accounts.CheckPassword(ctx, email, form.Get("password"), a.project)
	if err != nil {
		s.limiter.Released(r.Remote, email)
		return nil, err
	}
	if err := s.recordPassword(ctx, r, email, userID, a.ClientID, a.project); err != nil {
		s.limiter.Released(r.Remote, email)
		return nil, err
	}
	if userID == "" {
		s.limiter.Failed(r.Remote, email)
		return s.signInPage(ctx, b, a, email, map[string]string{"password": "Email or password is invalid"})
	}
	s.limiter.Succeeded(r.Remote, email)
	// A new browser id at sign-in: an id planted before it (session
	// fixation) is worth nothing after.
	nb := web.NewBrowser()
	now := time.Now()
	bs := &BrowserSession{User: "User/" + userID, AuthTime: now.Unix(), Start: now.UnixMilli()}
	if step, _, err := s.factors.Step(ctx, userID, a.project, bs.Proof()); err != nil || step != "" {
		if err != nil {
			return nil, err
		}
		return s.AskFactor(ctx, nb, a, bs, step)
	}
	if err := s.SignInBrowser(ctx, nb, bs); err != nil {
		return nil, err
	}
	resp, err := s.finish(ctx, r, nb, a, bs, nil)
	if resp != nil && resp.Header["Set-Cookie"] == "" {
		// A refusal sent back to the client keeps the sign-in, too.
		resp.Header["Set-Cookie"] = s.pages.SetCookie(nb)
	}
	return resp, err
}

// finish issues the code for the chosen membership, asking the person to
// choose when there are several and to consent to a client they have not
// consented to; form is the posted project or consent page, if any.
func (s *Service) finish(ctx context.Context, r *bus.Request, b web.Browser, a AuthRequest, bs *BrowserSession, form url.Values) (*bus.Response, error) {
	// A client gets codes for its own project's memberships only, so that
	// an application registered in one project never receives a sign-in
	// to another; first-party and super-admin-registered clients serve
	// every project of the person, who chooses one here.
	var within string
	if !a.anyProject {
		within = a.project
	}
	choices, err := s.accounts.Memberships(ctx, bs.User, within)
	if err != nil {
		return nil, err
	}
	if len(choices) == 0 {
		if a.anyProject && !s.cfg.RegisterDisabled {
			// Someone who registered and has no project yet founds one,
			// and comes back here (package registration).
			return s.registration.ProjectForm(ctx, b, a.Values(), []string{"You have no project yet."}, "", nil)
		}
		return a.fail("access_denied", "This person has no active membership in the application's project"), nil
	}
	membership := chooseMembership(choices, form.Get("membership"))
	if membership == "" {
		if a.Prompt == "none" {
			// prompt=none forbids any page (OIDC Core 3.1.2.6).
			return a.fail("account_selection_required", "Choose a project"), nil
		}
		return s.choosePage(ctx, b, a, choices)
	}
	if err := s.CheckSignIn(ctx, membership, r.Remote, bs.Proof()); err != nil {
		if errors.Is(err, ErrFactorOwed) {
			// The project chosen requires a factor this sign-in has not
			// given: enrol now, then choose again.
			now := time.Now()
			fresh := *bs
			fresh.AuthTime, fresh.Start = now.Unix(), now.UnixMilli()
			return s.AskFactor(ctx, b, a, &fresh, "enroll")
		}
		return a.fail("access_denied", fhir.AsError(err).Message()), nil
	}
	if !a.firstParty {
		if resp, err := s.askConsent(ctx, r, b, a, bs, membership, choices, form); resp != nil || err != nil {
			return resp, err
		}
	}
	launch, page, err := s.launchContext(ctx, b, a, bs, membership, form)
	if page != nil || err != nil {
		return page, err
	}
	l := a.login(bs, membership)
	l.Launch = launch
	loginID := uuid.NewString()
	code := authserver.NewCode(loginID, &l, time.Now())
	if err := s.PutSignIn(ctx, r, loginID, &l); err != nil {
		return nil, err
	}
	resp := a.redirect(url.Values{"code": {code}})
	resp.Header["Set-Cookie"] = s.pages.SetCookie(b)
	return resp, nil
}

// chooseMembership is the membership a browser sign-in is for: the only
// one, or the one chosen among several; "" when the person must choose.
func chooseMembership(choices []account.Choice, chosen string) string {
	if len(choices) == 1 {
		return choices[0].ID
	}
	for _, c := range choices {
		if chosen != "" && c.ID == chosen {
			return c.ID
		}
	}
	return ""
}

// Login is the sign-in a browser's authorization request makes, for the
// membership chosen. Without a code challenge (a client that may skip
// PKCE) the code is redeemed without a verifier; a challenge without a
// method is plain (RFC 7636 §4.3).
func (a AuthRequest) login(bs *BrowserSession, membership string) session.Login {
	return session.Login{
		User: bs.User, Client: a.ClientID, Scope: a.Scope, Nonce: a.Nonce, Membership: membership,
		Challenge: a.Challenge, ChallengeMethod: cmp.Or(a.ChallengeMethod, "plain"), NoPKCE: a.Challenge == "",
		AuthTime: bs.AuthTime, Start: bs.Start, RedirectURI: a.RedirectURI, Consented: !a.firstParty,
		AuthMethod: bs.Method,
	}
}

// choosePage lists the person's projects and profiles to sign in to.
func (s *Service) choosePage(ctx context.Context, b web.Browser, a AuthRequest, choices []account.Choice) (*bus.Response, error) {
	csrf, err := s.pages.CSRFToken(ctx, b)
	if err != nil {
		return nil, err
	}
	var opts []web.Choice
	for _, c := range choices {
		opts = append(opts, web.Choice{ID: c.ID, Project: display(c.Project), Profile: display(c.Profile)})
	}
	resp, err := s.pages.Render(200, "choose", b, web.Data{Title: "Choose a project", CSRF: csrf, Hidden: a.Values(),
		App: clientName(a.client), Choices: opts})
	if resp != nil {
		resp.Header["Content-Security-Policy"] = AuthorizeCSP(a.target)
		resp.Header["Set-Cookie"] = s.pages.SetCookie(b)
	}
	return resp, err
}

func display(r *fhir.Reference) string {
	if r == nil {
		return ""
	}
	return cmp.Or(r.Display, r.Reference)
}

func clientName(c map[string]any) string {
	n, _ := c["name"].(string)
	return cmp.Or(n, "An application")
}

// AuthorizeCSP is the pages' policy, but a form may also end in a redirect
// to the client (Chromium applies form-action to the redirect too).
func AuthorizeCSP(redirectURI string) string {
	target := "'self'"
	if u, err := url.Parse(redirectURI); err == nil && u.Scheme != "" {
		if u.Host != "" {
			target += " " + u.Scheme + "://" + u.Host
		} else {
			target += " " + u.Scheme + ":"
		}
	}
	return strings.Replace(web.CSP, "form-action 'self'", "form-action "+target, 1)
}
