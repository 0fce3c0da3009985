package identity

import (
	"context"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pinion-health/pinion/services/identity/signin"
)

// A project with requireExternalSignIn takes its people only from its
// identity provider: a password is refused at the membership gate, on
// /auth/login and on choosing the profile, while the provider's sign-in
// goes through.
func TestRequireExternalSignIn(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "ssoonly")
	prov := newOIDCProvider(t)
	client := strings.TrimPrefix(newResource(t, p.project, map[string]any{"resourceType": "ClientApplication", "name": "sso",
		"identityProvider": prov.idp(nil)}), "ClientApplication/")
	// The same person in a project without the setting keeps the password.
	other := newProject(t, "Password clinic")
	otherMembership := newMembership(t, other, p.user, newPractitioner(t, other, "Ada", "Elsewhere"), nil)

	resp, err := p.login(t, "10.3.6.1", map[string]any{"projectId": p.project})
	decoded(t, resp, err, 200)

	setProject(t, p.project, func(doc map[string]any) {
		doc["setting"] = []any{map[string]any{"name": "requireExternalSignIn", "valueBoolean": true}}
	})
	_, err = p.login(t, "10.3.6.1", map[string]any{"projectId": p.project})
	expectOutcome(t, err, 400, signin.ExternalOnlyText, "")

	// Signed in with the password to both projects, the person may choose
	// the other one only.
	resp, err = p.login(t, "10.3.6.1", nil)
	login, _ := decoded(t, resp, err, 200)["login"].(string)
	choose := func(profile string) error {
		_, err := live.svc.signins.ChooseProfile(ctx, jsonRequest("10.3.6.1", map[string]any{"login": login, "profile": profile}))
		return err
	}
	expectOutcome(t, choose(p.membership), 400, signin.ExternalOnlyText, "")
	if err := choose(otherMembership); err != nil {
		t.Fatalf("the other project: %v", err)
	}

	// The provider's sign-in reaches the project.
	_, status := signedInLogin(callbackOK(t, prov.code(func(c jwt.MapClaims) { c["email"] = p.email }, nil), map[string]any{"clientId": client}))
	if code, _ := status["code"].(string); code == "" {
		t.Fatalf("login status %v", status)
	}
}
