package factors

// Passkeys (WebAuthn), beyond Medplum: a signed-in person registers
// passkeys, names and removes them; a passkey signs them in on
// /oauth2/authorize with no password (it is two factors: the device, and
// the fingerprint or PIN that unlocks it, user verification being
// required), or serves as the second factor after a password.
//
// The protocol is go-webauthn's. A person's passkeys live in the
// credentials ("passkeys:<user id>"), beside the password hash and the
// authenticator secret, never in the User resource. A ceremony's
// challenge is kept in the browser-sessions bucket under one key per
// person (registration) or per browser (sign-in), so there is at most one
// pending each; it expires and is taken once, by a delete conditional on
// the revision read.

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/kvcas"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/web"
)

const (
	// maxPasskeys bounds a person's passkeys (and so their record).
	maxPasskeys = 10
	// maxPasskeyName bounds a passkey's name, in characters.
	maxPasskeyName = 64
	// passkeyBodyLimit bounds a ceremony's answer: an attestation with a
	// certificate chain fits in a few kilobytes.
	passkeyBodyLimit = 32 << 10
	// ceremonyLifetime is how long a challenge may be answered.
	ceremonyLifetime = 5 * time.Minute
)

// Texts of the passkey refusals.
const (
	NoCeremonyText      = "No passkey challenge is pending, or it was used or has expired; start again"
	UnknownPasskeyText  = "Unknown passkey"
	PasskeyRefusedText  = "The passkey was not accepted"
	LastFactorText      = "MFA is required for this user: the last second factor cannot be removed"
	TooManyPasskeysText = "At most 10 passkeys"
)

// PasskeyRecord is a person's passkeys, kept in the credentials.
type PasskeyRecord struct {
	Keys []Passkey `json:"keys,omitempty"`
}

// Passkey is one registered credential and what its owner sees of it.
type Passkey struct {
	ID         string              `json:"id"` // the credential id, base64url
	Name       string              `json:"name"`
	Created    int64               `json:"created"` // Unix seconds
	LastUsed   int64               `json:"lastUsed,omitempty"`
	Credential webauthn.Credential `json:"credential"`
}

func passkeysKey(userID string) string { return "passkeys:" + userID }

func (s *Service) loadPasskeys(ctx context.Context, userID string) (rec PasskeyRecord, raw []byte, err error) {
	raw, _, err = s.secrets.Load(ctx, passkeysKey(userID), &rec)
	return rec, raw, err
}

// UpdatePasskeys applies change and stores the record if nobody changed
// it meanwhile, retrying a few times when someone did.
func (s *Service) UpdatePasskeys(ctx context.Context, userID string, change func(*PasskeyRecord) error) (PasskeyRecord, error) {
	for range 5 {
		rec, raw, err := s.loadPasskeys(ctx, userID)
		if err != nil {
			return rec, err
		}
		if err := change(&rec); err != nil {
			return rec, err
		}
		err = s.secrets.Swap(ctx, passkeysKey(userID), raw, rec)
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrExists) {
			continue
		}
		return rec, err
	}
	return PasskeyRecord{}, fhir.Busy("The passkeys changed meanwhile; try again")
}

// passkeyUser is a person as go-webauthn sees them. The user handle is
// the user id: it names no one outside Pinion, and finds the record of a
// passkey offered with no e-mail typed.
type passkeyUser struct {
	id, email string
	rec       PasskeyRecord
}

func (u passkeyUser) WebAuthnID() []byte          { return []byte(u.id) }
func (u passkeyUser) WebAuthnName() string        { return u.email }
func (u passkeyUser) WebAuthnDisplayName() string { return u.email }
func (u passkeyUser) WebAuthnCredentials() []webauthn.Credential {
	out := make([]webauthn.Credential, len(u.rec.Keys))
	for i, k := range u.rec.Keys {
		out[i] = k.Credential
	}
	return out
}

// holds reports whether rawID is one of the person's passkeys.
func (u passkeyUser) holds(rawID []byte) bool {
	id := base64.RawURLEncoding.EncodeToString(rawID)
	return slices.ContainsFunc(u.rec.Keys, func(k Passkey) bool { return k.ID == id })
}

// relyingParty is go-webauthn's relying party for PINION_BASE_URL: its
// host is the RP id, its origin the only one a browser may answer from.
type relyingParty struct {
	once sync.Once
	wa   *webauthn.WebAuthn
	err  error
}

