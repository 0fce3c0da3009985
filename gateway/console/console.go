// Package console is the administration application at /console: pages for
// a project's administrators, rendered on the server, working without
// JavaScript.
//
// It holds no rights of its own. A person signs in through Pinion's own
// authorization code flow (as the client auth.ConsoleClientID, with PKCE),
// which picks their project; the console keeps the access token in an
// HttpOnly cookie and sends every action to the services through the same
// subjects as the API, as that person. Whatever the API would refuse them,
// the console is refused too.
package console

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/webstyle"
)

// Config is what the console needs to know.
type Config struct {
	BaseURL string
	Timeout time.Duration // for each service request
}

// Authenticate verifies an access token as the API verifies a bearer
// token, from the client's address.
type Authenticate func(ctx context.Context, token, remote string) (*bus.Principal, error)

// AwaitSession holds an answer until the session change a service made is
// seen here, as the gateway does for the API (a removed member's tokens
// fail at once).
type AwaitSession func(ctx context.Context, bucket string, rev uint64)

// Console serves the pages.
type Console struct {
	cfg      Config
	nc       *nats.Conn
	auth     Authenticate
	await    AwaitSession
	clientIP func(*fiber.Ctx) string
	log      *slog.Logger
	secure   bool // cookies only over https
}

// New makes the console.
func New(cfg Config, nc *nats.Conn, a Authenticate, await AwaitSession, clientIP func(*fiber.Ctx) string, log *slog.Logger) *Console {
	return &Console{cfg: cfg, nc: nc, auth: a, await: await, clientIP: clientIP, log: log, secure: strings.HasPrefix(cfg.BaseURL, "https://")}
}

// Register adds the console's routes.
func (c *Console) Register(app *fiber.App) {
	app.Get("/console", c.home)
	app.Get("/console/callback", c.callback)
	app.Post("/console/logout", c.logout)
	app.Post("/console/secrets", c.secrets)
	app.Get("/console/members", c.members)
	app.Get("/console/members/:id/remove", c.confirmRemove)
	app.Post("/console/members/:id/remove", c.remove)
	app.Get("/console/members/:id", c.editMember)
	app.Post("/console/members/:id", c.saveMember)
	app.Post("/console/members/:id/reset-mfa", c.resetMFA)
	app.Get("/console/invite", c.inviteForm)
	app.Post("/console/invite", c.invite)
	app.Get("/console/clients", c.clients)
	app.Post("/console/clients", c.createClient)
	app.Get("/console/clients/:id", c.showClient)
	app.Post("/console/clients/:id", c.saveClient)
	app.Post("/console/clients/:id/rotate", c.rotateClient)
	app.Post("/console/clients/:id/provider", c.saveClientProvider)
	app.Get("/console/policies", c.listPolicies)
	app.Get("/console/policies/new", c.newPolicy)
	app.Post("/console/policies/new", c.savePolicy)
	app.Get("/console/policies/:id", c.showPolicy)
	app.Post("/console/policies/:id", c.savePolicy)
	app.Get("/console/bots", c.bots)
	app.Post("/console/bots", c.createBot)
	app.Get("/console/bots/:id", c.showBot)
	app.Post("/console/bots/:id/source", c.saveSource)
	app.Post("/console/bots/:id/run", c.runBot)
	app.Post("/console/bots/:id/identifiers", c.saveIdentifiers)
	app.Post("/console/bots/:id/schedule", c.saveSchedule)
	app.Post("/console/bots/:id/rollback", c.rollback)
	app.Post("/console/bots/:id/secrets", c.saveBotSecret)
	app.Get("/console/audit", c.auditLog)
	app.Get("/console/audit/patient/:id", c.auditPatient)
}

const (
	tokenCookie = "pinion_console"
	// authCookie carries an unfinished sign-in's state and PKCE verifier.
	authCookie = "pinion_console_auth"
)

//go:embed pages
var pageFiles embed.FS

