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
	email := strings.ToLower(strings.TrimSpace(in.Email))
	if !strings.Contains(email, "@") {
		return nil, fhir.BadRequest("Valid email address is required", "email")
	}
	userID, err := s.repo.ClaimOwner(ctx, repo.UserEmailKey(in.ProjectID, email))
	if err != nil {
		return nil, err
	}
	if userID != "" {
		id, link, err := s.newPasswordRequest(ctx, userID, "reset", "")
		if err != nil {
			return nil, err
		}
		if err := s.queueMail(ctx, mail.Message{
			ID: "reset-" + id, To: email, Subject: "Pinion password reset",
			Text: "Someone asked to reset the password of this account.\n\nSet a new password here:\n" + link + "\n\nIf it was not you, ignore this message.\n",
		}); err != nil {
			return nil, err
		}
	}
	return bus.Outcome(fhir.OK()), nil
}