// webAuthn is the relying party, or, when PINION_BASE_URL cannot be one,
// a 400 that says so: the routes refuse with it, and Start logs it.
func (s *Service) webAuthn() (*webauthn.WebAuthn, error) {
	s.rp.once.Do(func() {
		u, err := url.Parse(s.cfg.BaseURL)
		if err != nil || u.Hostname() == "" {
			s.rp.err = passkeysOff("PINION_BASE_URL names no host")
			return
		}
		if _, err := netip.ParseAddr(u.Hostname()); err == nil {
			// Browsers take only a domain name as a relying party's id.
			s.rp.err = passkeysOff("PINION_BASE_URL names the server by the IP address " + u.Hostname() +
				"; passkeys need a domain name (such as localhost)")
			return
		}
		timeout := webauthn.TimeoutConfig{Enforce: true, Timeout: ceremonyLifetime, TimeoutUVD: ceremonyLifetime}
		s.rp.wa, err = webauthn.New(&webauthn.Config{
			RPID: u.Hostname(), RPDisplayName: mfaIssuer, RPOrigins: []string{u.Scheme + "://" + u.Host},
			Timeouts: webauthn.TimeoutsConfig{Login: timeout, Registration: timeout},
		})
		if err != nil {
			s.rp.err = passkeysOff("PINION_BASE_URL cannot be a passkey relying party: " + err.Error())
		}
	})
	return s.rp.wa, s.rp.err
}

// passkeysOff is the 400 of every passkey route on a server whose base
// URL passkeys cannot work with: a setting to change, not a server fault.
func passkeysOff(why string) error {
	return fhir.BadRequest("Passkeys are unavailable on this server: " + why)
}

// ceremony is a pending challenge: what go-webauthn must see again, and
// for whom (a registration's owner; a second factor's user; "" for a
// sign-in with no e-mail typed).
type ceremony struct {
	Kind    string               `json:"kind"` // "register" or "login"
	User    string               `json:"user,omitempty"`
	Session webauthn.SessionData `json:"session"`
}

func registerCeremonyKey(userID string) string { return "passkey-register-" + userID }
func loginCeremonyKey(b web.Browser) string    { return "passkey-login-" + b.Key() }

// putCeremony keeps a challenge, replacing any pending under key.
func (s *Service) putCeremony(ctx context.Context, key string, c ceremony) error {
	v, _ := json.Marshal(c)
	_, err := s.browsers.Put(ctx, key, v)
	return err
}

// takeCeremony takes the challenge pending under key, once: of two
// answers to it, only the one whose delete finds it unchanged proceeds.
func (s *Service) takeCeremony(ctx context.Context, key, kind string) (*ceremony, error) {
	c, rev, err := kvcas.Entry[ceremony](ctx, s.browsers, key)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, fhir.BadRequest(NoCeremonyText)
	}
	if ok, err := kvcas.Spend(ctx, s.browsers, key, rev); err != nil || !ok {
		return nil, cmp.Or(err, error(fhir.BadRequest(NoCeremonyText)))
	}
	if c.Kind != kind || time.Now().After(c.Session.Expires) {
		return nil, fhir.BadRequest(NoCeremonyText)
	}
	return c, nil
}

// passkeyUserOf is the person as go-webauthn sees them.
func (s *Service) passkeyUserOf(ctx context.Context, userID string) (passkeyUser, error) {
	email, err := s.accounts.UserEmail(ctx, userID)
	if err != nil {
		return passkeyUser{}, err
	}
	rec, _, err := s.loadPasskeys(ctx, userID)
	return passkeyUser{id: userID, email: email, rec: rec}, err
}

// BeginRegistration makes a registration challenge for userID: a
// discoverable credential (so it signs in with no e-mail typed), user
// verification required, none of their passkeys again.
func (s *Service) BeginRegistration(ctx context.Context, userID string) (*protocol.CredentialCreation, error) {
	wa, err := s.webAuthn()
	if err != nil {
		return nil, err
	}
	u, err := s.passkeyUserOf(ctx, userID)
	if err != nil {
		return nil, err
	}
	if len(u.rec.Keys) >= maxPasskeys {
		return nil, fhir.BadRequest(TooManyPasskeysText)
	}
	var exclude []protocol.CredentialDescriptor
	for _, c := range u.WebAuthnCredentials() {
		exclude = append(exclude, c.Descriptor())
	}
	creation, session, err := wa.BeginRegistration(u,
		webauthn.WithAuthenticatorSelection(protocol.AuthenticatorSelection{
			ResidentKey: protocol.ResidentKeyRequirementRequired, UserVerification: protocol.VerificationRequired,
		}),
		webauthn.WithResidentKeyRequirement(protocol.ResidentKeyRequirementRequired),
		webauthn.WithExclusions(exclude))
	if err != nil {
		return nil, err
	}
	if err := s.putCeremony(ctx, registerCeremonyKey(userID), ceremony{Kind: "register", User: userID, Session: *session}); err != nil {
		return nil, err
	}
	return creation, nil
}

