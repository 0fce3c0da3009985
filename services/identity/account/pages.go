package account

import (
	"context"
	"errors"
	"strings"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/identity/web"
)

// SetPasswordPage is /setpassword/:id/:secret, the page the invitation and
// reset e-mails link to. The link is checked before the form is shown, and
// again when it is posted.
func (s *Service) SetPasswordPage(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	b := web.BrowserOf(r)
	id, secret := r.Param("id"), r.Param("secret")
	if _, err := uuid.Parse(id); err != nil {
		return s.linkProblem(b, fhir.NotFound())
	}
	if _, _, err := s.CheckPasswordLink(ctx, id, secret); err != nil {
		return s.linkProblem(b, err)
	}
	csrf, err := s.pages.CSRFToken(ctx, b)
	if err != nil {
		return nil, err
	}
	d := web.Data{Title: "Set your password", CSRF: csrf}
	if r.Method != "POST" {
		return s.pages.Render(200, "setpassword", b, d)
	}
	form, refused, err := s.pages.Form(ctx, r, b)
	if form == nil {
		return refused, err
	}
	password := form.Get("password")
	d.Errors = map[string]string{}
	switch {
	case TooShort(password):
		d.Errors["password"] = ShortPasswordText
	case TooLong(password):
		d.Errors["password"] = PasswordLengthText
	case s.PasswordBreached(ctx, password):
		d.Errors["password"] = auth.BreachedText
	case form.Get("confirm") != password:
		d.Errors["confirm"] = "The passwords do not match"
	}
	if len(d.Errors) > 0 {
		return s.pages.Render(400, "setpassword", b, d)
	}
	if _, err := s.UsePasswordLink(ctx, id, secret, password); err != nil {
		return s.linkProblem(b, err)
	}
	return s.pages.Message(200, b, "Password set", "", "",
		"Your password is set. Sign in to your application with your e-mail address and this password.",
		"Any sign-in made with an earlier password has ended.")
}

// linkProblem is the page for a set-password link that cannot be used, or
// the error itself when it is not about the link.
func (s *Service) linkProblem(b web.Browser, err error) (*bus.Response, error) {
	var fe *fhir.Error
	if !errors.As(err, &fe) || fe.Status >= 500 {
		return nil, err
	}
	const again = "/resetpassword"
	switch fe.Message() {
	case "Already used":
		return s.pages.Message(fe.Status, b, "Link already used", s.cfg.BaseURL+again[1:], "Ask for a new link",
			"This link was used already, or a newer one was sent since. Only the newest link works.")
	case "Request expired":
		return s.pages.Message(fe.Status, b, "Link expired", s.cfg.BaseURL+again[1:], "Ask for a new link",
			"This link has expired.")
	}
	return s.pages.Message(fe.Status, b, "Link not valid", s.cfg.BaseURL+again[1:], "Ask for a new link",
		"This link is not valid. Check that it was copied whole from the e-mail.")
}

// ResetPasswordPage is /resetpassword: the form that sends a reset e-mail,
// with the same answer whether or not an account has the address.
func (s *Service) ResetPasswordPage(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	b := web.BrowserOf(r)
	csrf, err := s.pages.CSRFToken(ctx, b)
	if err != nil {
		return nil, err
	}
	d := web.Data{Title: "Reset your password", CSRF: csrf, Project: r.Query.Get("project")}
	if r.Method != "POST" {
		return s.pages.Render(200, "resetpassword", b, d)
	}
	form, refused, err := s.pages.Form(ctx, r, b)
	if form == nil {
		return refused, err
	}
	d.Email, d.Project = strings.TrimSpace(form.Get("email")), form.Get("project")
	if err := s.sendReset(ctx, d.Email, d.Project); err != nil {
		// The address is refused (sendReset's 400): say so beside it.
		var fe *fhir.Error
		if errors.As(err, &fe) && errors.Is(err, fhir.ErrBadRequest) {
			d.Errors = map[string]string{"email": fe.Message()}
			return s.pages.Render(400, "resetpassword", b, d)
		}
		return nil, err
	}
	return s.pages.Message(200, b, "Check your e-mail", "", "",
		"If an account uses "+d.Email+", a link to set a new password is on its way to it.",
		"The link works once, for seven days; only the newest link sent works.")
}
