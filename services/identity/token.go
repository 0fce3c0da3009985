package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
)

// tokenError is an OAuth2 error answer: RFC 6749 §5.2's code, with
// Medplum's text as its description. A client that failed to authenticate
// gets 401 and a Basic challenge, as §5.2 asks; everything else is 400.
func tokenError(code, desc string) *bus.Response {
	status := 400
	if code == "invalid_client" {
		status = 401
	}
	resp := bus.JSON(status, map[string]string{"error": code, "error_description": desc})
	if status == 401 {
		resp.Header["WWW-Authenticate"] = `Basic realm="token"`
	}
	resp.Header["Cache-Control"] = "no-store"
	resp.Header["Pragma"] = "no-cache"
	return resp
}

// clientEntry caches what issuing a client token needs, so that issuance
// costs no database query once a client is warm.
type clientEntry struct {
	cred       *clientCred
	jwks       bool // it has a jwksUri: it authenticates with assertions
	membership string
	loginID    string
	// displays are the names the membership keeps for its project and
	// profile, read when the client was loaded: a changed membership
	// empties the cache (onResourceEvent), so they are never older than
	// the entry itself, and a token answer needs no read for them.
	displays memberDisplays
}

// clientTTL bounds how long a cached client is trusted without events;
// maxClients bounds how many are cached (clients, not callers: only
// existing clients are cached).
const (
	clientTTL  = time.Minute
	maxClients = 10_000
)

// token is POST /oauth2/token. Its grants refuse with a *refusal error,
// which becomes an OAuth error answer here, in one place; any other error
// is the service failing (a 5xx).
func (s *Service) token(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	resp, err := s.grant(ctx, r)
	if no := (*refusal)(nil); errors.As(err, &no) {
		return no.response(), nil
	}
	return resp, err
}

func (s *Service) grant(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	ct := r.Get("Content-Type")
	if !strings.HasPrefix(strings.ToLower(ct), "application/x-www-form-urlencoded") {
		return nil, &refusal{"invalid_request", "Unsupported content type", 0}
	}
	form, err := url.ParseQuery(string(r.Body))
	if err != nil {
		return nil, &refusal{"invalid_request", "Could not parse form", 0}
	}
	switch gt := form.Get("grant_type"); gt {
	case "":
		return nil, &refusal{"invalid_request", "Missing grant_type", 0}
	case "client_credentials":
		return s.clientCredentials(ctx, r, form)
	case "authorization_code":
		return s.authorizationCode(ctx, r, form)
	case "refresh_token":
		return s.refreshToken(ctx, r, form)
	case grantTokenExchange:
		return s.tokenExchange(ctx, r, form)
	default:
		// RFC 6749 §5.2's code (jwt-bearer, password, ...), with Medplum's text.
		return nil, &refusal{"unsupported_grant_type", "Unsupported grant_type", 0}
	}
}

// clientAuth reads the client's id and secret from HTTP Basic (the
// Authorization header) or else the form (RFC 6749 §2.3.1): when both
// come, the header counts and the form is not read.
func clientAuth(authorization string, form url.Values) (id, secret string, no *refusal) {
	if authorization != "" {
		var ok bool
		if id, secret, ok = basicHalves(authorization); !ok {
			return "", "", &refusal{"invalid_request", "Invalid authorization header", 0}
		}
	} else {
		id, secret = form.Get("client_id"), form.Get("client_secret")
	}
	switch {
	case id == "":
		return "", "", &refusal{"invalid_request", "Missing client_id", 0}
	case secret == "":
		return "", "", &refusal{"invalid_request", "Missing client_secret", 0}
	}
	return id, secret, nil
}