var (
	pageStyle = webstyle.Base + mustRead("pages/style.css")
	// pageScript is the one script: copy buttons. Everything works
	// without it.
	pageScript = mustRead("pages/copy.js")
	pages      = map[string]*template.Template{}
	// pageCSP allows the style sheet and the script, by hash, and forms
	// that post back here; no frame, nothing from elsewhere.
	pageCSP = "default-src 'none'; style-src 'sha256-" + digest(pageStyle) + "'; script-src 'sha256-" + digest(pageScript) +
		"'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

func init() {
	for _, name := range []string{"message", "project", "members", "remove", "invite", "member", "clients", "client", "bots", "bot", "policies", "policy", "audit", "auditpatient"} {
		t := template.New("layout").Funcs(template.FuncMap{
			"style":  func() template.CSS { return template.CSS(pageStyle) },
			"script": func() template.JS { return template.JS(pageScript) },
		})
		pages[name] = template.Must(t.ParseFS(pageFiles, "pages/layout.html", "pages/"+name+".html"))
	}
}

func mustRead(name string) string {
	b, err := pageFiles.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func digest(s string) string {
	d := sha256.Sum256([]byte(s))
	return base64.StdEncoding.EncodeToString(d[:])
}

// page is what the templates show; each uses the fields it needs.
type page struct {
	Title, Base, CSRF string
	Notice, Problem   string
	Lines             []string
	Link, LinkText    string
	Project           *project
	Members           []member
	Member            *member
	Types             []string
	Filter, Next      string
	// Forms: what was entered, errors by field, choices.
	Form         map[string]string
	Errors       map[string]string
	Policies     []policyOption
	ProfileKinds []string
	Clients      []client
	Client       *client
	Secret       string    // a client secret, shown once
	Provider     *provider // a client's identity provider (client_provider.go)
	Bots         []bot
	Bot          *bot
	InputTypes   []string
	Output       *output
	Runs         []run
	Policy       *policyForm
	Audit        *auditView // the audit pages (audit.go)
}

// policyChoice is the access-policy menu of a form (template "policy").
type policyChoice struct {
	Policies        []policyOption
	Selected, Error string
}

// PolicyChoice is the page's policy menu with selected chosen.
func (p page) PolicyChoice(selected string) policyChoice {
	return policyChoice{Policies: p.Policies, Selected: selected, Error: p.Errors["policy"]}
}

// render answers with a page and the headers every page carries.
func (c *Console) render(fc *fiber.Ctx, status int, name string, p page) error {
	p.Base = c.cfg.BaseURL
	var buf bytes.Buffer
	if err := pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		return err
	}
	headers(fc)
	fc.Set(fiber.HeaderContentType, "text/html; charset=utf-8")
	return fc.Status(status).Send(buf.Bytes())
}

func headers(fc *fiber.Ctx) {
	fc.Set("Content-Security-Policy", pageCSP)
	fc.Set(fiber.HeaderXFrameOptions, "DENY")
	fc.Set(fiber.HeaderCacheControl, "no-store")
	fc.Set(fiber.HeaderReferrerPolicy, "no-referrer")
}

// message is a page of a few lines.
func (c *Console) message(fc *fiber.Ctx, status int, title string, lines ...string) error {
	return c.render(fc, status, "message", page{Title: title, Lines: lines, Link: c.cfg.BaseURL + "console", LinkText: "Back to the console"})
}

// session is a signed-in administrator: the token and who it is.
type session struct {
	token string
	who   *bus.Principal
}

// csrf is the form token of a session: a digest of its access token, which
// only the browser holding the HttpOnly cookie can have seen.
func (s *session) csrf() string {
	d := sha256.Sum256([]byte("pinion console form\x00" + s.token))
	return base64.RawURLEncoding.EncodeToString(d[:24])
}

// checkCSRF refuses a form posted without the session's token.
func (s *session) checkCSRF(fc *fiber.Ctx) bool {
	return subtle.ConstantTimeCompare([]byte(fc.FormValue("csrf")), []byte(s.csrf())) == 1
}

// signedIn finds the administrator a request comes from. With no sign-in,
// or one that no longer counts, it starts one (a redirect) and returns nil;
// a member who is not an administrator gets a page saying so.
func (c *Console) signedIn(fc *fiber.Ctx) (*session, error) {
	token := fc.Cookies(tokenCookie)
	if token == "" {
		return nil, c.startSignIn(fc)
	}
	p, err := c.auth(fc.UserContext(), token, c.clientIP(fc))
	if err != nil {
		if fe := fhir.AsError(err); fe.Status == 401 {
			return nil, c.startSignIn(fc)
		} else if fe.Status < 500 {
			return nil, c.message(fc, fe.Status, "Not allowed", outcomeText(fe))
		}
		return nil, err
	}
	s := &session{token: token, who: p}
	if !p.Admin && !p.SuperAdmin {
		return nil, c.render(fc, 403, "message", page{Title: "Not an administrator", CSRF: s.csrf(), Lines: []string{
			"You are signed in, but you are not an administrator of this project: the console is for project administrators.",
			"Sign out to use another account or choose another project.",
		}, Project: &project{}})
	}
	return s, nil
}

// startSignIn sends the browser to the authorization page, with a fresh
// state and PKCE verifier kept in a short-lived cookie.
func (c *Console) startSignIn(fc *fiber.Ctx) error {
	state, verifier := random(16), random(32)
	sum := sha256.Sum256([]byte(verifier))
	fc.Cookie(&fiber.Cookie{Name: authCookie, Value: state + "." + verifier, Path: "/console", MaxAge: 600,
		HTTPOnly: true, Secure: c.secure, SameSite: fiber.CookieSameSiteLaxMode})
	q := url.Values{
		"response_type": {"code"}, "client_id": {auth.ConsoleClientID}, "redirect_uri": {c.callbackURL()},
		"scope": {"openid"}, "state": {state},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
	}
	headers(fc)
	return fc.Redirect(c.cfg.BaseURL+"oauth2/authorize?"+q.Encode(), fiber.StatusFound)
}

func (c *Console) callbackURL() string { return c.cfg.BaseURL + "console/callback" }

func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// callback is where the authorization page returns: the code is exchanged
// for a token, kept in the console's cookie.
func (c *Console) callback(fc *fiber.Ctx) error {
	if e := fc.Query("error"); e != "" {
		return c.message(fc, 400, "Sign-in did not complete", fc.Query("error_description", e))
	}
	state, verifier, _ := strings.Cut(fc.Cookies(authCookie), ".")
	if state == "" || subtle.ConstantTimeCompare([]byte(state), []byte(fc.Query("state"))) != 1 {
		return c.message(fc, 400, "Sign-in expired", "This sign-in was started elsewhere or long ago. Open the console again to sign in.")
	}
	form := url.Values{
		"grant_type": {"authorization_code"}, "code": {fc.Query("code")}, "code_verifier": {verifier},
		"client_id": {auth.ConsoleClientID}, "redirect_uri": {c.callbackURL()},
	}
	resp, err := c.call(fc, nil, "POST", "/oauth2/token", nil, nil, "application/x-www-form-urlencoded", []byte(form.Encode()))
	if err != nil {
		return err
	}
	var tok struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int    `json:"expires_in"`
		Description string `json:"error_description"`
	}
	if err := json.Unmarshal(resp.Body, &tok); err != nil || resp.Status != 200 || tok.AccessToken == "" {
		return c.message(fc, 400, "Sign-in did not complete", tok.Description)
	}
	fc.Cookie(&fiber.Cookie{Name: authCookie, Value: "", Path: "/console", MaxAge: -1, HTTPOnly: true, Secure: c.secure})
	fc.Cookie(&fiber.Cookie{Name: tokenCookie, Value: tok.AccessToken, Path: "/console", MaxAge: tok.ExpiresIn,
		HTTPOnly: true, Secure: c.secure, SameSite: fiber.CookieSameSiteStrictMode})
	headers(fc)
	return fc.Redirect(c.cfg.BaseURL+"console", fiber.StatusSeeOther)
}

