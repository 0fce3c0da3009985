package factors

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
	"image/png"
	"strings"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/store"
)

const (
	mfaIssuer = "Pinion"
	// Period and mfaSkew: 30-second steps, one step either side
	// accepted (Medplum's default mfaAuthenticatorWindow of 1).
	Period  = 30
	mfaSkew = 1
	// RecoveryCount codes are issued at enrolment.
	RecoveryCount = 10
	// maxTokenLen bounds a posted code: a recovery code is 14 characters.
	maxTokenLen = 64
	// RequiredSetting is the Project.setting that requires MFA of every
	// member (valueBoolean true).
	RequiredSetting = "mfaRequired"
)

// Record is a user's authenticator factor, kept in the credentials.
type Record struct {
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

func RecordKey(userID string) string { return "mfa:" + userID }

// Load reads a user's record and its stored bytes (the condition of a
// swap; nil when there is none).
func (s *Service) Load(ctx context.Context, userID string) (rec Record, raw []byte, err error) {
	raw, _, err = s.secrets.Load(ctx, RecordKey(userID), &rec)
	return rec, raw, err
}

// Update applies change to a user's record and stores it if nobody
// changed it meanwhile, retrying a few times when someone did.
func (s *Service) Update(ctx context.Context, userID string, change func(*Record) error) (Record, error) {
	for range 5 {
		rec, raw, err := s.Load(ctx, userID)
		if err != nil {
			return rec, err
		}
		if err := change(&rec); err != nil {
			return rec, err
		}
		err = s.secrets.Swap(ctx, RecordKey(userID), raw, rec)
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrExists) {
			continue
		}
		return rec, err
	}
	return Record{}, fhir.Busy("The factor changed meanwhile; try again")
}

// newTOTPSecret is a fresh 160-bit secret (RFC 4226's recommendation).
func newTOTPSecret() string {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b)
}

// Clock is the time codes are checked at; tests pin it so that their
// codes never straddle a step.
var Clock = time.Now

var totpOpts = totp.ValidateOpts{Period: Period, Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1}

// acceptCode finds the step of code within ±mfaSkew of now, newer than
// the record's last: ok false when there is none (wrong, expired or
// already used).
func acceptCode(rec *Record, code string, now time.Time) (step int64, ok bool) {
	if rec.Secret == "" || len(code) != 6 {
		return 0, false
	}
	cur := now.Unix() / Period
	for d := int64(-mfaSkew); d <= mfaSkew; d++ {
		st := cur + d
		want, err := totp.GenerateCodeCustom(rec.Secret, time.Unix(st*Period, 0), totpOpts)
		if err != nil {
			return 0, false
		}
		if subtle.ConstantTimeCompare([]byte(want), []byte(code)) == 1 && st > rec.LastStep {
			return st, true
		}
	}
	return 0, false
}