func (s *Service) clientCredentials(ctx context.Context, r *bus.Request, form url.Values) (*bus.Response, error) {
	var (
		c      *clientEntry
		member *session.Membership
		no     *refusal
		err    error
		id     string
	)
	if form.Has("client_assertion_type") || form.Has("client_assertion") {
		// private_key_jwt: the assertion stands in for the secret.
		if id, no, err = s.clientAssertion(ctx, form.Get("client_assertion_type"), form.Get("client_assertion")); err == nil && no == nil {
			c, member, no, err = s.authenticateClient(ctx, id, r.Remote, session.AppliedRevision(r.Get(session.AppliedHeader)), func(*clientEntry) bool { return true })
		}
	} else {
		var secret string
		if id, secret, no = clientAuth(r.Get("Authorization"), form); no != nil {
			return nil, no
		}
		c, member, no, err = s.authenticateClient(ctx, id, r.Remote, session.AppliedRevision(r.Get(session.AppliedHeader)), s.secretProof(ctx, id, secret))
	}
	if err != nil {
		return nil, err
	}
	if no != nil {
		return nil, no
	}
	scope := form.Get("scope")
	if scope == "" {
		scope = "openid"
	}
	ref := "ClientApplication/" + id
	claims := &auth.Claims{LoginID: c.loginID, Username: id, Profile: ref, Scope: scope, ClientID: id}
	claims.Subject = id
	claims.Audience = jwt.ClaimStrings{s.cfg.BaseURL}
	accessToken, err := s.signer.Sign(claims, s.cfg.TokenLifetime)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	project, profile := c.displays.refs(member.Project, ref)
	body := clientTokenAnswer{
		TokenType:   "Bearer",
		ExpiresIn:   int(s.cfg.TokenLifetime.Seconds()),
		Scope:       access.GrantedScope(scope),
		AccessToken: accessToken,
		Project:     project,
		Profile:     profile,
	}
	// An ID token only when the client asked for openid itself: OpenID
	// Connect defines none for client_credentials (no person signs in),
	// and the default scope "openid" is Medplum's label for the login, not
	// a request for one. The second signature was a third of the CPU of
	// every client token (issue 39).
	if hasScope(form.Get("scope"), "openid") {
		idc := &auth.Claims{LoginID: c.loginID, FHIRUser: ref, ClientID: id}
		idc.Subject = id
		idc.Audience = jwt.ClaimStrings{id}
		// ES256, as the access token: no person signed in, so no relying
		// party verifies it as OpenID sign-in, and an RS256 signature
		// (1.5 ms, 30 times ES256's) would set the pace of client
		// tokens. Discovery lists both algorithms.
		if body.IDToken, err = s.signer.Sign(idc, s.cfg.TokenLifetime); err != nil {
			return nil, fmt.Errorf("sign: %w", err)
		}
	}
	resp := bus.JSON(200, body)
	resp.Header["Cache-Control"] = "no-store"
	resp.Header["Pragma"] = "no-cache"
	return resp, nil
}

// refusal is why the token endpoint issues no tokens: RFC 6749 §5.2's code
// and Medplum's text. It is an error, answered by token; rev, when set, is
// the logins bucket revision of the revocation the refusal wrote, which the
// caller's next request must see.
type refusal struct {
	code, text string
	rev        uint64
}

func (r *refusal) Error() string { return r.code + ": " + r.text }

// revoked is the refusal, marked with the revocation it wrote.
func (r *refusal) revoked(rev uint64) *refusal {
	c := *r
	c.rev = rev
	return &c
}

// authenticateClient makes the checks every client authentication shares,
// the token endpoint's client_credentials grant and HTTP Basic on the API:
// the client exists and has a membership, the secret is its current or
// retiring one, and the membership is active and allows the address.
//
// proof is how the client proved who it is: its secret (secretProof), or
// an assertion already verified. applied is the memberships revision the
// forwarding gateway had applied (0: none named), which the membership
// entry must be at least as fresh as.
func (s *Service) authenticateClient(ctx context.Context, id, remote string, applied uint64, proof func(*clientEntry) bool) (*clientEntry, *session.Membership, *refusal, error) {
	c, err := s.client(ctx, id)
	if err != nil {
		return nil, nil, nil, err
	}
	if c == nil || c.cred == nil || c.membership == "" {
		return nil, nil, &refusal{"invalid_client", "Invalid client", 0}, nil
	}
	if !proof(c) {
		return nil, nil, &refusal{"invalid_client", "Invalid secret", 0}, nil
	}
	// The cache learns of a removed membership from events, which may come
	// after the removal was answered; the session bucket is written before
	// that answer, so its entry, as fresh as the gateway's view
	// (clientMemberships), is what the client may do now.
	member, err := s.clientMembership(ctx, c.membership, applied)
	if errors.Is(err, session.ErrNotFound) {
		s.forgetClient(id)
		return nil, nil, &refusal{"invalid_client", "Invalid client", 0}, nil
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("session membership: %w", err)
	}
	if !member.Active {
		// Medplum issues the token and refuses its every use; refusing it
		// here says why.
		return nil, nil, &refusal{"unauthorized_client", "Profile not active", 0}, nil
	}
	if !member.AllowsAddress(remote) {
		return nil, nil, addressRefused, nil
	}
	return c, member, nil, nil
}

