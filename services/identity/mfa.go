package identity

// Authenticator codes (TOTP, RFC 6238) as Medplum 5.0.10 serves them
// (packages/server/src/auth/mfa.ts): the routes, their answers and their
// texts are Medplum's. Beyond Medplum: a code is accepted once, one-time
// recovery codes are issued at enrolment, a project may require MFA of
// all its members, and an admin may reset a member's MFA.
//
// A user's factor lives in the credentials (repo.Secret "mfa:<user id>"),
// never in the User resource: the shared secret, whether it is enrolled,
// the newest time step accepted (no replay), and the recovery codes'
// hashes.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"strings"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/services/identity/account"
)

const (
	mfaIssuer = "Pinion"
	// mfaPeriod and mfaSkew: 30-second steps, one step either side
	// accepted (Medplum's default mfaAuthenticatorWindow of 1).
	mfaPeriod = 30
	mfaSkew   = 1
	// recoveryCount codes are issued at enrolment.
	recoveryCount = 10
	// maxTokenLen bounds a posted code: a recovery code is 14 characters.
	maxTokenLen = 64
	// mfaRequiredSetting is the Project.setting that requires MFA of every
	// member (valueBoolean true).
	mfaRequiredSetting = "mfaRequired"
)

// mfaRecord is a user's authenticator factor, kept in the credentials.
type mfaRecord struct {
	Secret   string `json:"secret,omitempty"` // base32, as authenticator apps take it
	Enrolled bool   `json:"enrolled,omitempty"`
	// Required: the user's invite asked for MFA (Medplum's User.mfaRequired).
	Required bool `json:"required,omitempty"`
	// LastStep is the newest time step accepted: a code of that step or an
	// older one is refused, so a code seen over a shoulder is worthless.
	LastStep int64          `json:"lastStep,omitempty"`
	Recovery []recoveryCode `json:"recovery,omitempty"`
}

// recoveryCode is one recovery code: ID (its first part, shown) finds it,
// Hash is the whole code hashed as passwords are.
type recoveryCode struct {
	ID   string `json:"id"`
	Hash string `json:"hash"`
	Used bool   `json:"used,omitempty"`
}

func mfaKey(userID string) string { return "mfa:" + userID }

// loadMFA reads a user's record and its stored bytes (the condition of a
// swap; nil when there is none).
func (s *Service) loadMFA(ctx context.Context, userID string) (rec mfaRecord, raw []byte, err error) {
	raw, _, err = s.secrets.Load(ctx, mfaKey(userID), &rec)
	return rec, raw, err
}

// updateMFA applies change to a user's record and stores it if nobody
// changed it meanwhile, retrying a few times when someone did.
func (s *Service) updateMFA(ctx context.Context, userID string, change func(*mfaRecord) error) (mfaRecord, error) {
	for range 5 {
		rec, raw, err := s.loadMFA(ctx, userID)
		if err != nil {
			return rec, err
		}
		if err := change(&rec); err != nil {
			return rec, err
		}
		err = s.secrets.Swap(ctx, mfaKey(userID), raw, rec)
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrExists) {
			continue
		}
		return rec, err
	}
	return mfaRecord{}, fhir.Busy("The factor changed meanwhile; try again")
}

// newTOTPSecret is a fresh 160-bit secret (RFC 4226's recommendation).
func newTOTPSecret() string {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b)
}

// mfaClock is the time codes are checked at; tests pin it so that their
// codes never straddle a step.
var mfaClock = time.Now

var totpOpts = totp.ValidateOpts{Period: mfaPeriod, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1}

// acceptCode finds the step of code within ±mfaSkew of now, newer than
// the record's last: ok false when there is none (wrong, expired or
// already used).
func acceptCode(rec *mfaRecord, code string, now time.Time) (step int64, ok bool) {
	if rec.Secret == "" || len(code) != 6 {
		return 0, false
	}
	cur := now.Unix() / mfaPeriod
	for d := int64(-mfaSkew); d <= mfaSkew; d++ {
		st := cur + d
		want, err := totp.GenerateCodeCustom(rec.Secret, time.Unix(st*mfaPeriod, 0), totpOpts)
		if err != nil {
			return 0, false
		}
		if subtle.ConstantTimeCompare([]byte(want), []byte(code)) == 1 && st > rec.LastStep {
			return st, true
		}
	}
	return 0, false
}

