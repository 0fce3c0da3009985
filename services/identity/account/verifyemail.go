package account

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/mail"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/pkg/store"
)

// VerifiedEmailSetting is the Project.setting (valueBoolean) that keeps
// members whose e-mail is not verified from signing in to the project.
// Medplum has no such setting; its users asked for one.
const VerifiedEmailSetting = "requireVerifiedEmail"

// verifyBodyLimit bounds POST /auth/verifyemail's body: an id and a
// secret, as the registration routes bound theirs.
const verifyBodyLimit = 4096

// verificationTTL is how long a verification link stays good.
const verificationTTL = 7 * 24 * time.Hour

// emailVerification is a one-time secret that proves a user reads the
// mailbox of their address (Medplum's UserSecurityRequest, type
// verify-email). Only the secret's digest is kept.
type emailVerification struct {
	ID      string    `json:"id"`
	User    string    `json:"user"` // the user's id
	Digest  string    `json:"digest"`
	Expires time.Time `json:"expires"`
	Used    bool      `json:"used"`
}

func verificationKey(id string) string { return "emailverify:" + id }

// SendVerification stores a verification for the user and queues the
// e-mail with its link, <base>/verifyemail/<id>/<secret>.
func (s *Service) SendVerification(ctx context.Context, userID, email, firstName string) error {
	id := uuid.NewString()
	secret := auth.NewSecret()
	if err := s.secrets.Save(ctx, verificationKey(id), emailVerification{
		ID: id, User: userID, Digest: auth.SecretDigest(secret), Expires: time.Now().Add(verificationTTL).UTC(),
	}); err != nil {
		return fmt.Errorf("e-mail verification: %w", err)
	}
	link := s.cfg.BaseURL + "verifyemail/" + id + "/" + secret
	return mail.Queue(ctx, s.js, mail.Message{
		ID: "verify-" + id, To: email, Subject: "Pinion: verify your e-mail address",
		Text: fmt.Sprintf("Hello %s,\n\nConfirm that this is your e-mail address:\n%s\n\nThe link works once and expires in 7 days. If you did not register, ignore this message.\n",
			firstName, link),
	})
}

// verifyEmailRequest is POST /auth/verifyemail's body.
type verifyEmailRequest struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
}

// check finds what is wrong with the fields, with Medplum's texts.
func (in verifyEmailRequest) check() error {
	var issues []fhir.Issue
	if uuid.Validate(in.ID) != nil {
		issues = append(issues, fhir.FieldIssue("id", "Invalid request ID"))
	}
	if in.Secret == "" {
		issues = append(issues, fhir.FieldIssue("secret", "Missing secret"))
	}
	if len(issues) > 0 {
		return fhir.Invalid(issues...)
	}
	return nil
}

// VerifyEmail is POST /auth/verifyemail {id, secret}: the link of a
// verification e-mail, used once, sets User.emailVerified.
func (s *Service) VerifyEmail(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if len(r.Body) > verifyBodyLimit {
		return nil, fhir.TooLarge("The body of /auth/verifyemail is at most 4096 bytes")
	}
	var in verifyEmailRequest
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	if err := in.check(); err != nil {
		return nil, err
	}
	if err := s.useVerification(ctx, in.ID, in.Secret); err != nil {
		return nil, err
	}
	return bus.OK(), nil
}

// useVerification spends a verification link and marks the user's
// address verified.
func (s *Service) useVerification(ctx context.Context, id, secret string) error {
	var v emailVerification
	raw, found, err := s.secrets.Load(ctx, verificationKey(id), &v)
	if err != nil {
		return err
	}
	switch {
	case !found:
		return fhir.NotFound()
	case v.Used:
		return fhir.BadRequest("Already used")
	case time.Now().After(v.Expires):
		return fhir.BadRequest("Request expired")
	case !auth.SecretMatches(v.Digest, secret):
		return fhir.BadRequest("Incorrect secret")
	}
	spent := v
	spent.Used = true
	// Conditional: of two racing uses, one wins.
	if err := s.secrets.Swap(ctx, verificationKey(id), raw, spent); errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		return fhir.BadRequest("Already used")
	} else if err != nil {
		return err
	}
	return s.MarkEmailVerified(ctx, v.User)
}

// MarkEmailVerified sets User.emailVerified: the person showed they read
// the address's mail (a verification link, or a set-password link).
func (s *Service) MarkEmailVerified(ctx context.Context, userID string) error {
	_, err := s.repo.Modify(ctx, repo.AllProjects, "User", userID, repo.WriteOptions{}, func(cur *repo.Resource) (map[string]any, error) {
		u, err := cur.Decode()
		if err != nil {
			return nil, err
		}
		if u["emailVerified"] == true {
			return nil, nil
		}
		u["emailVerified"] = true
		return u, nil
	})
	return err
}

// CheckVerifiedEmail refuses a membership's sign-in when its project
// requires a verified e-mail and the user's is not.
func (s *Service) CheckVerifiedEmail(ctx context.Context, m *session.Membership) error {
	typ, uid, ok := fhir.SplitReference(m.User)
	if !ok || typ != "User" || m.SuperAdmin || m.Project == "" {
		return nil
	}
	required, err := s.ProjectFlag(ctx, m.Project, VerifiedEmailSetting)
	if err != nil || !required {
		return err
	}
	u, err := s.repo.Read(ctx, repo.AllProjects, "User", uid)
	if err != nil {
		return err
	}
	var user struct {
		EmailVerified bool `json:"emailVerified"`
	}
	if err := json.Unmarshal(u.JSON, &user); err != nil {
		return err
	}
	if !user.EmailVerified {
		return fhir.BadRequest("Email verification is required")
	}
	return nil
}