// clientMembership is a client's membership entry, from the watched copy
// when the service keeps one.
func (s *Service) clientMembership(ctx context.Context, id string, applied uint64) (*session.Membership, error) {
	if s.members == nil {
		return s.sessions.GetMembership(ctx, id)
	}
	return s.members.Get(ctx, id, applied)
}

// secretProof checks a presented secret against the client's current and
// retiring ones.
func (s *Service) secretProof(ctx context.Context, id, secret string) func(*clientEntry) bool {
	return func(c *clientEntry) bool { return c.cred.matches(secret) || s.matchesFresh(ctx, id, secret) }
}

// addressRefused is a client refused for its address, which HTTP Basic
// answers as the API does (403) rather than as a failed authentication.
var addressRefused = &refusal{"unauthorized_client", fhir.AddressNotAllowed().Outcome.Issue[0].Details.Text, 0}

// basic is HTTP Basic client authentication on the API (the gateway asks,
// with the id and secret it read from the Authorization header): the same
// checks as the token endpoint, answered with the client's login. Failures
// count against the sign-in limiter, per client and address, as password
// failures do; the caller gets 401 (403 for a blocked address) without
// learning which check failed.
func (s *Service) basic(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	var in bus.BasicAuth
	if err := json.Unmarshal(r.Body, &in); err != nil || in.ID == "" || in.Secret == "" {
		return nil, fhir.Unauthorized()
	}
	key := "client:" + in.ID
	if err := s.limiter.Allow(r.Remote, key); err != nil {
		return nil, err
	}
	c, _, no, err := s.authenticateClient(ctx, in.ID, r.Remote, session.AppliedRevision(r.Get(session.AppliedHeader)), s.secretProof(ctx, in.ID, in.Secret))
	if err != nil {
		s.limiter.Released(r.Remote, key)
		return nil, err
	}
	switch {
	case no == addressRefused:
		s.limiter.Released(r.Remote, key)
		return nil, fhir.AddressNotAllowed()
	case no != nil:
		s.limiter.Failed(r.Remote, key)
		return nil, fhir.Unauthorized()
	}
	s.limiter.Succeeded(r.Remote, key)
	return bus.JSON(200, bus.BasicLogin{LoginID: c.loginID}), nil
}

// matchesFresh checks a secret the cached client refused against the stored
// credentials: a secret just rotated in works at once even on an instance
// that has not yet heard of the rotation.
func (s *Service) matchesFresh(ctx context.Context, id, secret string) bool {
	cred, err := s.clientCred(ctx, id)
	if err != nil || cred == nil || !cred.matches(secret) {
		return false
	}
	s.forgetClient(id)
	return true
}

