package signin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/factors"
)

// ErrFactorOwed is CheckSignIn's answer for a membership whose project
// requires a second factor the sign-in has not given: the caller asks the
// person to enrol (OwedEnrolment, AskFactor), or refuses where no one can
// be asked (a token exchange).
var ErrFactorOwed = errors.New("this project requires a second factor")

// signInCodeRefused is Medplum's text for a wrong code at sign-in, whether
// the sign-in verifies a factor or enrols one (its verifyMfaToken).
const signInCodeRefused = "Invalid MFA token"

// checkFactor is CheckSignIn's second-factor rule: a membership that
// requires one is signed in to only with one, given here or, where its
// project trusts that, asserted by the identity provider.
func (s *Service) checkFactor(ctx context.Context, m *session.Membership, p factors.Proof) error {
	if p.Factor {
		return nil
	}
	required, err := s.factors.Required(ctx, m)
	if err != nil || !required {
		return err
	}
	if ok, err := s.factors.TrustedProvider(ctx, p, m.Project); err != nil || ok {
		return err
	}
	// (A person's own authenticator, and an account-wide requirement of
	// earlier versions, are asked before any membership: mfaLoginStep.)
	return fmt.Errorf("%w: %w", ErrFactorOwed, fhir.BadRequest("MFA enrollment required"))
}

// OwedEnrolment turns a login whose chosen membership requires a factor
// (ErrFactorOwed) into the enrolment step: l owes "enroll", and the answer
// is /auth/login's for that step; once enrolled, the person chooses again.
func (s *Service) OwedEnrolment(ctx context.Context, loginID string, l *session.Login) (*bus.Response, error) {
	uid := account.UserIDOf(l.User)
	if err := s.accounts.ProviderMayChange(ctx, l.ProviderProject, uid); err != nil {
		return nil, factors.EnrolElsewhere()
	}
	rec, err := s.factors.EnsureSecret(ctx, uid)
	if errors.Is(err, factors.ErrUnchanged) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	l.MFA, l.MFAVerified = "enroll", false
	return s.MFALoginAnswer(ctx, loginID, "enroll", uid, rec)
}

// MFALoginAnswer is /auth/login's answer for a sign-in that owes a factor.
func (s *Service) MFALoginAnswer(ctx context.Context, loginID, step, userID string, rec factors.Record) (*bus.Response, error) {
	if step == "verify" {
		return bus.JSON(200, map[string]any{"login": loginID, "mfaRequired": true}), nil
	}
	uri, qr, err := s.factors.EnrollAnswer(ctx, userID, rec.Secret)
	if err != nil {
		return nil, err
	}
	return factors.NoStore(bus.JSON(200, map[string]any{"login": loginID, "mfaEnrollRequired": true, "enrollUri": uri, "enrollQrCode": qr})), nil
}

// mfaLoginOpen refuses a factor for a login that is over or verified,
// with Medplum's texts.
func mfaLoginOpen(l *session.Login) error {
	switch {
	case l.Revoked:
		return fhir.BadRequest("Login revoked")
	case l.Granted:
		return fhir.BadRequest("Login granted")
	case l.MFAVerified:
		return fhir.BadRequest("Login already verified")
	}
	return nil
}

// MFAVerify is POST /auth/mfa/verify {login, token}: a code (or a
// recovery code) completes a password sign-in with the usual result.
func (s *Service) MFAVerify(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.completeMFA(ctx, r, false)
}

// MFALoginEnroll is POST /auth/mfa/login-enroll {login, token}: enrolment
// the sign-in required, completing it; the recovery codes come beside
// the usual result ("recoveryCodes").
func (s *Service) MFALoginEnroll(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.completeMFA(ctx, r, true)
}

func (s *Service) completeMFA(ctx context.Context, r *bus.Request, enroll bool) (*bus.Response, error) {
	in, err := factors.ReadBody(r, true)
	if err != nil {
		return nil, err
	}
	l, err := s.sessions.GetLogin(ctx, in.Login)
	if errors.Is(err, session.ErrNotFound) {
		return nil, fhir.NotFound()
	}
	if err != nil {
		return nil, err
	}
	if err := mfaLoginOpen(l); err != nil {
		return nil, err
	}
	// The trail's sign-in event (by route) names the person, refused or not.
	audit.Note(ctx, l.User, l.Project)
	uid := account.UserIDOf(l.User)
	switch {
	case enroll && l.MFA == "verify":
		return nil, fhir.BadRequest("Already enrolled")
	case enroll && l.MFA != "enroll":
		return nil, fhir.BadRequest("Secret not found")
	case !enroll && l.MFA != "verify":
		return nil, fhir.BadRequest("User not enrolled in MFA")
	}
	var codes []string
	err = s.factors.LimitedCode(ctx, r, uid, func() error {
		if enroll {
			var err error
			codes, err = s.factors.EnrollWith(ctx, uid, in.Token)
			return err
		}
		rec, _, err := s.factors.Load(ctx, uid)
		if err != nil {
			return err
		}
		if rec.Secret == "" || !rec.Enrolled {
			return fhir.BadRequest("User not enrolled in MFA")
		}
		ok, err := s.factors.SpendToken(ctx, uid, in.Token, true)
		if err == nil && !ok {
			return factors.ErrBadCode
		}
		return err
	})
	if errors.Is(err, factors.ErrBadCode) {
		// Enrolling here checks the code as a sign-in does, with
		// Medplum's text for it (its /auth/mfa/enroll says "Invalid token").
		return nil, fhir.BadRequest(signInCodeRefused)
	}
	if err != nil {
		return nil, err
	}
	var resp *bus.Response
	_, err = s.sessions.UpdateLogin(ctx, in.Login, func(l *session.Login) error {
		if err := mfaLoginOpen(l); err != nil {
			return err
		}
		l.MFAVerified = true
		var err error
		resp, err = s.LoginResult(ctx, r, in.Login, l)
		return err
	})
	if err != nil {
		return nil, err
	}
	if codes != nil {
		var body map[string]any
		if json.Unmarshal(resp.Body, &body) == nil {
			body["recoveryCodes"] = codes
			resp = factors.NoStore(bus.JSON(resp.Status, body))
		}
	}
	return resp, nil
}