// SpendToken accepts a code (or, when recovery is set, an unused recovery
// code) for userID once, and records its use; ok false when it is not
// accepted. The swap makes two requests with the same code race: one wins.
func (s *Service) SpendToken(ctx context.Context, userID, token string, recovery bool) (ok bool, err error) {
	if len(token) > maxTokenLen {
		return false, nil
	}
	token = strings.TrimSpace(token)
	_, err = s.Update(ctx, userID, func(rec *Record) error {
		ok = false
		if step, good := acceptCode(rec, token, Clock()); good {
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

// newRecoveryCodes makes RecoveryCount codes ("abcd-efghjkmnpq", lower-case
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
	for range RecoveryCount {
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

// EnrollAnswer is the otpauth URI and its QR code (a PNG data URL) for
// secret: what the person's authenticator app scans.
func (s *Service) EnrollAnswer(ctx context.Context, userID, secret string) (uri, qr string, err error) {
	email, err := s.accounts.UserEmail(ctx, userID)
	if err != nil {
		return "", "", err
	}
	raw, err := base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(secret)
	if err != nil {
		return "", "", err
	}
	key, err := totp.Generate(totp.GenerateOpts{
		Issuer: mfaIssuer, AccountName: email, Period: Period, Secret: raw,
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

// EnsureSecret gives a user a secret when they have none, and returns it.
func (s *Service) EnsureSecret(ctx context.Context, userID string) (Record, error) {
	return s.Update(ctx, userID, func(rec *Record) error {
		if rec.Secret != "" {
			return ErrUnchanged
		}
		rec.Secret = newTOTPSecret()
		return nil
	})
}

// ErrUnchanged stops an update that has nothing to write.
var ErrUnchanged = errors.New("unchanged")

// errStop stops an update whose change was refused: nothing is written.
var errStop = errors.New("stop")

// Body is the MFA routes' body: {token}, and login when signing in.
type Body struct {
	Login string `json:"login"`
	Token string `json:"token"`
}

// BodyLimit bounds the body: a login id and a code fit many times over.
const BodyLimit = 1024

// ReadBody reads the body, refusing missing fields with Medplum's texts.
func ReadBody(r *bus.Request, withLogin bool) (Body, error) {
	var in Body
	if len(r.Body) > BodyLimit {
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

// Status is GET /auth/mfa/status.
func (s *Service) Status(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	uid, err := s.accounts.OwnerOf(ctx, r)
	if err != nil {
		return nil, err
	}
	rec, err := s.EnsureSecret(ctx, uid)
	if err != nil && !errors.Is(err, ErrUnchanged) {
		return nil, err
	}
	if rec.Enrolled {
		return bus.JSON(200, map[string]any{"enrolled": true}), nil
	}
	uri, qr, err := s.EnrollAnswer(ctx, uid, rec.Secret)
	if err != nil {
		return nil, err
	}
	return NoStore(bus.JSON(200, map[string]any{"enrolled": false, "enrollUri": uri, "enrollQrCode": qr})), nil
}

func NoStore(resp *bus.Response) *bus.Response {
	resp.Header["Cache-Control"] = "no-store"
	return resp
}

// EnrollWith checks a first code against a user's secret and enrols them,
// issuing recovery codes; the texts are Medplum's.
func (s *Service) EnrollWith(ctx context.Context, uid, token string) ([]string, error) {
	codes, recs, err := newRecoveryCodes(ctx)
	if err != nil {
		return nil, err
	}
	var refused error
	_, err = s.Update(ctx, uid, func(rec *Record) error {
		refused = nil
		switch {
		case rec.Enrolled:
			refused = fhir.BadRequest("Already enrolled")
		case rec.Secret == "":
			refused = fhir.BadRequest("Secret not found")
		default:
			step, ok := acceptCode(rec, token, Clock())
			if !ok {
				refused = ErrBadCode
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

var ErrBadCode = errors.New("bad code")

// LimitedCode runs check, a code check for userID, under the sign-in
// limiter: a wrong code counts as a wrong password does.
func (s *Service) LimitedCode(ctx context.Context, r *bus.Request, uid string, check func() error) error {
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
	case errors.Is(err, ErrBadCode):
		s.limiter.Failed(r.Remote, email)
	default:
		s.limiter.Released(r.Remote, email)
	}
	return err
}

// Enroll is POST /auth/mfa/enroll {token}. The answer is Medplum's
// "All OK" outcome with the recovery codes beside it ("recoveryCodes"),
// shown this once.
func (s *Service) Enroll(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	uid, err := s.accounts.OwnerOf(ctx, r)
	if err != nil {
		return nil, err
	}
	in, err := ReadBody(r, false)
	if err != nil {
		return nil, err
	}
	var codes []string
	err = s.LimitedCode(ctx, r, uid, func() (err error) {
		codes, err = s.EnrollWith(ctx, uid, in.Token)
		return err
	})
	if errors.Is(err, ErrBadCode) {
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
	resp := NoStore(bus.JSON(200, body))
	resp.Header["Content-Type"] = bus.FHIRContentType
	return resp, nil
}

// Disable is POST /auth/mfa/disable {token}: the factor goes and a new
// secret replaces it (a lost device's secret never works again). Someone
// whose project requires MFA cannot remove their last factor.
func (s *Service) Disable(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	uid, err := s.accounts.OwnerOf(ctx, r)
	if err != nil {
		return nil, err
	}
	in, err := ReadBody(r, false)
	if err != nil {
		return nil, err
	}
	rec, _, err := s.Load(ctx, uid)
	if err != nil {
		return nil, err
	}
	switch {
	case rec.Secret == "":
		return nil, fhir.BadRequest("Secret not found")
	case !rec.Enrolled:
		return nil, fhir.BadRequest("User not enrolled in MFA")
	}
	required, err := s.requiredFor(ctx, "User/"+uid, "", rec)
	if err != nil {
		return nil, err
	}
	if required {
		// A passkey is a second factor too: the authenticator may go
		// while one remains.
		n, err := s.PasskeyCount(ctx, uid)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fhir.BadRequest("MFA is required for this user and cannot be disabled")
		}
	}
	err = s.LimitedCode(ctx, r, uid, func() error {
		ok, err := s.SpendToken(ctx, uid, in.Token, false)
		if err == nil && !ok {
			return ErrBadCode
		}
		return err
	})
	if errors.Is(err, ErrBadCode) {
		return nil, fhir.BadRequest("Invalid token")
	}
	if err != nil {
		return nil, err
	}
	if _, err := s.Update(ctx, uid, func(rec *Record) error {
		rec.Enrolled, rec.Secret, rec.LastStep, rec.Recovery = false, newTOTPSecret(), 0, nil
		return nil
	}); err != nil {
		return nil, err
	}
	s.log.Info("mfa disabled", "user", uid)
	return bus.OK(), nil
}