// spendToken accepts a code (or, when recovery is set, an unused recovery
// code) for userID once, and records its use; ok false when it is not
// accepted. The swap makes two requests with the same code race: one wins.
func (s *Service) spendToken(ctx context.Context, userID, token string, recovery bool) (ok bool, err error) {
	if len(token) > maxTokenLen {
		return false, nil
	}
	token = strings.TrimSpace(token)
	_, err = s.updateMFA(ctx, userID, func(rec *mfaRecord) error {
		ok = false
		if step, good := acceptCode(rec, token, mfaClock()); good {
			rec.LastStep, ok = step, true
			return nil
		}
		if !recovery || !rec.Enrolled {
			return errStop
		}
		i, err := matchRecovery(ctx, rec.Recovery, token)
		if err != nil || i < 0 {
			return cmp.Or(err, errStop)
		}
		rec.Recovery[i].Used, ok = true, true
		return nil
	})
	if errors.Is(err, errStop) {
		return false, nil
	}
	return ok, err
}

// matchRecovery is the index of the unused recovery code token is, or -1:
// its first part finds the one hash to check, so a guess costs one hash.
func matchRecovery(ctx context.Context, codes []recoveryCode, token string) (int, error) {
	id, _, found := strings.Cut(strings.ToLower(token), "-")
	if !found {
		return -1, nil
	}
	for i, c := range codes {
		if c.Used || subtle.ConstantTimeCompare([]byte(c.ID), []byte(id)) != 1 {
			continue
		}
		ok, err := auth.CheckPassword(ctx, c.Hash, strings.ToLower(token))
		if err != nil || !ok {
			return -1, err
		}
		return i, nil
	}
	return -1, nil
}

// newRecoveryCodes makes recoveryCount codes ("abcd-efghjkmnpq", lower-case
// base32 without look-alikes) and their records.
func newRecoveryCodes(ctx context.Context) (codes []string, recs []recoveryCode, err error) {
	const alphabet = "abcdefghjkmnpqrstuvwxyz23456789"
	pick := func(n int) string {
		b := make([]byte, n)
		if _, err := rand.Read(b); err != nil {
			panic(err)
		}
		for i := range b {
			b[i] = alphabet[int(b[i])%len(alphabet)]
		}
		return string(b)
	}
	for range recoveryCount {
		id := pick(4)
		code := id + "-" + pick(10)
		h, err := auth.HashPassword(ctx, code)
		if err != nil {
			return nil, nil, err
		}
		codes = append(codes, code)
		recs = append(recs, recoveryCode{ID: id, Hash: h})
	}
	return codes, recs, nil
}

