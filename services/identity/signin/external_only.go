package signin

import (
	"context"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/factors"
)

// ExternalOnlySetting is the Project.setting (valueBoolean) that lets the
// project's people sign in only through an identity provider: an external
// OpenID provider (/auth/external) or a token exchange, never a password
// (nor Google, whose accounts the organisation does not control), so that
// ending someone's account at the provider ends their access here.
// Medplum has no such setting.
const ExternalOnlySetting = "requireExternalSignIn"

// ExternalOnlyText is the refusal of any other sign-in to such a project.
const ExternalOnlyText = "This project requires signing in through its identity provider"

// viaProvider says whether a sign-in was vouched for by an external
// identity provider.
func viaProvider(method string) bool { return method == AuthExternal || method == AuthExchange }

// checkExternalOnly refuses a sign-in to a person's membership in a
// project with requireExternalSignIn unless a provider vouched for it: a
// domain's (written by super admins), or the project's own. Another
// project's provider speaks for that project only.
func (s *Service) checkExternalOnly(ctx context.Context, m *session.Membership, p factors.Proof) error {
	typ, _, ok := fhir.SplitReference(m.User)
	if !ok || typ != "User" || m.Project == "" {
		return nil
	}
	if viaProvider(p.Method) && (p.ProviderProject == "" || p.ProviderProject == m.Project) {
		return nil
	}
	on, err := s.accounts.ProjectFlag(ctx, m.Project, ExternalOnlySetting)
	if err != nil {
		return err
	}
	if on {
		return fhir.BadRequest(ExternalOnlyText)
	}
	return nil
}