// PasskeyName checks a passkey's name: trimmed, not empty, bounded.
func PasskeyName(name string) (string, error) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return "", fhir.Invalid(fhir.FieldIssue("name", "Missing name"))
	case !utf8.ValidString(name) || utf8.RuneCountInString(name) > maxPasskeyName:
		return "", fhir.Invalid(fhir.FieldIssue("name", "A passkey's name is at most 64 characters"))
	}
	return name, nil
}

// protocolRefusal is a 400 for what go-webauthn refused, saying why.
func protocolRefusal(err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return fhir.BadRequest(PasskeyRefusedText + ": " + pe.Details)
	}
	return fhir.BadRequest(PasskeyRefusedText)
}

// FinishRegistration checks the browser's answer to userID's pending
// challenge and keeps the new passkey under name.
func (s *Service) FinishRegistration(ctx context.Context, userID, name string, answer []byte) (Passkey, error) {
	name, err := PasskeyName(name)
	if err != nil {
		return Passkey{}, err
	}
	if len(answer) > passkeyBodyLimit {
		return Passkey{}, fhir.TooLarge("A passkey's answer is at most 32 KiB")
	}
	wa, err := s.webAuthn()
	if err != nil {
		return Passkey{}, err
	}
	c, err := s.takeCeremony(ctx, registerCeremonyKey(userID), "register")
	if err != nil {
		return Passkey{}, err
	}
	if c.User != userID {
		return Passkey{}, fhir.BadRequest(NoCeremonyText)
	}
	parsed, err := protocol.ParseCredentialCreationResponseBytes(answer)
	if err != nil {
		return Passkey{}, protocolRefusal(err)
	}
	u, err := s.passkeyUserOf(ctx, userID)
	if err != nil {
		return Passkey{}, err
	}
	cred, err := wa.CreateCredential(u, c.Session, parsed)
	if err != nil {
		return Passkey{}, protocolRefusal(err)
	}
	pk := Passkey{ID: base64.RawURLEncoding.EncodeToString(cred.ID), Name: name, Created: time.Now().Unix(), Credential: *cred}
	_, err = s.UpdatePasskeys(ctx, userID, func(rec *PasskeyRecord) error {
		if len(rec.Keys) >= maxPasskeys {
			return fhir.BadRequest(TooManyPasskeysText)
		}
		if slices.ContainsFunc(rec.Keys, func(k Passkey) bool { return k.ID == pk.ID }) {
			return fhir.BadRequest("This passkey is registered already")
		}
		rec.Keys = append(rec.Keys, pk)
		return nil
	})
	if err != nil {
		return Passkey{}, err
	}
	s.log.Info("passkey registered", "user", userID, "passkey", pk.ID)
	return pk, nil
}

// BeginPasskeyLogin makes a sign-in challenge for browser b: for userID's
// passkeys (a second factor), or for any (userID "", no e-mail typed).
// Either way the passkey must verify its user.
func (s *Service) BeginPasskeyLogin(ctx context.Context, b web.Browser, userID string) (*protocol.CredentialAssertion, error) {
	wa, err := s.webAuthn()
	if err != nil {
		return nil, err
	}
	var (
		assertion *protocol.CredentialAssertion
		session   *webauthn.SessionData
	)
	uv := webauthn.WithUserVerification(protocol.VerificationRequired)
	if userID == "" {
		assertion, session, err = wa.BeginDiscoverableLogin(uv)
	} else {
		var u passkeyUser
		if u, err = s.passkeyUserOf(ctx, userID); err != nil {
			return nil, err
		}
		if len(u.rec.Keys) == 0 {
			return nil, fhir.BadRequest(UnknownPasskeyText)
		}
		assertion, session, err = wa.BeginLogin(u, uv)
	}
	if err != nil {
		return nil, err
	}
	if err := s.putCeremony(ctx, loginCeremonyKey(b), ceremony{Kind: "login", User: userID, Session: *session}); err != nil {
		return nil, err
	}
	return assertion, nil
}