// enrollAnswer is the otpauth URI and its QR code (a PNG data URL) for
// secret: what the person's authenticator app scans.
func (s *Service) enrollAnswer(ctx context.Context, userID, secret string) (uri, qr string, err error) {
	email, err := s.accounts.UserEmail(ctx, userID)
	if err != nil {
		return "", "", err
	}
	raw, err := base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(secret)
	if err != nil {
		return "", "", err
	}
	key, err := totp.Generate(totp.GenerateOpts{
		Issuer: mfaIssuer, AccountName: email, Period: mfaPeriod, Secret: raw,
		Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1,
	})
	if err != nil {
		return "", "", err
	}
	img, err := key.Image(256, 256)
	if err != nil {
		return "", "", err
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return "", "", err
	}
	return key.URL(), "data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// ensureSecret gives a user a secret when they have none, and returns it.
func (s *Service) ensureSecret(ctx context.Context, userID string) (mfaRecord, error) {
	return s.updateMFA(ctx, userID, func(rec *mfaRecord) error {
		if rec.Secret != "" {
			return errUnchanged
		}
		rec.Secret = newTOTPSecret()
		return nil
	})
}

var errUnchanged = errors.New("unchanged")

// mfaBody is the MFA routes' body: {token}, and login when signing in.
type mfaBody struct {
	Login string `json:"login"`
	Token string `json:"token"`
}

// mfaBodyLimit bounds the body: a login id and a code fit many times over.
const mfaBodyLimit = 1024

// readMFABody reads the body, refusing missing fields with Medplum's texts.
func readMFABody(r *bus.Request, withLogin bool) (mfaBody, error) {
	var in mfaBody
	if len(r.Body) > mfaBodyLimit {
		return in, fhir.TooLarge("The body of an MFA request is at most 1024 bytes")
	}
	if err := r.DecodeJSON(&in); err != nil {
		return in, err
	}
	var issues []fhir.Issue
	if withLogin && in.Login == "" {
		issues = append(issues, fhir.FieldIssue("login", "Missing login"))
	}
	if in.Token == "" {
		issues = append(issues, fhir.FieldIssue("token", "Missing token"))
	}
	if len(issues) > 0 {
		return in, fhir.Invalid(issues...)
	}
	return in, nil
}

// mfaStatus is GET /auth/mfa/status.
func (s *Service) mfaStatus(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	uid, err := s.accounts.OwnerOf(ctx, r)
	if err != nil {
		return nil, err
	}
	rec, err := s.ensureSecret(ctx, uid)
	if err != nil && !errors.Is(err, errUnchanged) {
		return nil, err
	}
	if rec.Enrolled {
		return bus.JSON(200, map[string]any{"enrolled": true}), nil
	}
	uri, qr, err := s.enrollAnswer(ctx, uid, rec.Secret)
	if err != nil {
		return nil, err
	}
	return noStore(bus.JSON(200, map[string]any{"enrolled": false, "enrollUri": uri, "enrollQrCode": qr})), nil
}

func noStore(resp *bus.Response) *bus.Response {
	resp.Header["Cache-Control"] = "no-store"
	return resp
}

// enrollWith checks a first code against a user's secret and enrols them,
// issuing recovery codes; the texts are Medplum's.
func (s *Service) enrollWith(ctx context.Context, uid, token string) ([]string, error) {
	codes, recs, err := newRecoveryCodes(ctx)
	if err != nil {
		return nil, err
	}
	var refused error
	_, err = s.updateMFA(ctx, uid, func(rec *mfaRecord) error {
		refused = nil
		switch {
		case rec.Enrolled:
			refused = fhir.BadRequest("Already enrolled")
		case rec.Secret == "":
			refused = fhir.BadRequest("Secret not found")
		default:
			step, ok := acceptCode(rec, token, mfaClock())
			if !ok {
				refused = errBadCode
				break
			}
			rec.Enrolled, rec.LastStep, rec.Recovery = true, step, recs
			return nil
		}
		return errStop
	})
	if refused != nil {
		return nil, refused
	}
	if err != nil {
		return nil, err
	}
	s.log.Info("mfa enrolled", "user", uid)
	return codes, nil
}

var errBadCode = errors.New("bad code")

// limitedCode runs check, a code check for userID, under the sign-in
// limiter: a wrong code counts as a wrong password does.
func (s *Service) limitedCode(ctx context.Context, r *bus.Request, uid string, check func() error) error {
	email, err := s.accounts.UserEmail(ctx, uid)
	if err != nil {
		return err
	}
	if err := s.limiter.Allow(r.Remote, email); err != nil {
		return err
	}
	err = check()
	switch {
	case err == nil:
		s.limiter.Succeeded(r.Remote, email)
	case errors.Is(err, errBadCode):
		s.limiter.Failed(r.Remote, email)
	default:
		s.limiter.Released(r.Remote, email)
	}
	return err
}

// mfaEnroll is POST /auth/mfa/enroll {token}. The answer is Medplum's
// "All OK" outcome with the recovery codes beside it ("recoveryCodes"),
// shown this once.
func (s *Service) mfaEnroll(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	uid, err := s.accounts.OwnerOf(ctx, r)
	if err != nil {
		return nil, err
	}
	in, err := readMFABody(r, false)
	if err != nil {
		return nil, err
	}
	var codes []string
	err = s.limitedCode(ctx, r, uid, func() (err error) {
		codes, err = s.enrollWith(ctx, uid, in.Token)
		return err
	})
	if errors.Is(err, errBadCode) {
		return nil, fhir.BadRequest("Invalid token")
	}
	if err != nil {
		return nil, err
	}
	out := fhir.AllOK()
	b, _ := json.Marshal(out)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	body["recoveryCodes"] = codes
	resp := noStore(bus.JSON(200, body))
	resp.Header["Content-Type"] = bus.FHIRContentType
	return resp, nil
}

// mfaDisable is POST /auth/mfa/disable {token}: the factor goes and a new
// secret replaces it (a lost device's secret never works again). Someone
// whose project requires MFA cannot remove their last factor.
func (s *Service) mfaDisable(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	uid, err := s.accounts.OwnerOf(ctx, r)
	if err != nil {
		return nil, err
	}
	in, err := readMFABody(r, false)
	if err != nil {
		return nil, err
	}
	rec, _, err := s.loadMFA(ctx, uid)
	if err != nil {
		return nil, err
	}
	switch {
	case rec.Secret == "":
		return nil, fhir.BadRequest("Secret not found")
	case !rec.Enrolled:
		return nil, fhir.BadRequest("User not enrolled in MFA")
	}
	required, err := s.mfaRequiredFor(ctx, "User/"+uid, "", rec)
	if err != nil {
		return nil, err
	}
	if required {
		// A passkey is a second factor too: the authenticator may go
		// while one remains.
		n, err := s.passkeyCount(ctx, uid)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fhir.BadRequest("MFA is required for this user and cannot be disabled")
		}
	}
	err = s.limitedCode(ctx, r, uid, func() error {
		ok, err := s.spendToken(ctx, uid, in.Token, false)
		if err == nil && !ok {
			return errBadCode
		}
		return err
	})
	if errors.Is(err, errBadCode) {
		return nil, fhir.BadRequest("Invalid token")
	}
	if err != nil {
		return nil, err
	}
	if _, err := s.updateMFA(ctx, uid, func(rec *mfaRecord) error {
		rec.Enrolled, rec.Secret, rec.LastStep, rec.Recovery = false, newTOTPSecret(), 0, nil
		return nil
	}); err != nil {
		return nil, err
	}
	s.log.Info("mfa disabled", "user", uid)
	return bus.OK(), nil
}

