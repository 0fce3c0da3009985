package registration

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/services/identity/signin"
	"github.com/pinion-health/pinion/services/identity/web"
)

// The registration pages, server-rendered like the sign-in page: /register
// makes a server-wide account, /register/patient/:projectId a patient of a
// project that lets patients sign up, and /register/project the project a
// signed-in person founds. They run the code of /auth/newuser,
// /auth/newpatient and /auth/newproject (createAccount, joinAsPatient,
// foundProject), and carry the authorization request they came from, to
// which they return the browser once it has a membership.

// Link is the registration page for an authorization request, for
// the sign-in page; "" when registration is off.
func (s *Service) Link(a signin.AuthRequest) *web.Register {
	if s.cfg.Disabled {
		return nil
	}
	return &web.Register{Link: s.localPath("register?" + a.Values().Encode())}
}

// localPath is a path on this server, without its origin: the pages'
// links and forms stay on the origin the browser reached, whatever the
// configured base URL names.
func (s *Service) localPath(p string) string {
	prefix := "/"
	if u, err := url.Parse(s.cfg.BaseURL); err == nil && u.Path != "" {
		prefix = u.Path
	}
	return prefix + p
}

// carried is the authorization request a registration page carries: its
// known parameters only, each bounded, from the query or the posted form.
func carried(v url.Values) url.Values {
	out := signin.ReadAuthRequest(v).Values()
	for k, x := range out {
		if len(x[0]) > 2048 {
			delete(out, k)
		}
	}
	if v.Get("scope") == "" {
		out.Del("scope") // signin.ReadAuthRequest's default, not the request's
	}
	return out
}

// authorizeURL returns the browser to the authorization request, now that
// it is signed in; "" when it came from none.
func (s *Service) authorizeURL(params url.Values) string {
	if params.Get("client_id") == "" {
		return ""
	}
	return s.localPath("oauth2/authorize?" + params.Encode())
}

// registerFormLimit bounds a registration page's form: its few fields,
// the CSRF token and the authorization request it carries (8 parameters
// of at most 2048 bytes each, escaped).
const registerFormLimit = 32 << 10

// tooLargeForm is the page for a form over registerFormLimit.
func (s *Service) tooLargeForm(b web.Browser) (*bus.Response, error) {
	return s.pages.Message(413, b, "Form too large", "", "", "This form is larger than the page sends. Go back, reload the page and try again.")
}

// registrationOff is the page for any registration page when registration
// is off.
func (s *Service) registrationOff(b web.Browser) (*bus.Response, error) {
	return s.pages.Message(403, b, "Registration is disabled", "", "", OffText+": ask an administrator to invite you.")
}

// AccountPage is GET and POST /register: a server-wide account.
func (s *Service) AccountPage(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.registrationPage(ctx, r, "")
}

// PatientPage is GET and POST /register/patient/:projectId: a
// patient signs up to a project that allows it, under its
// defaultPatientAccessPolicy.
func (s *Service) PatientPage(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.registrationPage(ctx, r, r.Param("projectId"))
}

