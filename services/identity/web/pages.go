// Package web renders the pages people see in a browser — sign-in, choice
// of project, consent, second factors, passkeys, registration, set and
// reset password, sign-out — and keeps what every page needs: the
// browser's id cookie, the CSRF token of its forms, and the headers every
// page carries. Pages are server-rendered and work without JavaScript (the
// passkey pages excepted, with one inline script allowed by its hash); one
// small inline style sheet is allowed by its hash, and nothing is loaded
// from anywhere else. Each capability's package fills Data and names its
// page; the templates and the types they read are here.
package web

import (
	"bytes"
	"context"
	"embed"
	"html/template"
	"net/url"
	"strings"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/webstyle"
	"github.com/pinion-health/pinion/services/identity/secrets"
)

//go:embed pages
var pageFiles embed.FS

var (
	pageStyle = webstyle.Base
	pageTmpl  = map[string]*template.Template{}
	// CSP is the pages' policy: the style sheet (by hash) and forms
	// posting back here; no script, no frame, no other origin.
	CSP = "default-src 'none'; style-src 'sha256-" + webstyle.CSPHash(pageStyle) + "'; img-src 'self'; " +
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
	passkeyScript = mustRead("pages/passkey.js")
	passkeyCSP    = "script-src 'sha256-" + webstyle.CSPHash(passkeyScript) + "'; "
)

// pageNames are the templates, each pages/<name>.html in pages/layout.html.
var pageNames = []string{"message", "setpassword", "resetpassword", "signin", "choose", "patient", "consent", "consents", "mfa", "recovery",
	"passkeys", "passkeysignin", "register", "newproject", "signout", "verifyemail"}

func init() {
	for _, name := range pageNames {
		t := template.New("layout").Funcs(template.FuncMap{"style": func() template.CSS { return template.CSS(pageStyle) },
			"passkeyScript": func() template.JS { return template.JS(passkeyScript) }})
		pageTmpl[name] = template.Must(t.ParseFS(pageFiles, "pages/layout.html", "pages/"+name+".html"))
	}
}

func mustRead(name string) string {
	b, err := pageFiles.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// WithPasskeyScript adds the passkey script's hash to a page's policy.
func WithPasskeyScript(csp string) string {
	return strings.Replace(csp, "default-src 'none'; ", "default-src 'none'; "+passkeyCSP, 1)
}

// Data is what every page shows; each page uses the fields it needs.
type Data struct {
	Title    string
	CSRF     string
	Errors   map[string]string // per field, shown beside it
	Lines    []string          // a message page's paragraphs
	Link     string
	LinkText string
	Email    string
	Project  string
	App      string     // the client's name, on the sign-in pages
	Hidden   url.Values // an authorization request's parameters, carried by its forms
	Choices  []Choice
	// The consent page: what the client may do, for which membership.
	Scopes     []string
	Membership string
	Profile    string
	Registrar  string // the project the client is registered in
	// The second-factor pages.
	MFA *MFA
	// The registration pages, and the sign-in page's link to them.
	Register *Register
	// The passkey pages.
	Passkeys *Passkeys
	// The SMART patient picker.
	Picker *Picker
	// The person's consents page.
	Consents *Consents
}

// Consents is what the consents page shows: the applications the person
// allowed, and what became of a withdrawal.
type Consents struct {
	Clients         []ConsentView
	Notice, Problem string
}

// ConsentView is one application the person allowed.
type ConsentView struct{ ID, Name, Scope, Given string }

// Picker is what the SMART patient picker shows: the search asked for
// and the patients found.
type Picker struct {
	Name, BirthDate string
	Problem         string // why the search could not run
	Patients        []PatientChoice
}

// PatientChoice is one patient the picker lists.
type PatientChoice struct{ ID, Name, BirthDate string }

// Choice is one membership on the project page.
type Choice struct{ ID, Project, Profile string }

// MFA is what the second-factor pages show.
type MFA struct {
	QRCode   template.URL // a data: URL made by the server, never the client's
	Key      string
	Recovery []string
	Passkey  bool // the person has a passkey, which may serve instead of a code
}

// Register is what the registration pages show beyond Data.
type Register struct {
	FirstName, LastName string
	// Recaptcha asks for a reCAPTCHA token: registration requires one when
	// a secret key is configured. The page loads no widget (it runs no
	// script); an app that embeds one posts its token as
	// g-recaptcha-response.
	Recaptcha bool
	// ProjectAction is where the project form posts.
	ProjectAction string
	// Link is the registration page the sign-in page links to.
	Link string
}

// Passkeys is what the passkey pages show.
type Passkeys struct {
	Email   string
	Keys    []Passkey
	Options string // a pending ceremony's options, JSON, for the script
	Name    string // the name of the passkey being added
	Notice  string
}

// Passkey is one of a person's passkeys as their page lists it.
type Passkey struct{ ID, Name, Created, LastUsed string }

// Pages renders pages for one server: its base URL decides whether the
// browser cookie is Secure, and its credentials keep the CSRF key.
type Pages struct {
	baseURL string
	csrf    csrfKey
}

// New is the pages of the server at baseURL.
func New(baseURL string, s *secrets.Store) *Pages {
	return &Pages{baseURL: baseURL, csrf: csrfKey{secrets: s}}
}

// Render answers with a page and the headers every page carries: no
// caching (the set-password URL holds a secret), no framing, no referrer;
// a new browser gets its cookie.
func (p *Pages) Render(status int, name string, b Browser, d Data) (*bus.Response, error) {
	var buf bytes.Buffer
	if err := pageTmpl[name].ExecuteTemplate(&buf, "layout", d); err != nil {
		return nil, err
	}
	resp := &bus.Response{Status: status, Body: buf.Bytes(), Header: map[string]string{
		"Content-Type":            "text/html; charset=utf-8",
		"Content-Security-Policy": CSP,
		"X-Frame-Options":         "DENY",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
		"Cache-Control":           "no-store",
	}}
	if b.IsNew {
		resp.Header["Set-Cookie"] = p.SetCookie(b)
	}
	return resp, nil
}

// Message answers with a page of text and one link.
func (p *Pages) Message(status int, b Browser, title, link, linkText string, lines ...string) (*bus.Response, error) {
	return p.Render(status, "message", b, Data{Title: title, Lines: lines, Link: link, LinkText: linkText})
}

// Form reads a posted form; nil with a page to answer when it is not one,
// or its CSRF token is not this browser's.
func (p *Pages) Form(ctx context.Context, r *bus.Request, b Browser) (url.Values, *bus.Response, error) {
	ct := strings.ToLower(r.Get("Content-Type"))
	if !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		resp, err := p.Message(415, b, "Not a form", "", "", "This address takes a form posted from its own page.")
		return nil, resp, err
	}
	form, err := url.ParseQuery(string(r.Body))
	if err != nil {
		resp, err := p.Message(400, b, "Not a form", "", "", "The form could not be read. Go back, reload the page and try again.")
		return nil, resp, err
	}
	ok, err := p.CheckCSRF(ctx, b, form.Get("csrf"))
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		resp, err := p.Message(403, b, "Form expired", "", "",
			"This form was not sent from this browser's page, or the page is too old. Go back, reload the page and try again.")
		return nil, resp, err
	}
	return form, nil, nil
}