// mfaRequiredFor reports whether a user must keep a factor: their invite
// asked for it account-wide (rec.Required, written by earlier versions;
// an invite now requires it of the membership it makes), or one of their
// active memberships (in projectID only, when given) requires one.
func (s *Service) mfaRequiredFor(ctx context.Context, userRef, projectID string, rec mfaRecord) (bool, error) {
	if rec.Required {
		return true, nil
	}
	choices, err := s.accounts.Memberships(ctx, userRef, projectID)
	if err != nil {
		return false, err
	}
	for _, c := range choices {
		req, err := s.membershipRequiresMFA(ctx, c.ID)
		if err != nil || req {
			return req, err
		}
	}
	return false, nil
}

// membershipRequiresMFA reports whether signing in as a membership needs
// a second factor: the membership's own requirement (an invite's
// mfaRequired) or its project's setting.
func (s *Service) membershipRequiresMFA(ctx context.Context, membership string) (bool, error) {
	m, err := s.sessions.GetMembership(ctx, membership)
	if err != nil {
		return false, err
	}
	return s.requiresMFA(ctx, m)
}

func (s *Service) requiresMFA(ctx context.Context, m *session.Membership) (bool, error) {
	if m.MFARequired {
		return true, nil
	}
	return s.projectRequiresMFA(ctx, m.Project)
}