// client returns the cached client, loading it on a miss. nil means no such
// client (or one without a membership).
func (s *Service) client(ctx context.Context, id string) (*clientEntry, error) {
	if c, ok := s.clients.Get(id); ok {
		return c, nil
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, "ClientApplication", id)
	if fhir.Missing(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var app struct {
		JWKSURI string `json:"jwksUri"`
	}
	if err := json.Unmarshal(res.JSON, &app); err != nil {
		return nil, err
	}
	cred, err := s.clientCred(ctx, id)
	if err != nil {
		return nil, err
	}
	c := &clientEntry{cred: cred, jwks: app.JWKSURI != ""}
	ref := "ClientApplication/" + id
	q, err := search.Parse("ProjectMembership", url.Values{"user": {ref}, "_count": {"2"}})
	if err != nil {
		return nil, err
	}
	page, err := s.repo.Search(ctx, repo.AllProjects, "ProjectMembership", q)
	if err != nil {
		return nil, err
	}
	if len(page.Resources) > 0 {
		pm := page.Resources[0]
		c.membership = pm.ID
		// One login per client: client tokens are cheap to issue and all of
		// them stop together when the client or its membership goes.
		c.loginID = uuid.NewSHA1(account.IDNamespace, []byte("client-login:"+id+":"+pm.ID)).String()
		c.displays = displaysOf(pm.JSON)
		if _, err := s.sessions.PutLogin(ctx, c.loginID, session.Login{Membership: pm.ID, User: ref, Client: id, AuthMethod: authClient}); err != nil {
			return nil, fmt.Errorf("session login: %w", err)
		}
	}
	s.clients.Add(id, c)
	return c, nil
}

// announceClient forgets a client here and in every other identity
// instance, after its credentials changed.
func (s *Service) announceClient(id string) {
	s.forgetClient(id)
	if err := s.nc.Publish(bus.ClientChangedSubject, []byte(id)); err != nil {
		s.log.Warn("client change not announced; other instances trust their cache up to a minute", "client", id, "err", err)
	}
}

func (s *Service) forgetClient(id string) { s.clients.Remove(id) }

// onResourceEvent drops cached clients when clients or memberships change.
func (s *Service) onResourceEvent(m *nats.Msg) {
	var ev repo.Event
	if json.Unmarshal(m.Data, &ev) != nil {
		return
	}
	switch ev.Type {
	case "ClientApplication":
		s.forgetClient(ev.ID)
	case "ProjectMembership", "AccessPolicy":
		s.clients.Purge()
	}
}

// clientTokenAnswer is the token endpoint's answer to a client's own
// client_credentials grant (Medplum's fields).
type clientTokenAnswer struct {
	TokenType   string         `json:"token_type"`
	ExpiresIn   int            `json:"expires_in"`
	Scope       string         `json:"scope"`
	AccessToken string         `json:"access_token"`
	IDToken     string         `json:"id_token,omitempty"`
	Project     fhir.Reference `json:"project"`
	Profile     fhir.Reference `json:"profile"`
}

// memberDisplays are a membership's project and profile references with
// the display names it keeps for them.
type memberDisplays struct {
	Project fhir.Reference `json:"project"`
	Profile fhir.Reference `json:"profile"`
}

// displaysOf reads a stored ProjectMembership's references; a membership
// that does not decode has none, and its answers carry bare references.
func displaysOf(membershipJSON []byte) memberDisplays {
	var d memberDisplays
	if json.Unmarshal(membershipJSON, &d) != nil {
		return memberDisplays{}
	}
	return d
}

// refs are the project and profile of a token answer: the bare
// references, named with the membership's display names where it names
// the same resources.
func (d memberDisplays) refs(projectID, profileRef string) (project, profile fhir.Reference) {
	project, profile = fhir.Reference{Reference: "Project/" + projectID}, fhir.Reference{Reference: profileRef}
	if d.Project.Reference == project.Reference {
		project.Display = d.Project.Display
	}
	if d.Profile.Reference == profile.Reference {
		profile.Display = d.Profile.Display
	}
	return project, profile
}

// memberRefs are the project and profile of a token answer, with the
// display names the membership keeps (Medplum's client shows them: the
// command line tool's whoami prints them). Without the membership at hand,
// the bare references still answer.
func (s *Service) memberRefs(ctx context.Context, membership, projectID, profileRef string) (project, profile fhir.Reference) {
	res, err := s.repo.Read(ctx, repo.AllProjects, "ProjectMembership", membership)
	if err != nil {
		s.log.Warn("token answer without display names", "membership", membership, "err", err)
		return memberDisplays{}.refs(projectID, profileRef)
	}
	return displaysOf(res.JSON).refs(projectID, profileRef)
}
