package identity

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"html/template"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/webstyle"
)

// The pages people see in a browser: server-rendered, working without
// JavaScript, one small inline style sheet allowed by its hash and nothing
// else loaded from anywhere.

//go:embed pages
var pageFiles embed.FS

var (
	pageStyle = webstyle.Base
	pageTmpl  = map[string]*template.Template{}
	// pageCSP allows the style sheet (by hash) and forms posting back here;
	// no script, no frame, no other origin.
	pageCSP = "default-src 'none'; style-src 'sha256-" + webstyle.CSPHash(pageStyle) + "'; img-src 'self'; " +
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

func init() {
	for _, name := range []string{"message", "setpassword", "resetpassword", "signin", "choose", "consent", "mfa", "recovery", "passkeys", "passkeysignin"} {
		t := template.New("layout").Funcs(template.FuncMap{"style": func() template.CSS { return template.CSS(pageStyle) },
			"passkeyScript": func() template.JS { return template.JS(passkeyScript) }})
		pageTmpl[name] = template.Must(t.ParseFS(pageFiles, "pages/layout.html", "pages/"+name+".html"))
	}
}

// pageData is what every page shows; each page uses the fields it needs.
type pageData struct {
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
	Choices  []choice
	// The consent page: what the client may do, for which membership.
	Scopes     []string
	Membership string
	Profile    string
	Registrar  string // the project the client is registered in
	// The second-factor pages (mfa.go, mfa_page.go).
	MFA *mfaPage
	// The registration pages, and the sign-in page's link to them
	// (register_page.go).
	Register *registerPage
	// The passkey pages (passkey_page.go).
	Passkeys *passkeyPage
}

// render answers with a page and the headers every page carries: no
// caching (the set-password URL holds a secret), no framing, no referrer.
func (s *Service) render(status int, name string, b browser, d pageData) (*bus.Response, error) {
	var buf bytes.Buffer
	if err := pageTmpl[name].ExecuteTemplate(&buf, "layout", d); err != nil {
		return nil, err
	}
	resp := &bus.Response{Status: status, Body: buf.Bytes(), Header: map[string]string{
		"Content-Type":            "text/html; charset=utf-8",
		"Content-Security-Policy": pageCSP,
		"X-Frame-Options":         "DENY",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
		"Cache-Control":           "no-store",
	}}
	if b.isNew {
		resp.Header["Set-Cookie"] = s.setCookie(b)
	}
	return resp, nil
}

// message answers with a page of text and one link.
func (s *Service) message(status int, b browser, title, link, linkText string, lines ...string) (*bus.Response, error) {
	return s.render(status, "message", b, pageData{Title: title, Lines: lines, Link: link, LinkText: linkText})
}

// form reads a posted form; nil with a page to answer when it is not one,
// or its CSRF token is not this browser's.
func (s *Service) form(ctx context.Context, r *bus.Request, b browser) (url.Values, *bus.Response, error) {
	ct := strings.ToLower(r.Get("Content-Type"))
	if !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		resp, err := s.message(415, b, "Not a form", "", "", "This address takes a form posted from its own page.")
		return nil, resp, err
	}
	form, err := url.ParseQuery(string(r.Body))
	if err != nil {
		resp, err := s.message(400, b, "Not a form", "", "", "The form could not be read. Go back, reload the page and try again.")
		return nil, resp, err
	}
	ok, err := s.checkCSRF(ctx, b, form.Get("csrf"))
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		resp, err := s.message(403, b, "Form expired", "", "",
			"This form was not sent from this browser's page, or the page is too old. Go back, reload the page and try again.")
		return nil, resp, err
	}
	return form, nil, nil
}

// setPasswordPage is /setpassword/:id/:secret, the page the invitation and
// reset e-mails link to. The link is checked before the form is shown, and
// again when it is posted.
func (s *Service) setPasswordPage(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	b := browserOf(r)
	id, secret := r.Param("id"), r.Param("secret")
	if _, err := uuid.Parse(id); err != nil {
		return s.linkProblem(b, fhir.NotFound())
	}
	if _, _, err := s.checkPasswordLink(ctx, id, secret); err != nil {
		return s.linkProblem(b, err)
	}
	csrf, err := s.csrfToken(ctx, b)
	if err != nil {
		return nil, err
	}
	d := pageData{Title: "Set your password", CSRF: csrf}
	if r.Method != "POST" {
		return s.render(200, "setpassword", b, d)
	}
	form, refused, err := s.form(ctx, r, b)
	if form == nil {
		return refused, err
	}
	password := form.Get("password")
	d.Errors = map[string]string{}
	switch {
	case tooShort(password):
		d.Errors["password"] = shortPassword
	case tooLong(password):
		d.Errors["password"] = passwordLenText
	case s.passwordBreached(ctx, password):
		d.Errors["password"] = auth.BreachedText
	case form.Get("confirm") != password:
		d.Errors["confirm"] = "The passwords do not match"
	}
	if len(d.Errors) > 0 {
		return s.render(400, "setpassword", b, d)
	}
	if _, err := s.usePasswordLink(ctx, id, secret, password); err != nil {
		return s.linkProblem(b, err)
	}
	return s.message(200, b, "Password set", "", "",
		"Your password is set. Sign in to your application with your e-mail address and this password.",
		"Any sign-in made with an earlier password has ended.")
}

// linkProblem is the page for a set-password link that cannot be used, or
// the error itself when it is not about the link.
func (s *Service) linkProblem(b browser, err error) (*bus.Response, error) {
	var fe *fhir.Error
	if !errors.As(err, &fe) || fe.Status >= 500 {
		return nil, err
	}
	const again = "/resetpassword"
	switch fe.Message() {
	case "Already used":
		return s.message(fe.Status, b, "Link already used", s.cfg.BaseURL+again[1:], "Ask for a new link",
			"This link was used already, or a newer one was sent since. Only the newest link works.")
	case "Request expired":
		return s.message(fe.Status, b, "Link expired", s.cfg.BaseURL+again[1:], "Ask for a new link",
			"This link has expired.")
	}
	return s.message(fe.Status, b, "Link not valid", s.cfg.BaseURL+again[1:], "Ask for a new link",
		"This link is not valid. Check that it was copied whole from the e-mail.")
}

// resetPasswordPage is /resetpassword: the form that sends a reset e-mail,
// with the same answer whether or not an account has the address.
func (s *Service) resetPasswordPage(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	b := browserOf(r)
	csrf, err := s.csrfToken(ctx, b)
	if err != nil {
		return nil, err
	}
	d := pageData{Title: "Reset your password", CSRF: csrf, Project: r.Query.Get("project")}
	if r.Method != "POST" {
		return s.render(200, "resetpassword", b, d)
	}
	form, refused, err := s.form(ctx, r, b)
	if form == nil {
		return refused, err
	}
	d.Email, d.Project = strings.TrimSpace(form.Get("email")), form.Get("project")
	if err := s.sendReset(ctx, d.Email, d.Project); err != nil {
		// The address is refused (sendReset's 400): say so beside it.
		var fe *fhir.Error
		if errors.As(err, &fe) && errors.Is(err, fhir.ErrBadRequest) {
			d.Errors = map[string]string{"email": fe.Message()}
			return s.render(400, "resetpassword", b, d)
		}
		return nil, err
	}
	return s.message(200, b, "Check your e-mail", "", "",
		"If an account uses "+d.Email+", a link to set a new password is on its way to it.",
		"The link works once, for seven days; only the newest link sent works.")
}