// projectRequiresMFA reads Project.setting mfaRequired.
func (s *Service) projectRequiresMFA(ctx context.Context, projectID string) (bool, error) {
	return s.accounts.ProjectFlag(ctx, projectID, mfaRequiredSetting)
}

// trustProviderMFASetting is the Project.setting (valueBoolean) by which a
// project counts its identity providers' own second factor — an ID token
// whose amr says mfa, otp or hwk — as the second factor Pinion would ask.
const trustProviderMFASetting = "trustIdentityProviderMfa"

// providerFactorCounts reports whether a provider's asserted factor
// stands for Pinion's own in project (one named, that trusts it).
func (s *Service) providerFactorCounts(ctx context.Context, p signInProof, project string) (bool, error) {
	if !p.providerMFA || project == "" {
		return false, nil
	}
	return s.accounts.ProjectFlag(ctx, project, trustProviderMFASetting)
}

// errFactorOwed is checkSignIn's answer for a membership whose project
// requires a second factor the sign-in has not given: the caller asks the
// person to enrol (owedEnrolment, askFactor), or refuses where no one can
// be asked (a token exchange).
var errFactorOwed = errors.New("this project requires a second factor")

// checkFactor is checkSignIn's second-factor rule: a membership that
// requires one is signed in to only with one, given here or, where its
// project trusts that, asserted by the identity provider.
func (s *Service) checkFactor(ctx context.Context, m *session.Membership, p signInProof) error {
	if p.factor {
		return nil
	}
	required, err := s.requiresMFA(ctx, m)
	if err != nil || !required {
		return err
	}
	if ok, err := s.providerFactorCounts(ctx, p, m.Project); err != nil || ok {
		return err
	}
	// (A person's own authenticator, and an account-wide requirement of
	// earlier versions, are asked before any membership: mfaLoginStep.)
	return fmt.Errorf("%w: %w", errFactorOwed, fhir.BadRequest("MFA enrollment required"))
}

// mfaLoginStep decides what a sign-in owes before its result: nothing, a
// code ("verify": the person has an authenticator, which a sign-in of
// theirs always asks for), or enrolment ("enroll": required by every
// membership the sign-in may reach, so asked now; where only some
// require it, the gate asks when one of those is chosen). A project that
// trusts its identity provider's factor (amr) takes it instead. A
// provider of a project that does not hold the account never enrols a
// factor on it. For enrolment the person gets a secret, once.
func (s *Service) mfaLoginStep(ctx context.Context, userID, projectID string, p signInProof) (string, mfaRecord, error) {
	step, rec, err := s.factorOwed(ctx, userID, projectID, p)
	if err != nil || step != "enroll" {
		return step, rec, err
	}
	if err := s.accounts.ProviderMayChange(ctx, p.providerProject, userID); err != nil {
		return "", rec, enrolElsewhere()
	}
	if rec, err = s.ensureSecret(ctx, userID); errors.Is(err, errUnchanged) {
		err = nil
	}
	return "enroll", rec, err
}

// factorOwed is mfaLoginStep's decision, with nothing written.
func (s *Service) factorOwed(ctx context.Context, userID, projectID string, p signInProof) (string, mfaRecord, error) {
	rec, _, err := s.loadMFA(ctx, userID)
	if err != nil || p.factor {
		return "", rec, err
	}
	trusted, err := s.providerFactorCounts(ctx, p, projectID)
	if err != nil || trusted {
		return "", rec, err
	}
	if rec.Enrolled {
		return "verify", rec, nil
	}
	required := rec.Required
	if !required {
		if required, err = s.everyMembershipRequiresMFA(ctx, "User/"+userID, projectID); err != nil {
			return "", rec, err
		}
	}
	if !required {
		return "", rec, nil
	}
	return "enroll", rec, nil
}

