package account

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/identity/web"
)

// VerifyEmailPage is /verifyemail/:id/:secret, the page the verification
// e-mail links to. Opening it changes nothing (mail scanners open links):
// the person confirms with a button, a form posted from this browser.
func (s *Service) VerifyEmailPage(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	b := web.BrowserOf(r)
	id, secret := r.Param("id"), r.Param("secret")
	if uuid.Validate(id) != nil {
		return s.verificationProblem(b, fhir.NotFound())
	}
	if r.Method != "POST" {
		csrf, err := s.pages.CSRFToken(ctx, b)
		if err != nil {
			return nil, err
		}
		return s.pages.Render(200, "verifyemail", b, web.Data{Title: "Verify your e-mail address", CSRF: csrf,
			Lines: []string{"Confirm that this e-mail address is yours."}})
	}
	if _, refused, err := s.pages.Form(ctx, r, b); refused != nil || err != nil {
		return refused, err
	}
	if err := s.useVerification(ctx, id, secret); err != nil {
		return s.verificationProblem(b, err)
	}
	return s.pages.Message(200, b, "E-mail address verified", "", "", "Your e-mail address is verified. You may close this page.")
}

// verificationProblem is the page for a verification link that cannot be
// used, or the error itself when it is not about the link.
func (s *Service) verificationProblem(b web.Browser, err error) (*bus.Response, error) {
	var fe *fhir.Error
	if !errors.As(err, &fe) || fe.Status >= 500 {
		return nil, err
	}
	switch fe.Message() {
	case "Already used":
		return s.pages.Message(fe.Status, b, "Link already used", "", "", "This address is verified already.")
	case "Request expired":
		return s.pages.Message(fe.Status, b, "Link expired", "", "", "This link has expired.")
	}
	return s.pages.Message(fe.Status, b, "Link not valid", "", "", "This link is not valid. Check that it was copied whole from the e-mail.")
}
