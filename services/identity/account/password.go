package account

import (
	"cmp"
	"context"
	"sync"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
)

// PasswordBreached reports whether a new password is a known breached one
// (auth.BreachCheck: the shipped list, and PINION_PASSWORD_BREACH_URL).
func (s *Service) PasswordBreached(ctx context.Context, password string) bool {
	return s.breach.Breached(ctx, password)
}

// minPassword is the shortest password Medplum accepts, at sign-in and when
// one is set; ShortPasswordText is its text. MaxPassword bounds a new one
// (Medplum's bound: argon2 hashes any length at one cost, and 72 keeps a
// passphrase of 12 words); PasswordLengthText is Medplum's text for either.
const (
	minPassword        = 8
	ShortPasswordText  = "Invalid password, must be at least 8 characters"
	MaxPassword        = 72
	PasswordLengthText = "Password must be between 8 and 72 characters"
)

// Lengths count characters, not bytes: "ééééééé" is seven.
func TooShort(password string) bool { return utf8.RuneCountInString(password) < minPassword }

// TooLong bounds a new password.
func TooLong(password string) bool { return utf8.RuneCountInString(password) > MaxPassword }

// decoyUser is an id no user has: its password is looked up for an unknown
// e-mail, at the cost of a real lookup.
const decoyUser = "00000000-0000-0000-0000-000000000000"

// decoyHash is checked when there is no real hash to check, so that a
// sign-in for an unknown e-mail takes as long as one for a known one.
var decoyHash = sync.OnceValue(auth.DecoyHash)

func orDecoy(hash string) string {
	if hash == "" {
		return decoyHash()
	}
	return hash
}

// CheckPassword returns the user whose e-mail and password these are (in
// the project, for a project-scoped user), or "" for a wrong pair; an
// unknown e-mail costs the same as a wrong password.
func (s *Service) CheckPassword(ctx context.Context, email, password, projectID string) (string, error) {
	userID := ""
	var err error
	if projectID != "" {
		if userID, err = s.repo.ClaimOwner(ctx, repo.UserEmailKey(projectID, email)); err != nil {
			return "", err
		}
	}
	if userID == "" {
		if userID, err = s.repo.ClaimOwner(ctx, repo.UserEmailKey("", email)); err != nil {
			return "", err
		}
	}
	hash, err := s.PasswordHash(ctx, cmp.Or(userID, decoyUser))
	if err != nil {
		return "", err
	}
	ok, err := auth.CheckPassword(ctx, orDecoy(hash), password)
	if err != nil {
		return "", err
	}
	if !ok || hash == "" {
		return "", nil
	}
	return userID, nil
}

// setPasswordRequest is POST /auth/setpassword's body.
type setPasswordRequest struct {
	ID       string `json:"id"`
	Secret   string `json:"secret"`
	Password string `json:"password"`
}

// check finds what is wrong with the fields, one issue per field.
func (in setPasswordRequest) check() error {
	var issues []fhir.Issue
	if _, err := uuid.Parse(in.ID); err != nil {
		issues = append(issues, fhir.FieldIssue("id", "Invalid request ID"))
	}
	if in.Secret == "" {
		issues = append(issues, fhir.FieldIssue("secret", "Missing secret"))
	}
	if TooShort(in.Password) {
		issues = append(issues, fhir.FieldIssue("password", ShortPasswordText))
	} else if TooLong(in.Password) {
		issues = append(issues, fhir.FieldIssue("password", PasswordLengthText))
	}
	if len(issues) > 0 {
		return fhir.Invalid(issues...)
	}
	return nil
}

// SetPassword is POST /auth/setpassword: a one-time secret from an e-mail.
func (s *Service) SetPassword(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	var in setPasswordRequest
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	if err := in.check(); err != nil {
		return nil, err
	}
	if s.PasswordBreached(ctx, in.Password) {
		return nil, fhir.BadRequest(auth.BreachedText) // Medplum 5.1.13 names no field
	}
	rev, err := s.UsePasswordLink(ctx, in.ID, in.Secret, in.Password)
	if err != nil {
		return nil, err
	}
	return bus.OK().WithSession(session.EndedBucket, rev), nil
}