func (s *Service) registrationPage(ctx context.Context, r *bus.Request, projectID string) (*bus.Response, error) {
	b := web.BrowserOf(r)
	if s.cfg.Disabled {
		return s.registrationOff(b)
	}
	title := "Create an account"
	if projectID != "" {
		// Asked before the form is shown: only a project that lets
		// patients sign up has this page.
		if _, err := s.patientPolicy(ctx, projectID); err != nil {
			if fe := fhir.AsError(err); fe.Status < 500 {
				return s.pages.Message(404, b, "No sign-up here", "", "", openRegText+".")
			}
			return nil, err
		}
		info, err := s.repo.Read(ctx, repo.AllProjects, "Project", projectID)
		if err != nil {
			return nil, err
		}
		var p struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(info.JSON, &p); err != nil {
			return nil, err
		}
		title = "Sign up to " + p.Name
	}
	params := carried(r.Query)
	if r.Method != "POST" {
		return s.registerForm(ctx, b, title, params, url.Values{}, nil)
	}
	if len(r.Body) > registerFormLimit {
		return s.tooLargeForm(b)
	}
	form, refused, err := s.pages.Form(ctx, r, b)
	if refused != nil || err != nil {
		return refused, err
	}
	params = carried(form)
	in := newUserRequest{
		FirstName: strings.TrimSpace(form.Get("firstName")), LastName: strings.TrimSpace(form.Get("lastName")),
		Email: form.Get("email"), Password: form.Get("password"), ProjectID: projectID,
		RecaptchaToken: form.Get("g-recaptcha-response"),
	}
	if projectID != "" {
		// A patient sign-up page embedded in the project's site posts that
		// site's key; on the server's own page a key would move the account
		// into a project this page does not finish.
		in.RecaptchaSiteKey = form.Get("recaptchaSiteKey")
	}
	userID, _, err := s.createAccount(ctx, r.Remote, in)
	if err != nil {
		return s.registerRefused(ctx, b, title, params, form, err)
	}
	u, err := s.registeredUser(ctx, "User/"+userID)
	if err != nil {
		return nil, err
	}
	if projectID != "" {
		if _, err := s.joinAsPatient(ctx, "User/"+userID, u, projectID); err != nil {
			return nil, err
		}
	}
	// The new account is signed in here, under a new browser id (an id
	// planted before is worth nothing after), as a password sign-in is.
	nb := web.NewBrowser()
	if err := s.signInBrowser(ctx, nb, "User/"+userID); err != nil {
		return nil, err
	}
	sent := "We sent a link to " + u.Email + ": open it to verify your address."
	if projectID != "" {
		if target := s.authorizeURL(params); target != "" {
			return s.redirectSignedIn(nb, target), nil
		}
		return s.pages.Message(200, nb, "Signed up", "", "", "You are signed up as a patient of this project.", sent)
	}
	return s.ProjectForm(ctx, nb, params, []string{"Your account is ready. " + sent, "Create a project to work in, or continue if you were invited to one."}, "", nil)
}

// registerForm shows the registration form, with the values sent and the
// errors found.
func (s *Service) registerForm(ctx context.Context, b web.Browser, title string, params, form url.Values, errs map[string]string) (*bus.Response, error) {
	csrf, err := s.pages.CSRFToken(ctx, b)
	if err != nil {
		return nil, err
	}
	status := 200
	if len(errs) > 0 {
		status = 400
	}
	d := web.Data{Title: title, CSRF: csrf, Errors: errs, Hidden: params, Email: strings.TrimSpace(form.Get("email")),
		Register: &web.Register{FirstName: form.Get("firstName"), LastName: form.Get("lastName"), Recaptcha: s.cfg.RecaptchaSecret != ""}}
	if target := s.authorizeURL(params); target != "" {
		d.Link, d.LinkText = target, "I have an account: sign in"
	}
	return s.pages.Render(status, "register", b, d)
}

// registerRefused shows a refused registration on its form: each issue
// beside the field it names, the rest above the form. Server faults are
// not the person's to fix, and stay errors.
func (s *Service) registerRefused(ctx context.Context, b web.Browser, title string, params, form url.Values, err error) (*bus.Response, error) {
	var fe *fhir.Error
	if !errors.As(err, &fe) || fe.Status >= 500 {
		return nil, err
	}
	fields := map[string]string{"firstName": "firstName", "lastName": "lastName", "email": "email", "password": "password"}
	errs := map[string]string{}
	for _, i := range fe.Outcome.Issue {
		text := fe.Message()
		if i.Details != nil {
			text = i.Details.Text
		}
		key := "form"
		if len(i.Expression) > 0 && fields[i.Expression[0]] != "" {
			key = fields[i.Expression[0]]
		} else if strings.HasPrefix(text, "Recaptcha") && s.cfg.RecaptchaSecret != "" {
			key = "recaptcha"
		}
		if errs[key] == "" {
			errs[key] = text
		}
	}
	return s.registerForm(ctx, b, title, params, form, errs)
}

