package account

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/mail"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/services/identity/limits"
)

// ResetPassword is POST /auth/resetpassword. It answers the same whether or
// not the e-mail exists, so it cannot be used to find accounts.
func (s *Service) ResetPassword(ctx context.Context, r *bus.Request) (*bus.Response, error) {
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

// FormEmail is an e-mail address as typed in a page's form or a reset
// request, in the form accounts are found by (trimmed, lower case); ok is
// whether it can be one at all.
func FormEmail(raw string) (email string, ok bool) {
	email = auth.NormalEmail(raw)
	return email, strings.Contains(email, "@")
}

// sendReset mails a set-password link to the user with this address (in
// the project, for a project-scoped user). An address without a user gets
// no mail and no error.
func (s *Service) sendReset(ctx context.Context, email, projectID string) error {
	email, ok := FormEmail(email)
	if !ok {
		return fhir.BadRequest("Valid email address is required", "email")
	}
	userID, err := s.repo.ClaimOwner(ctx, repo.UserEmailKey(projectID, email))
	if err != nil || userID == "" {
		return err
	}
	// A throttled reset sends nothing and makes no link (a new link would
	// spend the last one mailed); the caller's answer is the same.
	if ok, err := s.TakeResetSlot(ctx, userID, time.Now()); err != nil || !ok {
		return err
	}
	id, link, err := s.NewPasswordRequest(ctx, userID, "reset", "")
	if err != nil {
		return err
	}
	return mail.Queue(ctx, s.js, mail.Message{
		ID: "reset-" + id, To: email, Subject: "Pinion password reset",
		Text: "Someone asked to reset the password of this account.\n\nSet a new password here:\n" + link + "\n\nIf it was not you, ignore this message.\n",
	})
}

// Resets mailed to one person: at most one within resetGap and
// maxResetsPerHour within an hour (resetRule, a limits.Rule). Anyone can
// ask for a reset of any address, so without a bound a stranger could
// fill a mailbox (and each reset spends the person's last reset link).
const (
	resetGap         = time.Minute
	maxResetsPerHour = 5
	// resetSlotTries bounds the retries of the slot's conditional write
	// when resets for one person race; a reset that loses them all is
	// throttled, since another of the race was just sent.
	resetSlotTries = 5
)

// resetRule is the reset throttle's rule.
var resetRule = limits.Rule{Max: maxResetsPerHour, Window: time.Hour, Gap: resetGap}

// resetsKey holds the times of a user's recent reset e-mails: kept in the
// store beside the links, so every identity instance counts them alike.
func resetsKey(userID string) string { return "pwreset-sent:" + userID }

// resetsSent is what resetsKey holds: send times within the last hour,
// oldest first.
type resetsSent struct {
	Sent []time.Time `json:"sent"`
}

// TakeResetSlot records a reset e-mail to userID at now and reports true,
// or reports false when one was sent within resetGap or maxResetsPerHour
// within the hour. A conditional write makes racing resets count one by
// one.
func (s *Service) TakeResetSlot(ctx context.Context, userID string, now time.Time) (bool, error) {
	for range resetSlotTries {
		var r resetsSent
		raw, _, err := s.secrets.Load(ctx, resetsKey(userID), &r)
		if err != nil {
			return false, fmt.Errorf("reset throttle: %w", err)
		}
		if !resetRule.Allows(r.Sent, 0, now) {
			return false, nil
		}
		recent := slices.Clone(resetRule.Recent(r.Sent, now))
		err = s.secrets.Swap(ctx, resetsKey(userID), raw, resetsSent{Sent: append(recent, now.UTC())})
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrExists), errors.Is(err, store.ErrNotFound):
			continue // another reset for this person was recorded first
		default:
			return false, fmt.Errorf("reset throttle: %w", err)
		}
	}
	return false, nil
}
