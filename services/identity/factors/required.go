package factors

import (
	"context"
	"errors"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
)

// requiredFor reports whether a user must keep a factor: their invite
// asked for it account-wide (rec.Required, written by earlier versions;
// an invite now requires it of the membership it makes), or one of their
// active memberships (in projectID only, when given) requires one.
func (s *Service) requiredFor(ctx context.Context, userRef, projectID string, rec Record) (bool, error) {
	if rec.Required {
		return true, nil
	}
	choices, err := s.accounts.Memberships(ctx, userRef, projectID)
	if err != nil {
		return false, err
	}
	for _, c := range choices {
		req, err := s.MembershipRequires(ctx, c.ID)
		if err != nil || req {
			return req, err
		}
	}
	return false, nil
}

// MembershipRequires reports whether signing in as a membership needs
// a second factor: the membership's own requirement (an invite's
// mfaRequired) or its project's setting.
func (s *Service) MembershipRequires(ctx context.Context, membership string) (bool, error) {
	m, err := s.sessions.GetMembership(ctx, membership)
	if err != nil {
		return false, err
	}
	return s.Required(ctx, m)
}

func (s *Service) Required(ctx context.Context, m *session.Membership) (bool, error) {
	if m.MFARequired {
		return true, nil
	}
	return s.projectRequires(ctx, m.Project)
}

// projectRequires reads Project.setting mfaRequired.
func (s *Service) projectRequires(ctx context.Context, projectID string) (bool, error) {
	return s.accounts.ProjectFlag(ctx, projectID, RequiredSetting)
}

// TrustProviderSetting is the Project.setting (valueBoolean) by which a
// project counts its identity providers' own second factor — an ID token
// whose amr says mfa, otp or hwk — as the second factor Pinion would ask.
const TrustProviderSetting = "trustIdentityProviderMfa"

// TrustedProvider reports whether a provider's asserted factor
// stands for Pinion's own in project (one named, that trusts it).
func (s *Service) TrustedProvider(ctx context.Context, p Proof, project string) (bool, error) {
	if !p.ProviderMFA || project == "" {
		return false, nil
	}
	return s.accounts.ProjectFlag(ctx, project, TrustProviderSetting)
}

// Step decides what a sign-in owes before its result: nothing, a
// code ("verify": the person has an authenticator, which a sign-in of
// theirs always asks for), or enrolment ("enroll": required by every
// membership the sign-in may reach, so asked now; where only some
// require it, the gate asks when one of those is chosen). A project that
// trusts its identity provider's factor (amr) takes it instead. A
// provider of a project that does not hold the account never enrols a
// factor on it. For enrolment the person gets a secret, once.
func (s *Service) Step(ctx context.Context, userID, projectID string, p Proof) (string, Record, error) {
	step, rec, err := s.Owed(ctx, userID, projectID, p)
	if err != nil || step != "enroll" {
		return step, rec, err
	}
	if err := s.accounts.ProviderMayChange(ctx, p.ProviderProject, userID); err != nil {
		return "", rec, EnrolElsewhere()
	}
	if rec, err = s.EnsureSecret(ctx, userID); errors.Is(err, ErrUnchanged) {
		err = nil
	}
	return "enroll", rec, err
}

// Owed is Step's decision, with nothing written.
func (s *Service) Owed(ctx context.Context, userID, projectID string, p Proof) (string, Record, error) {
	rec, _, err := s.Load(ctx, userID)
	if err != nil || p.Factor {
		return "", rec, err
	}
	trusted, err := s.TrustedProvider(ctx, p, projectID)
	if err != nil || trusted {
		return "", rec, err
	}
	if rec.Enrolled {
		return "verify", rec, nil
	}
	required := rec.Required
	if !required {
		if required, err = s.everyRequires(ctx, "User/"+userID, projectID); err != nil {
			return "", rec, err
		}
	}
	if !required {
		return "", rec, nil
	}
	return "enroll", rec, nil
}

// EnrolElsewhere refuses a sign-in that must enrol a factor but came
// through a provider that may not add one to the account.
func EnrolElsewhere() error {
	return fhir.BadRequest("This project requires a second factor: set one up by signing in with your password")
}

// everyRequires reports whether the user has active
// memberships (in projectID only, when given) and every one of them
// requires a second factor.
func (s *Service) everyRequires(ctx context.Context, userRef, projectID string) (bool, error) {
	choices, err := s.accounts.Memberships(ctx, userRef, projectID)
	if err != nil || len(choices) == 0 {
		return false, err
	}
	for _, c := range choices {
		req, err := s.MembershipRequires(ctx, c.ID)
		if err != nil || !req {
			return false, err
		}
	}
	return true, nil
}
