package identity

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/pquerna/otp/totp"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/pkg/testenv"
	"github.com/pinion-health/pinion/services/identity/factors"
	"github.com/pinion-health/pinion/services/identity/limits"
	"github.com/pinion-health/pinion/services/identity/signin"
)

// pinClock fixes the time codes are checked at, in the middle of a step,
// so that a test's codes never straddle a step boundary.
func pinClock(t *testing.T) time.Time {
	t.Helper()
	now := time.Unix(time.Now().Unix()/factors.Period*factors.Period+factors.Period/2, 0)
	factors.Clock = func() time.Time { return now }
	t.Cleanup(func() { factors.Clock = time.Now })
	return now
}

// codeAt is the authenticator's code for the secret of uri at step
// offset from now.
func codeAt(t *testing.T, uri string, now time.Time, steps int) string {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "otpauth" || u.Host != "totp" {
		t.Fatalf("enrollUri %q", uri)
	}
	c, err := totp.GenerateCode(u.Query().Get("secret"), now.Add(time.Duration(steps*factors.Period)*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// principal is the person's token, from a password sign-in of theirs.
func (p person) principal() *bus.Principal {
	id := uuid.NewString()
	if _, err := live.conns.Sessions.PutLogin(context.Background(), id, session.Login{User: p.user, Membership: p.membership, AuthMethod: signin.AuthPassword}); err != nil {
		panic(err)
	}
	return &bus.Principal{LoginID: id, User: p.user, Profile: p.profile, Project: p.project, Membership: p.membership}
}

func signedInRequest(pr *bus.Principal, remote string, body any) *bus.Request {
	r := jsonRequest(remote, body)
	r.Principal = pr
	return r
}

// refusedWith checks that err is a 400 OperationOutcome saying text.
func refusedWith(t *testing.T, err error, status int, text string) {
	t.Helper()
	fe := fhir.AsError(err)
	if err == nil || fe.Status != status || fe.Message() != text {
		t.Fatalf("got %v, want %d %q", err, status, text)
	}
}

// enroll takes the person through status and enroll, returning the
// enrolment URI and the recovery codes.
func (p person) enroll(t *testing.T, now time.Time) (string, []string) {
	t.Helper()
	ctx := context.Background()
	resp, err := live.svc.factors.Status(ctx, &bus.Request{Method: "GET", Principal: p.principal()})
	st := decoded(t, resp, err, 200)
	uri, _ := st["enrollUri"].(string)
	if st["enrolled"] != false || !strings.HasPrefix(uri, "otpauth://totp/Pinion:") ||
		!strings.HasPrefix(st["enrollQrCode"].(string), "data:image/png;base64,") {
		t.Fatalf("status %v", st)
	}
	resp, err = live.svc.factors.Enroll(ctx, signedInRequest(p.principal(), "10.32.0.1", map[string]any{"token": codeAt(t, uri, now, -1)}))
	out := decoded(t, resp, err, 200)
	if out["id"] != fhir.AllOK().ID {
		t.Fatalf("enroll answered %v", out)
	}
	var codes []string
	for _, c := range out["recoveryCodes"].([]any) {
		codes = append(codes, c.(string))
	}
	if len(codes) != factors.RecoveryCount {
		t.Fatalf("recovery codes %v", codes)
	}
	return uri, codes
}

func verifyReq(login, token string) *bus.Request {
	return jsonRequest("10.32.0.2", map[string]any{"login": login, "token": token})
}

// TestMFAEnrolAndSignIn: Medplum's enrolment and sign-in shapes; a code
// works once, within one step either side, and no profile or code is
// given before it.
func TestMFAEnrolAndSignIn(t *testing.T) {
	ctx := context.Background()
	now := pinClock(t)
	p := newPerson(t, "mfa")
	// Before the status made a secret, and a wrong first code: Medplum's texts.
	enrollWith := func(tok string) error {
		_, err := live.svc.factors.Enroll(ctx, signedInRequest(p.principal(), "10.32.0.1", map[string]any{"token": tok}))
		return err
	}
	refusedWith(t, enrollWith("000000"), 400, "Secret not found")
	if _, err := live.svc.factors.Status(ctx, &bus.Request{Principal: p.principal()}); err != nil {
		t.Fatal(err)
	}
	refusedWith(t, enrollWith("000000"), 400, "Invalid token")
	uri, _ := p.enroll(t, now)
	resp, err := live.svc.factors.Status(ctx, &bus.Request{Principal: p.principal()})
	if st := decoded(t, resp, err, 200); len(st) != 1 || st["enrolled"] != true {
		t.Fatalf("status after enrolment %v", st)
	}
	refusedWith(t, enrollWith(codeAt(t, uri, now, 0)), 400, "Already enrolled")

	// The password alone: a login, no code.
	resp, err = p.login(t, "10.32.0.2", map[string]any{"codeChallenge": rfcChallenge, "codeChallengeMethod": "S256"})
	body := decoded(t, resp, err, 200)
	login, _ := body["login"].(string)
	if body["mfaRequired"] != true || body["code"] != nil || login == "" {
		t.Fatalf("login answered %v", body)
	}
	_, err = live.svc.signins.ChooseProfile(ctx, jsonRequest("10.32.0.2", map[string]any{"login": login, "profile": p.membership}))
	refusedWith(t, err, 400, "MFA verification required")

	// The enrolment's code again (replay), a code two steps old (expired),
	// a wrong one: Medplum's text each time.
	for _, tok := range []string{codeAt(t, uri, now, -1), codeAt(t, uri, now, -2), "123456"} {
		_, err = live.svc.signins.MFAVerify(ctx, verifyReq(login, tok))
		refusedWith(t, err, 400, "Invalid MFA token")
	}
	_, err = live.svc.signins.MFAVerify(ctx, verifyReq(login, ""))
	refusedWith(t, err, 400, "Missing token")
	_, err = live.svc.signins.MFAVerify(ctx, verifyReq(login, strings.Repeat("1", factors.BodyLimit)))
	refusedWith(t, err, 413, "The body of an MFA request is at most 1024 bytes")

	resp, err = live.svc.signins.MFAVerify(ctx, verifyReq(login, codeAt(t, uri, now, 0)))
	body = decoded(t, resp, err, 200)
	code, _ := body["code"].(string)
	if body["login"] != login || !strings.HasPrefix(code, login+".") {
		t.Fatalf("verify answered %v", body)
	}
	if tr := redeem(t, code); tr.Status != 200 {
		t.Fatalf("redeem: %d %s", tr.Status, tr.Body)
	}
	_, err = live.svc.signins.MFAVerify(ctx, verifyReq(login, codeAt(t, uri, now, 1)))
	refusedWith(t, err, 400, "Login granted")

	// A second sign-in: the code just used is refused, the next step's works.
	resp, err = p.login(t, "10.32.0.2", nil)
	login = decoded(t, resp, err, 200)["login"].(string)
	_, err = live.svc.signins.MFAVerify(ctx, verifyReq(login, codeAt(t, uri, now, 0)))
	refusedWith(t, err, 400, "Invalid MFA token")
	resp, err = live.svc.signins.MFAVerify(ctx, verifyReq(login, codeAt(t, uri, now, 1)))
	if b := decoded(t, resp, err, 200); b["code"] == nil {
		t.Fatalf("verify answered %v", b)
	}
	_, err = live.svc.signins.MFAVerify(ctx, verifyReq(login, codeAt(t, uri, now, 1)))
	refusedWith(t, err, 400, "Login already verified")
}

// TestMFARecoveryCodes: each recovery code stands in for a code once, and
// is stored hashed.
func TestMFARecoveryCodes(t *testing.T) {
	ctx := context.Background()
	now := pinClock(t)
	p := newPerson(t, "recovery")
	_, codes := p.enroll(t, now)
	raw, err := live.conns.Repo.Secret(ctx, factors.RecordKey(p.userID))
	if err != nil || strings.Contains(string(raw), codes[0]) {
		t.Fatalf("stored %s, %v", raw, err)
	}
	for i, want := range []bool{true, false} {
		resp, err := p.login(t, "10.32.1.1", nil)
		login := decoded(t, resp, err, 200)["login"].(string)
		resp, err = live.svc.signins.MFAVerify(ctx, verifyReq(login, codes[3]))
		if !want {
			refusedWith(t, err, 400, "Invalid MFA token")
			continue
		}
		if b := decoded(t, resp, err, 200); b["code"] == nil {
			t.Fatalf("sign-in %d with a recovery code: %v", i, b)
		}
	}
}

// TestMFAWrongCodesAreLimited: wrong codes count against the sign-in
// limiter as wrong passwords do.
func TestMFAWrongCodesAreLimited(t *testing.T) {
	ctx := context.Background()
	now := pinClock(t)
	p := newPerson(t, "limited")
	uri, _ := p.enroll(t, now)
	resp, err := p.login(t, "10.32.2.1", nil)
	login := decoded(t, resp, err, 200)["login"].(string)
	req := func(tok string) *bus.Request {
		return jsonRequest("10.32.2.9", map[string]any{"login": login, "token": tok})
	}
	for range limits.MaxFailures {
		_, err = live.svc.signins.MFAVerify(ctx, req("999999"))
		refusedWith(t, err, 400, "Invalid MFA token")
	}
	_, err = live.svc.signins.MFAVerify(ctx, req(codeAt(t, uri, now, 0)))
	if fhir.AsError(err).Status != http.StatusTooManyRequests {
		t.Fatalf("after %d wrong codes: %v", limits.MaxFailures, err)
	}
}

// requireMFA sets the project's mfaRequired setting.
func requireMFA(t *testing.T, project string) {
	t.Helper()
	ctx := context.Background()
	res, err := live.conns.Repo.Read(ctx, repo.AllProjects, "Project", project)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := res.Decode()
	m["setting"] = []any{map[string]any{"name": factors.RequiredSetting, "valueBoolean": true}}
	if _, err := live.conns.Repo.Update(ctx, repo.AllProjects, m, repo.WriteOptions{Project: project}); err != nil {
		t.Fatal(err)
	}
}

// TestMFAProjectRequirement: a member of a project that requires MFA
// enrols at sign-in, cannot disable their factor, and an admin's reset
// makes them enrol again, recorded in an AuditEvent.
func TestMFAProjectRequirement(t *testing.T) {
	ctx := context.Background()
	now := pinClock(t)
	p := newPerson(t, "required")
	requireMFA(t, p.project)

	resp, err := p.login(t, "10.32.3.1", nil)
	body := decoded(t, resp, err, 200)
	login, _ := body["login"].(string)
	uri, _ := body["enrollUri"].(string)
	if body["mfaEnrollRequired"] != true || body["code"] != nil || !strings.HasPrefix(uri, "otpauth://totp/") || body["enrollQrCode"] == nil {
		t.Fatalf("login answered %v", body)
	}
	_, err = live.svc.signins.MFAVerify(ctx, verifyReq(login, codeAt(t, uri, now, 0)))
	refusedWith(t, err, 400, "User not enrolled in MFA")
	// Medplum's login-enroll checks the code as a sign-in's (verifyMfaToken).
	_, err = live.svc.signins.MFALoginEnroll(ctx, verifyReq(login, "111111"))
	refusedWith(t, err, 400, "Invalid MFA token")
	resp, err = live.svc.signins.MFALoginEnroll(ctx, verifyReq(login, codeAt(t, uri, now, 0)))
	body = decoded(t, resp, err, 200)
	if body["code"] == nil || len(body["recoveryCodes"].([]any)) != factors.RecoveryCount {
		t.Fatalf("login-enroll answered %v", body)
	}

	_, err = live.svc.factors.Disable(ctx, signedInRequest(p.principal(), "10.32.3.1", map[string]any{"token": codeAt(t, uri, now, 1)}))
	refusedWith(t, err, 400, "MFA is required for this user and cannot be disabled")

	// Only an admin resets; the member then enrols again with a new secret.
	path := map[string]string{"projectId": p.project, "membershipId": p.membership}
	_, err = live.svc.factors.Reset(ctx, &bus.Request{Method: "POST", Params: path, Principal: p.principal()})
	if fhir.AsError(err).Status != 403 {
		t.Fatalf("a member's reset: %v", err)
	}
	admin := &bus.Principal{User: "User/admin", Profile: "Practitioner/admin", Project: p.project, Admin: true}
	resp, err = live.svc.factors.Reset(ctx, &bus.Request{Method: "POST", Params: path, Principal: admin})
	decoded(t, resp, err, 200)
	resp, err = p.login(t, "10.32.3.1", nil)
	body = decoded(t, resp, err, 200)
	if body["mfaEnrollRequired"] != true || body["enrollUri"] == uri {
		t.Fatalf("after the reset, login answered %v", body)
	}
	q, _ := search.Parse("AuditEvent", url.Values{"entity": {"ProjectMembership/" + p.membership}})
	var page *repo.Page
	testenv.Eventually(t, "the reset in the project's audit trail", func() bool {
		page, err = live.conns.Repo.Search(ctx, repo.Scope{Project: p.project}, "AuditEvent", q)
		return err == nil && len(page.Resources) == 1
	})
	if !strings.Contains(string(page.Resources[0].JSON), `"mfa-reset"`) {
		t.Fatalf("audit event %s", page.Resources[0].JSON)
	}
	var ev map[string]any
	_ = json.Unmarshal(page.Resources[0].JSON, &ev)
	if ev["agent"].([]any)[0].(map[string]any)["who"].(map[string]any)["reference"] != admin.Profile {
		t.Fatalf("audit event %v", ev)
	}
}

// TestMFADisable: the owner removes their factor with a code; the secret
// is replaced, so the old authenticator's codes never work again.
func TestMFADisable(t *testing.T) {
	ctx := context.Background()
	now := pinClock(t)
	p := newPerson(t, "disable")
	_, err := live.svc.factors.Disable(ctx, signedInRequest(p.principal(), "10.32.4.1", map[string]any{"token": "123456"}))
	refusedWith(t, err, 400, "Secret not found")
	uri, _ := p.enroll(t, now)
	_, err = live.svc.factors.Disable(ctx, signedInRequest(p.principal(), "10.32.4.1", map[string]any{"token": "123456"}))
	refusedWith(t, err, 400, "Invalid token")
	resp, err := live.svc.factors.Disable(ctx, signedInRequest(p.principal(), "10.32.4.1", map[string]any{"token": codeAt(t, uri, now, 0)}))
	decoded(t, resp, err, 200)
	resp, err = p.login(t, "10.32.4.1", nil)
	if b := decoded(t, resp, err, 200); b["code"] == nil {
		t.Fatalf("after disabling, login answered %v", b)
	}
	resp, err = live.svc.factors.Status(ctx, &bus.Request{Principal: p.principal()})
	if st := decoded(t, resp, err, 200); st["enrolled"] != false || st["enrollUri"] == uri {
		t.Fatalf("status after disabling %v", st)
	}
}

// TestMFAInviteRequired: an invite with mfaRequired has the invited
// person enrol at their first sign-in to that project, with Medplum's
// answer. The requirement is the project's: it is on the membership the
// invite makes (membership's step), not on the person's account, so the
// person's other projects still take a password alone.
func TestMFAInviteRequired(t *testing.T) {
	ctx := context.Background()
	now := pinClock(t)
	project := newProject(t, "MFA invites")
	email := newEmail("mfainvitee")
	id, msg := newInvite(t, invite.Request{ProjectID: project, FirstName: "Grace", LastName: "Hopper", Email: email,
		PasswordHash: mustHash(t, "initial password"), MFARequired: true})
	if err := live.svc.accounts.InviteUser(ctx, msg); err != nil {
		t.Fatal(err)
	}
	rec, err := live.svc.accounts.Invites().Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if acct, _, err := live.svc.factors.Load(ctx, rec.UserID); err != nil || acct.Required || acct.Secret != "" {
		t.Fatalf("the invite's user step wrote on the account: %+v %v", acct, err)
	}
	newMembership(t, project, "User/"+rec.UserID, newPractitioner(t, project, "Grace", "Hopper"),
		map[string]any{"extension": []any{map[string]any{"url": projects.MFARequiredURL, "valueBoolean": true}}})
	elsewhere := newProject(t, "No MFA here")
	newMembership(t, elsewhere, "User/"+rec.UserID, newPractitioner(t, elsewhere, "Grace", "Hopper"), nil)
	resp, err := live.svc.signins.Login(ctx, jsonRequest("10.32.5.1", map[string]any{"email": email, "password": "initial password", "projectId": elsewhere}))
	if b := decoded(t, resp, err, 200); b["code"] == nil {
		t.Fatalf("the other project's sign-in answered %v", b)
	}
	resp, err = live.svc.signins.Login(ctx, jsonRequest("10.32.5.1", map[string]any{"email": email, "password": "initial password", "projectId": project}))
	body := decoded(t, resp, err, 200)
	uri, _ := body["enrollUri"].(string)
	if body["mfaEnrollRequired"] != true || body["code"] != nil || uri == "" {
		t.Fatalf("login answered %v", body)
	}
	resp, err = live.svc.signins.MFALoginEnroll(ctx, verifyReq(body["login"].(string), codeAt(t, uri, now, 0)))
	if b := decoded(t, resp, err, 200); b["code"] == nil {
		t.Fatalf("login-enroll answered %v", b)
	}
}

// TestMFAEnrolledInMe: /auth/me's security says whether the person has
// enrolled an authenticator, as Medplum's web app shows it.
func TestMFAEnrolledInMe(t *testing.T) {
	now := pinClock(t)
	p := newPerson(t, "mfame")
	if sec := meOf(t, p)["security"].(map[string]any); sec["mfaEnrolled"] != false {
		t.Fatalf("before: %v", sec)
	}
	p.enroll(t, now)
	if sec := meOf(t, p)["security"].(map[string]any); sec["mfaEnrolled"] != true {
		t.Fatalf("after: %v", sec)
	}
}