// logout ends the console's token and the browser's sign-in. Anyone
// signed in may sign out, administrator or not; the form's CSRF token is
// still required, so no other site can sign a person out.
func (c *Console) logout(fc *fiber.Ctx) error {
	token := fc.Cookies(tokenCookie)
	if p, err := c.auth(fc.UserContext(), token, c.clientIP(fc)); err == nil {
		s := &session{token: token, who: p}
		if !s.checkCSRF(fc) {
			return c.message(fc, 403, "Form expired", "This form was not sent from this console. Open the console and try again.")
		}
		// With the browser's cookie, the same call ends its sign-in too: the
		// page below then has nothing left to ask about.
		req := &bus.Request{Method: "POST", Path: "/oauth2/logout", Principal: p,
			Header: map[string]string{"Cookie": fc.Get("Cookie")}}
		if _, err := c.send(fc, req); err != nil {
			c.log.Warn("console sign-out: token not revoked", "err", err)
		}
	}
	fc.Cookie(&fiber.Cookie{Name: tokenCookie, Value: "", Path: "/console", MaxAge: -1, HTTPOnly: true, Secure: c.secure})
	headers(fc)
	return fc.Redirect(c.cfg.BaseURL+"oauth2/logout", fiber.StatusSeeOther)
}

// form is signedIn for a form post, which must carry the session's CSRF
// token. An expired sign-in is not restarted by a POST (the form would be
// lost): it is reported. nil, with the page answered, when refused.
func (c *Console) form(fc *fiber.Ctx) (*session, error) {
	if fc.Cookies(tokenCookie) == "" {
		return nil, c.message(fc, 401, "Signed out", "Your console sign-in has ended. Open the console to sign in again.")
	}
	s, err := c.signedIn(fc)
	if s == nil {
		return nil, err
	}
	if !s.checkCSRF(fc) {
		return nil, c.message(fc, 403, "Form expired", "This form was not sent from this console. Open the console and try again.")
	}
	return s, nil
}