// registeredUser reads what registration needs of a user.
func (s *Service) registeredUser(ctx context.Context, user string) (*registeredUser, error) {
	typ, id, ok := fhir.SplitReference(user)
	if !ok || typ != "User" {
		return nil, fhir.BadRequest("Invalid login")
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, "User", id)
	if err != nil {
		return nil, err
	}
	var u registeredUser
	if err := json.Unmarshal(res.JSON, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

// signInBrowser records that browser b is signed in as user, now.
func (s *Service) signInBrowser(ctx context.Context, b web.Browser, user string) error {
	now := time.Now()
	return s.signins.SignInBrowser(ctx, b, &signin.BrowserSession{User: user, AuthTime: now.Unix(), Start: now.UnixMilli()})
}

// redirectSignedIn sends a browser just signed in to target, with its
// cookie.
func (s *Service) redirectSignedIn(b web.Browser, target string) *bus.Response {
	return &bus.Response{Status: 303, Header: map[string]string{
		"Location": target, "Set-Cookie": s.pages.SetCookie(b), "Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
	}}
}

// ProjectForm offers a signed-in person without a project to found one;
// after it, the browser returns to the authorization request, if any.
func (s *Service) ProjectForm(ctx context.Context, b web.Browser, params url.Values, lines []string, name string, errs map[string]string) (*bus.Response, error) {
	csrf, err := s.pages.CSRFToken(ctx, b)
	if err != nil {
		return nil, err
	}
	status := 200
	if len(errs) > 0 {
		status = 400
	}
	d := web.Data{Title: "Create a project", CSRF: csrf, Errors: errs, Hidden: params, Lines: lines, Project: name,
		Register: &web.Register{ProjectAction: s.localPath("register/project")}}
	if target := s.authorizeURL(params); target != "" {
		d.Link, d.LinkText = target, "Continue without a project"
	}
	return s.pages.Render(status, "newproject", b, d)
}

// ProjectPage is GET and POST /register/project: a signed-in
// person founds a project, as /auth/newproject, and becomes its admin.
func (s *Service) ProjectPage(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	b := web.BrowserOf(r)
	if s.cfg.Disabled {
		return s.registrationOff(b)
	}
	bs, err := s.signins.SignedIn(ctx, b)
	if err != nil {
		return nil, err
	}
	params := carried(r.Query)
	if bs == nil {
		return s.pages.Message(401, b, "Sign in first", "", "", "Sign in to the application, then create your project.")
	}
	if r.Method != "POST" {
		return s.ProjectForm(ctx, b, params, nil, "", nil)
	}
	if len(r.Body) > registerFormLimit {
		return s.tooLargeForm(b)
	}
	form, refused, err := s.pages.Form(ctx, r, b)
	if refused != nil || err != nil {
		return refused, err
	}
	params = carried(form)
	name := strings.TrimSpace(form.Get("projectName"))
	if n := utf8.RuneCountInString(name); n < 4 || n > 72 {
		return s.ProjectForm(ctx, b, params, nil, name, map[string]string{"projectName": "Project name must be between 4 and 72 characters"})
	}
	u, err := s.registeredUser(ctx, bs.User)
	if err != nil {
		return nil, err
	}
	if _, err := s.foundProject(ctx, r, bs.User, u, name); err != nil {
		if fe := fhir.AsError(err); fe.Status < 500 {
			return s.ProjectForm(ctx, b, params, nil, name, map[string]string{"projectName": fe.Message()})
		}
		return nil, err
	}
	if target := s.authorizeURL(params); target != "" {
		return &bus.Response{Status: 303, Header: map[string]string{"Location": target, "Cache-Control": "no-store"}}, nil
	}
	link := ""
	if s.cfg.AppBaseURL != "" {
		link = s.cfg.AppBaseURL
	}
	return s.pages.Message(201, b, "Project created", link, "Open the application", "Your project "+name+" is ready; you are its administrator.")
}
