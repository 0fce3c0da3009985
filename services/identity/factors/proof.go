package factors

import "github.com/pinion-health/pinion/pkg/session"

// Proof is what a sign-in has shown, which the sign-in gate weighs
// against a membership's conditions, and the second-factor rules here
// against what a sign-in still owes.
type Proof struct {
	// Method is how the person signed in: Medplum's authMethod (""
	// or "password", "google", "external", "exchange").
	Method string
	// ProviderProject is the project whose identity provider vouched for
	// the person; the sign-in reaches that project only. "" when no
	// project's provider did (a domain's provider is a super admin's).
	ProviderProject string
	// ProviderMFA: the provider asserted a second factor (amr), which
	// counts for a project that trusts it (trustIdentityProviderMfa).
	ProviderMFA bool
	// Factor: a second factor (a code, a recovery code, a passkey) was given.
	Factor bool
}

// ProofOf is what a login has shown.
func ProofOf(l *session.Login) Proof {
	return Proof{Method: l.AuthMethod, ProviderProject: l.ProviderProject, ProviderMFA: l.ProviderMFA, Factor: l.MFAVerified}
}