// read reads one resource through the API's read, as the signed-in person.
func (c *Console) read(fc *fiber.Ctx, s *session, typ, id string) (*bus.Response, error) {
	return c.call(fc, s.who, "GET", "/fhir/R4/"+typ+"/"+id, map[string]string{"type": typ, "id": id}, nil, "", nil)
}

// searchAll runs a search as the signed-in person and returns the
// resources found (one page: the console asks for at most 200).
func (c *Console) searchAll(fc *fiber.Ctx, s *session, typ string, q url.Values) ([]json.RawMessage, *bus.Response, error) {
	resp, err := c.call(fc, s.who, "GET", "/fhir/R4/"+typ, map[string]string{"type": typ}, q, "", nil)
	if err != nil || resp.Status != 200 {
		return nil, resp, err
	}
	var b struct {
		Entry []struct {
			Resource json.RawMessage `json:"resource"`
		} `json:"entry"`
	}
	if err := json.Unmarshal(resp.Body, &b); err != nil {
		return nil, nil, err
	}
	out := make([]json.RawMessage, len(b.Entry))
	for i, e := range b.Entry {
		out[i] = e.Resource
	}
	return out, resp, nil
}

// call sends one request to a service as the signed-in person.
func (c *Console) call(fc *fiber.Ctx, who *bus.Principal, method, path string, params map[string]string, q url.Values, contentType string, body []byte) (*bus.Response, error) {
	req := &bus.Request{
		Method: method, Path: path, Query: q, RawQuery: q.Encode(), Params: params, Principal: who,
		Header: map[string]string{}, Body: body,
	}
	if contentType != "" {
		req.Header["Content-Type"] = contentType
	}
	return c.send(fc, req)
}

// send sends a request made by the caller, with the request's id, address
// and time bound added, to the service that answers its method and path
// over HTTP (bus.Routes): the console asks only what the API would answer.
func (c *Console) send(fc *fiber.Ctx, req *bus.Request) (*bus.Response, error) {
	subject := bus.SubjectOf(req.Method, req.Path)
	if subject == "" {
		return nil, fhir.NotFound()
	}
	ctx, cancel := context.WithTimeout(fc.UserContext(), c.cfg.Timeout)
	defer cancel()
	req.RequestID, _ = fc.Locals("rid").(string)
	req.Remote = c.clientIP(fc)
	resp, err := bus.Call(ctx, c.nc, subject, req)
	if err == nil {
		if bucket, rev, ok := resp.Session(); ok {
			c.await(ctx, bucket, rev)
		}
	}
	return resp, err
}

// fieldErrors splits a refusal into messages by form field (fields maps
// the issues' expressions, without array indices) and the rest.
func fieldErrors(resp *bus.Response, fields map[string]string) (map[string]string, string) {
	var o fhir.OperationOutcome
	if json.Unmarshal(resp.Body, &o) != nil || len(o.Issue) == 0 {
		return nil, failure(resp)
	}
	byField, rest := map[string]string{}, []string{}
	for _, is := range o.Issue {
		field := ""
		for _, e := range is.Expression {
			if f, ok := fields[arrayIndex.ReplaceAllString(e, "")]; ok {
				field = f
			}
		}
		if field != "" && byField[field] == "" {
			byField[field] = is.Details.Text
		} else {
			rest = append(rest, is.Details.Text)
		}
	}
	return byField, strings.Join(rest, " ")
}

var arrayIndex = regexp.MustCompile(`\[\d+\]`)

// failure is a service's refusal as the text to show.
func failure(resp *bus.Response) string {
	var o fhir.OperationOutcome
	if json.Unmarshal(resp.Body, &o) == nil && len(o.Issue) > 0 && o.Issue[0].Details.Text != "" {
		return o.Issue[0].Details.Text
	}
	return "The request failed (" + strings.TrimSpace(string(resp.Body)) + ")"
}

func outcomeText(e *fhir.Error) string {
	if len(e.Outcome.Issue) > 0 {
		return e.Outcome.Issue[0].Details.Text
	}
	return "Not allowed"
}