// enrolElsewhere refuses a sign-in that must enrol a factor but came
// through a provider that may not add one to the account.
func enrolElsewhere() error {
	return fhir.BadRequest("This project requires a second factor: set one up by signing in with your password")
}

// everyMembershipRequiresMFA reports whether the user has active
// memberships (in projectID only, when given) and every one of them
// requires a second factor.
func (s *Service) everyMembershipRequiresMFA(ctx context.Context, userRef, projectID string) (bool, error) {
	choices, err := s.accounts.Memberships(ctx, userRef, projectID)
	if err != nil || len(choices) == 0 {
		return false, err
	}
	for _, c := range choices {
		req, err := s.membershipRequiresMFA(ctx, c.ID)
		if err != nil || !req {
			return false, err
		}
	}
	return true, nil
}

// owedEnrolment turns a login whose chosen membership requires a factor
// (errFactorOwed) into the enrolment step: l owes "enroll", and the answer
// is /auth/login's for that step; once enrolled, the person chooses again.
func (s *Service) owedEnrolment(ctx context.Context, loginID string, l *session.Login) (*bus.Response, error) {
	uid := account.UserIDOf(l.User)
	if err := s.accounts.ProviderMayChange(ctx, l.ProviderProject, uid); err != nil {
		return nil, enrolElsewhere()
	}
	rec, err := s.ensureSecret(ctx, uid)
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	l.MFA, l.MFAVerified = "enroll", false
	return s.mfaLoginAnswer(ctx, loginID, "enroll", uid, rec)
}

// mfaLoginAnswer is /auth/login's answer for a sign-in that owes a factor.
func (s *Service) mfaLoginAnswer(ctx context.Context, loginID, step, userID string, rec mfaRecord) (*bus.Response, error) {
	if step == "verify" {
		return bus.JSON(200, map[string]any{"login": loginID, "mfaRequired": true}), nil
	}
	uri, qr, err := s.enrollAnswer(ctx, userID, rec.Secret)
	if err != nil {
		return nil, err
	}
	return noStore(bus.JSON(200, map[string]any{"login": loginID, "mfaEnrollRequired": true, "enrollUri": uri, "enrollQrCode": qr})), nil
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

// mfaVerify is POST /auth/mfa/verify {login, token}: a code (or a
// recovery code) completes a password sign-in with the usual result.
func (s *Service) mfaVerify(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.completeMFA(ctx, r, false)
}

// mfaLoginEnroll is POST /auth/mfa/login-enroll {login, token}: enrolment
// the sign-in required, completing it; the recovery codes come beside
// the usual result ("recoveryCodes").
func (s *Service) mfaLoginEnroll(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.completeMFA(ctx, r, true)
}

func (s *Service) completeMFA(ctx context.Context, r *bus.Request, enroll bool) (*bus.Response, error) {
	in, err := readMFABody(r, true)
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
	err = s.limitedCode(ctx, r, uid, func() error {
		if enroll {
			var err error
			codes, err = s.enrollWith(ctx, uid, in.Token)
			return err
		}
		rec, _, err := s.loadMFA(ctx, uid)
		if err != nil {
			return err
		}
		if rec.Secret == "" || !rec.Enrolled {
			return fhir.BadRequest("User not enrolled in MFA")
		}
		ok, err := s.spendToken(ctx, uid, in.Token, true)
		if err == nil && !ok {
			return errBadCode
		}
		return err
	})
	if errors.Is(err, errBadCode) {
		return nil, fhir.BadRequest(map[bool]string{true: "Invalid token", false: "Invalid MFA token"}[enroll])
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
		resp, err = s.loginResult(ctx, r, in.Login, l)
		return err
	})
	if err != nil {
		return nil, err
	}
	if codes != nil {
		var body map[string]any
		if json.Unmarshal(resp.Body, &body) == nil {
			body["recoveryCodes"] = codes
			resp = noStore(bus.JSON(resp.Status, body))
		}
	}
	return resp, nil
}
