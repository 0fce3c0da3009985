package identity

import (
	"context"
	"strings"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/mail"
	"github.com/pinion-health/pinion/pkg/repo"
)

// resetPassword is POST /auth/resetpassword. It answers the same whether or
// not the e-mail exists, so it cannot be used to find accounts.
func (s *Service) resetPassword(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	var in struct {
		Email     string `json:"email"`
		ProjectID string `json:"projectId"`
	}
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	if err := s.sendReset(ctx, in.Email, in.ProjectID); err != nil {
		return nil, err
	}
	return bus.OK(), nil
}

// formEmail is an e-mail address as typed in a page's form or a reset
// request, in the form accounts are found by (trimmed, lower case); ok is
// whether it can be one at all.
func formEmail(raw string) (email string, ok bool) {
	email = strings.ToLower(strings.TrimSpace(raw))
	return email, strings.Contains(email, "@")
}

// sendReset mails a set-password link to the user with this address (in
// the project, for a project-scoped user). An address without a user gets
// no mail and no error.
func (s *Service) sendReset(ctx context.Context, email, projectID string) error {
	email, ok := formEmail(email)
	if !ok {
		return fhir.BadRequest("Valid email address is required", "email")
	}
	userID, err := s.repo.ClaimOwner(ctx, repo.UserEmailKey(projectID, email))
	if err != nil || userID == "" {
		return err
	}
	id, link, err := s.newPasswordRequest(ctx, userID, "reset", "")
	if err != nil {
		return err
	}
	return s.queueMail(ctx, mail.Message{
		ID: "reset-" + id, To: email, Subject: "Pinion password reset",
		Text: "Someone asked to reset the password of this account.\n\nSet a new password here:\n" + link + "\n\nIf it was not you, ignore this message.\n",
	})
}
