package identity

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/identity/factors"
	"github.com/pinion-health/pinion/services/identity/signin"
)

// ssoClient registers a client in project whose identity provider is p.
func ssoClient(t *testing.T, project string, p *oidcProvider) string {
	t.Helper()
	return strings.TrimPrefix(newResource(t, project, map[string]any{"resourceType": "ClientApplication", "name": "sso",
		"redirectUris": []any{webCallback}, "identityProvider": p.idp(nil)}), "ClientApplication/")
}

// enrolled gives a user an authenticator.
func enrolled(t *testing.T, userID string) {
	t.Helper()
	if _, err := live.svc.factors.Update(context.Background(), userID, func(rec *factors.Record) error {
		rec.Secret, rec.Enrolled = "JBSWY3DPEHPK3PXP", true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// An attacker who founds a project, puts a provider they run on its
// client and invites a victim's address reaches, through that provider,
// the victim's membership in the attacker's project and nothing else:
// the sign-in is confined to that project; a victim with an
// authenticator is asked for it; the token it gives changes nothing of
// the account (factors, passkeys); and it never satisfies another
// project's requireExternalSignIn.
func TestProjectProviderReachesItsProjectOnly(t *testing.T) {
	ctx := context.Background()
	victim := newPerson(t, "victim")
	attackerProject := newProject(t, "Attacker's project")
	evil := newOIDCProvider(t)
	client := ssoClient(t, attackerProject, evil)
	inAttackers := newMembership(t, attackerProject, victim.user, newPractitioner(t, attackerProject, "Vic", "Tim"), nil)
	setProject(t, victim.project, func(doc map[string]any) {
		doc["setting"] = []any{map[string]any{"name": "requireExternalSignIn", "valueBoolean": true}}
	})
	vouch := func() string { return evil.code(func(c jwt.MapClaims) { c["email"] = victim.email }, nil) }

	// Medplum's client's state naming the attacker's client: a login of
	// the attacker's project only.
	resp, err := callback(vouch(), map[string]any{"clientId": client, "codeChallenge": rfcChallenge, "codeChallengeMethod": "S256"})
	login, status := signedInLogin(t, resp, err)
	l, err := live.conns.Sessions.GetLogin(ctx, login)
	if err != nil || l.ProviderProject != attackerProject || l.Project != attackerProject {
		t.Fatalf("login %+v %v", l, err)
	}
	code, _ := status["code"].(string)
	tok := decoded(t, redeem(t, code), nil, 200)
	if c := verify(t, tok["access_token"].(string), testBase); c.Profile == victim.profile {
		t.Fatalf("the attacker's provider reached the victim's own project: %+v", c)
	}
	// The victim's own project is out of its reach, whatever it asks.
	err = live.svc.signins.CheckSignIn(ctx, victim.membership, "10.9.0.1", factors.ProofOf(l))
	expectOutcome(t, err, 400, "Invalid project", "")
	err = live.svc.signins.CheckSignIn(ctx, victim.membership, "10.9.0.1", factors.Proof{Method: signin.AuthExternal, ProviderProject: attackerProject})
	expectOutcome(t, err, 400, "Invalid project", "")

	// Its token changes nothing of the account.
	pr := &bus.Principal{LoginID: login, User: victim.user, Profile: "Practitioner/x", Project: attackerProject, Membership: inAttackers}
	for name, call := range map[string]func() (*bus.Response, error){
		"mfa status": func() (*bus.Response, error) { return live.svc.factors.Status(ctx, &bus.Request{Principal: pr}) },
		"mfa enroll": func() (*bus.Response, error) {
			return live.svc.factors.Enroll(ctx, signedInRequest(pr, "10.9.0.1", map[string]any{"token": "123456"}))
		},
		"passkey begin": func() (*bus.Response, error) { return live.svc.factors.RegisterBegin(ctx, &bus.Request{Principal: pr}) },
		"passkey removal": func() (*bus.Response, error) {
			return live.svc.factors.Remove(ctx, &bus.Request{Principal: pr, Params: map[string]string{"id": "x"}})
		},
	} {
		_, err := call()
		if fe := fhir.AsError(err); err == nil || fe.Status != 403 || !strings.Contains(fe.Message(), "identity provider cannot change the account") {
			t.Errorf("%s: %v, want 403", name, err)
		}
	}
	if rec, _, err := live.svc.factors.Load(ctx, victim.userID); err != nil || rec.Secret != "" {
		t.Fatalf("the account got a secret: %+v %v", rec, err)
	}

	// A victim with an authenticator is asked for it, as after a password:
	// no code until then.
	enrolled(t, victim.userID)
	resp, err = callback(vouch(), map[string]any{"clientId": client, "redirectUri": webCallback, "codeChallenge": rfcChallenge, "codeChallengeMethod": "S256"})
	_, status = signedInLogin(t, resp, err)
	if status["mfaRequired"] != true || status["code"] != nil {
		t.Fatalf("an enrolled victim: login status %v", status)
	}
}

// A client's provider counts for its own project's requireExternalSignIn,
// a domain's for every project's.
func TestProvidersThatSatisfyRequireExternalSignIn(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "required")
	other := newProject(t, "Another provider's project")
	for _, tc := range []struct {
		name  string
		proof factors.Proof
		ok    bool
	}{
		{"the project's own provider", factors.Proof{Method: signin.AuthExternal, ProviderProject: p.project}, true},
		{"a domain's provider", factors.Proof{Method: signin.AuthExternal}, true},
		{"a token exchange of the project's client", factors.Proof{Method: signin.AuthExchange, ProviderProject: p.project}, true},
		{"a password", factors.Proof{Method: signin.AuthPassword}, false},
		{"Google", factors.Proof{Method: signin.AuthGoogle}, false},
	} {
		setProject(t, p.project, func(doc map[string]any) {
			doc["setting"] = []any{map[string]any{"name": "requireExternalSignIn", "valueBoolean": true}}
		})
		err := live.svc.signins.CheckSignIn(ctx, p.membership, "10.9.0.1", tc.proof)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want allowed %v", tc.name, err, tc.ok)
		}
	}
	// Another project's provider cannot even reach the membership.
	err := live.svc.signins.CheckSignIn(ctx, p.membership, "10.9.0.1", factors.Proof{Method: signin.AuthExternal, ProviderProject: other})
	expectOutcome(t, err, 400, "Invalid project", "")
}

// An external sign-in asks for the person's second factor as a password
// sign-in does, unless the provider asserts one (amr) and the project
// trusts its provider's (trustIdentityProviderMfa).
func TestExternalSignInSecondFactor(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "extmfa")
	prov := newOIDCProvider(t)
	client := ssoClient(t, p.project, prov)
	enrolled(t, p.userID)
	state := map[string]any{"clientId": client, "redirectUri": webCallback, "codeChallenge": rfcChallenge, "codeChallengeMethod": "S256"}
	signIn := func(amr ...string) (string, map[string]any, *bus.Response) {
		resp, err := callback(prov.code(func(c jwt.MapClaims) {
			c["email"] = p.email
			if amr != nil {
				c["amr"] = amr
			}
		}, nil), state)
		if err != nil || resp.Status != 302 {
			t.Fatalf("callback: %v %v", resp, err)
		}
		u, _ := url.Parse(resp.Header["Location"])
		if strings.HasPrefix(u.String(), webCallback+"?") {
			return u.Query().Get("login"), nil, resp
		}
		login, status := signedInLogin(t, resp, nil)
		return login, status, resp
	}

	// Not trusted: a code first, even with amr.
	for _, amr := range [][]string{nil, {"pwd", "mfa"}} {
		login, status, _ := signIn(amr...)
		if status == nil || status["mfaRequired"] != true {
			t.Fatalf("amr %v: %v", amr, status)
		}
		// The code is the person's, as after a password: a wrong one is refused.
		_, err := live.svc.signins.MFAVerify(ctx, verifyReq(login, "000000"))
		expectOutcome(t, err, 400, "Invalid MFA token", "")
	}

	// Trusted: the provider's factor counts when it asserts one.
	setProject(t, p.project, func(doc map[string]any) {
		doc["setting"] = []any{map[string]any{"name": factors.TrustProviderSetting, "valueBoolean": true}}
	})
	if _, status, _ := signIn(); status == nil || status["mfaRequired"] != true {
		t.Fatalf("trusted, no amr: %v", status)
	}
	login, status, resp := signIn("pwd", "hwk")
	if status != nil {
		t.Fatalf("trusted, amr hwk: %v", status)
	}
	u, _ := url.Parse(resp.Header["Location"])
	if u.Query().Get("code") == "" || !strings.HasPrefix(u.Query().Get("code"), login+".") {
		t.Fatalf("trusted, amr hwk: back to %s", u)
	}
}