// FinishPasskeyLogin checks browser b's answer to its pending sign-in
// challenge and returns whose passkey signed: the ceremony's user when it
// was for one. A credential no one registered (or since removed) is
// "Unknown passkey".
func (s *Service) FinishPasskeyLogin(ctx context.Context, b web.Browser, answer []byte) (userID string, err error) {
	if len(answer) > passkeyBodyLimit {
		return "", fhir.TooLarge("A passkey's answer is at most 32 KiB")
	}
	wa, err := s.webAuthn()
	if err != nil {
		return "", err
	}
	c, err := s.takeCeremony(ctx, loginCeremonyKey(b), "login")
	if err != nil {
		return "", err
	}
	parsed, err := protocol.ParseCredentialRequestResponseBytes(answer)
	if err != nil {
		return "", protocolRefusal(err)
	}
	var cred *webauthn.Credential
	if c.User != "" {
		var u passkeyUser
		if u, err = s.passkeyUserOf(ctx, c.User); err != nil {
			return "", err
		}
		if !u.holds(parsed.RawID) {
			return "", fhir.BadRequest(UnknownPasskeyText)
		}
		userID = c.User
		cred, err = wa.ValidateLogin(u, c.Session, parsed)
	} else {
		var lookupErr error
		_, cred, err = wa.ValidatePasskeyLogin(func(rawID, handle []byte) (webauthn.User, error) {
			id := string(handle)
			if uuid.Validate(id) != nil {
				lookupErr = fhir.BadRequest(UnknownPasskeyText)
				return nil, lookupErr
			}
			u, err := s.passkeyUserOf(ctx, id)
			if fhir.Missing(err) || errors.Is(err, store.ErrNotFound) {
				lookupErr = fhir.BadRequest(UnknownPasskeyText)
				return nil, lookupErr
			}
			if err != nil {
				lookupErr = err
				return nil, err
			}
			if !u.holds(rawID) {
				lookupErr = fhir.BadRequest(UnknownPasskeyText)
				return nil, lookupErr
			}
			userID = id
			return u, nil
		}, c.Session, parsed)
		if lookupErr != nil {
			return "", lookupErr
		}
	}
	if uc := (*protocol.ErrorUnknownCredential)(nil); errors.As(err, &uc) {
		return "", fhir.BadRequest(UnknownPasskeyText)
	}
	if err != nil {
		return "", protocolRefusal(err)
	}
	if cred.Authenticator.CloneWarning {
		s.log.Warn("passkey refused: its signature counter went back (a cloned authenticator?)", "user", userID)
		return "", fhir.BadRequest(PasskeyRefusedText)
	}
	id := base64.RawURLEncoding.EncodeToString(cred.ID)
	if _, err := s.UpdatePasskeys(ctx, userID, func(rec *PasskeyRecord) error {
		i := slices.IndexFunc(rec.Keys, func(k Passkey) bool { return k.ID == id })
		if i < 0 {
			return fhir.BadRequest(UnknownPasskeyText) // removed meanwhile
		}
		rec.Keys[i].Credential.Authenticator, rec.Keys[i].Credential.Flags = cred.Authenticator, cred.Flags
		rec.Keys[i].LastUsed = time.Now().Unix()
		return nil
	}); err != nil {
		return "", err
	}
	s.log.Info("passkey sign-in", "user", userID, "passkey", id)
	return userID, nil
}

// View is what the owner sees of a passkey.
type View struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Created  string `json:"created"`
	LastUsed string `json:"lastUsed,omitempty"`
}

func ViewOf(k Passkey) View {
	v := View{ID: k.ID, Name: k.Name, Created: time.Unix(k.Created, 0).UTC().Format(time.RFC3339)}
	if k.LastUsed != 0 {
		v.LastUsed = time.Unix(k.LastUsed, 0).UTC().Format(time.RFC3339)
	}
	return v
}

// RenamePasskey names one of userID's passkeys.
func (s *Service) RenamePasskey(ctx context.Context, userID, id, name string) error {
	name, err := PasskeyName(name)
	if err != nil {
		return err
	}
	_, err = s.UpdatePasskeys(ctx, userID, func(rec *PasskeyRecord) error {
		i := slices.IndexFunc(rec.Keys, func(k Passkey) bool { return k.ID == id })
		if i < 0 {
			return fhir.NotFound()
		}
		rec.Keys[i].Name = name
		return nil
	})
	return err
}

