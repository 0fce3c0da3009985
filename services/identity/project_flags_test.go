package identity

import (
	"slices"
	"testing"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/factors"
	"github.com/pinion-health/pinion/services/identity/signin"
)

// Every project setting identity enforces is one a project's admins may
// set (pkg/access keeps that list): a new setting left off it would be for
// super admins alone, and a renamed one would stop being settable.
func TestProjectFlagsAreAdminSettings(t *testing.T) {
	for _, name := range []string{factors.RequiredSetting, account.VerifiedEmailSetting, signin.ExternalOnlySetting, factors.TrustProviderSetting} {
		if !slices.Contains(access.AdminProjectSettings, name) {
			t.Errorf("%s is read by identity but not in access.AdminProjectSettings %v", name, access.AdminProjectSettings)
		}
	}
}