// A project's MFA requirement reaches a sign-in only when one of its
// memberships is chosen: signed in to several projects, the person
// chooses another freely, and this one only after enrolling.
func TestProjectRequirementAppliesToItsProject(t *testing.T) {
	ctx := context.Background()
	now := pinClock(t)
	p := newPerson(t, "mixed")
	strict := newProject(t, "Requires MFA")
	strictMembership := newMembership(t, strict, p.user, newPractitioner(t, strict, "Ada", "Strict"), nil)
	setProject(t, strict, func(doc map[string]any) {
		doc["setting"] = []any{map[string]any{"name": factors.RequiredSetting, "valueBoolean": true}}
	})
	resp, err := p.login(t, "10.9.3.1", nil)
	body := decoded(t, resp, err, 200)
	login, _ := body["login"].(string)
	if body["memberships"] == nil {
		t.Fatalf("login answered %v", body)
	}
	choose := func(membership string) map[string]any {
		resp, err := live.svc.signins.ChooseProfile(ctx, jsonRequest("10.9.3.1", map[string]any{"login": login, "profile": membership}))
		return decoded(t, resp, err, 200)
	}
	// Choosing the strict project asks for enrolment, and nothing else.
	out := choose(strictMembership)
	uri, _ := out["enrollUri"].(string)
	if out["mfaEnrollRequired"] != true || out["code"] != nil || uri == "" {
		t.Fatalf("choosing the strict project: %v", out)
	}
	_, err = live.svc.signins.ChooseProfile(ctx, jsonRequest("10.9.3.1", map[string]any{"login": login, "profile": p.membership}))
	expectOutcome(t, err, 400, "MFA verification required", "")
	// Enrolled, the person chooses again, and gets the code.
	resp, err = live.svc.signins.MFALoginEnroll(ctx, verifyReq(login, codeAt(t, uri, now, 0)))
	if b := decoded(t, resp, err, 200); b["memberships"] == nil {
		t.Fatalf("login-enroll answered %v", b)
	}
	if out := choose(strictMembership); out["code"] == nil {
		t.Fatalf("after enrolling: %v", out)
	}

	// Another person in both, never enrolled: the lenient project takes
	// the password alone.
	q := newPerson(t, "lenient")
	newMembership(t, strict, q.user, newPractitioner(t, strict, "Q", "Strict"), nil)
	resp, err = q.login(t, "10.9.3.2", nil)
	login, _ = decoded(t, resp, err, 200)["login"].(string)
	resp, err = live.svc.signins.ChooseProfile(ctx, jsonRequest("10.9.3.2", map[string]any{"login": login, "profile": q.membership}))
	if b := decoded(t, resp, err, 200); b["code"] == nil {
		t.Fatalf("the lenient project: %v", b)
	}
	if rec, _, err := live.svc.factors.Load(ctx, q.userID); err != nil || rec.Enrolled {
		t.Fatalf("the lenient sign-in enrolled: %+v %v", rec, err)
	}
}