// RemovePasskey removes one of userID's passkeys, unless it is their last
// second factor (no authenticator enrolled) and MFA is required of them.
func (s *Service) RemovePasskey(ctx context.Context, userID, id string) error {
	mfa, _, err := s.Load(ctx, userID)
	if err != nil {
		return err
	}
	required, err := s.requiredFor(ctx, "User/"+userID, "", mfa)
	if err != nil {
		return err
	}
	_, err = s.UpdatePasskeys(ctx, userID, func(rec *PasskeyRecord) error {
		i := slices.IndexFunc(rec.Keys, func(k Passkey) bool { return k.ID == id })
		if i < 0 {
			return fhir.NotFound()
		}
		if required && !mfa.Enrolled && len(rec.Keys) == 1 {
			return fhir.BadRequest(LastFactorText)
		}
		rec.Keys = slices.Delete(rec.Keys, i, i+1)
		return nil
	})
	if err == nil {
		s.log.Info("passkey removed", "user", userID, "passkey", id)
	}
	return err
}

// PasskeyViews are userID's passkeys as their owner sees them.
func (s *Service) PasskeyViews(ctx context.Context, userID string) ([]View, error) {
	rec, _, err := s.loadPasskeys(ctx, userID)
	if err != nil {
		return nil, err
	}
	out := make([]View, 0, len(rec.Keys))
	for _, k := range rec.Keys {
		out = append(out, ViewOf(k))
	}
	return out, nil
}

// PasskeyCount is how many passkeys userID has.
func (s *Service) PasskeyCount(ctx context.Context, userID string) (int, error) {
	rec, _, err := s.loadPasskeys(ctx, userID)
	return len(rec.Keys), err
}

// The JSON API, for a signed-in person (a bearer token).

// Passkeys is GET /auth/passkeys: {passkeys: [{id, name, created, lastUsed}]}.
func (s *Service) Passkeys(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	uid, err := account.SignedInUser(r)
	if err != nil {
		return nil, err
	}
	out, err := s.PasskeyViews(ctx, uid)
	if err != nil {
		return nil, err
	}
	return NoStore(bus.JSON(200, map[string]any{"passkeys": out})), nil
}

// RegisterBegin is POST /auth/passkeys/register/begin: the options
// for navigator.credentials.create ({publicKey: …}).
func (s *Service) RegisterBegin(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	uid, err := s.accounts.OwnerOf(ctx, r)
	if err != nil {
		return nil, err
	}
	creation, err := s.BeginRegistration(ctx, uid)
	if err != nil {
		return nil, err
	}
	return NoStore(bus.JSON(200, creation)), nil
}

// RegisterFinish is POST /auth/passkeys/register/finish
// {name, credential}: credential is the browser's PublicKeyCredential as
// JSON (its toJSON()); the answer is the new passkey.
func (s *Service) RegisterFinish(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	uid, err := s.accounts.OwnerOf(ctx, r)
	if err != nil {
		return nil, err
	}
	if len(r.Body) > passkeyBodyLimit {
		return nil, fhir.TooLarge("A passkey's answer is at most 32 KiB")
	}
	var in struct {
		Name       string          `json:"name"`
		Credential json.RawMessage `json:"credential"`
	}
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	if len(in.Credential) == 0 {
		return nil, fhir.Invalid(fhir.FieldIssue("credential", "Missing credential"))
	}
	pk, err := s.FinishRegistration(ctx, uid, in.Name, in.Credential)
	if err != nil {
		return nil, err
	}
	return bus.JSON(201, ViewOf(pk)), nil
}

// Rename is PATCH /auth/passkeys/:id {name}.
func (s *Service) Rename(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	uid, err := s.accounts.OwnerOf(ctx, r)
	if err != nil {
		return nil, err
	}
	if len(r.Body) > BodyLimit {
		return nil, fhir.TooLarge("The body of a passkey's rename is at most 1024 bytes")
	}
	var in struct {
		Name string `json:"name"`
	}
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	if err := s.RenamePasskey(ctx, uid, r.Param("id"), in.Name); err != nil {
		return nil, err
	}
	return bus.OK(), nil
}

// Remove is DELETE /auth/passkeys/:id.
func (s *Service) Remove(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	uid, err := s.accounts.OwnerOf(ctx, r)
	if err != nil {
		return nil, err
	}
	if err := s.RemovePasskey(ctx, uid, r.Param("id")); err != nil {
		return nil, err
	}
	return bus.OK(), nil
}
