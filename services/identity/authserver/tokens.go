package authserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
)

// codeLifetime is how long an authorization code can be redeemed: a client
// redeems it at once, and one found later in a log or a browser history
// must be worthless (RFC 6749 §4.1.2 advises at most ten minutes).
const codeLifetime = time.Minute

// newCode makes an authorization code issued at now: the login id and a
// secret whose digest the login keeps, so the code finds its login without
// a search.
func NewCode(loginID string, l *session.Login, now time.Time) string {
	secret := auth.NewSecret()
	l.CodeDigest = auth.SecretDigest(secret)
	l.CodeAt = now.UnixMilli()
	return loginID + "." + secret
}

// wantsRefresh reports whether the sign-in asked for a refresh token.
func wantsRefresh(scope string) bool {
	return HasScope(scope, "offline_access") || HasScope(scope, "offline")
}

// rotateRefresh gives the login a new refresh secret (when it asked for
// refresh tokens) and returns it; the old one stops working.
func RotateRefresh(l *session.Login) string {
	if !wantsRefresh(l.Scope) {
		return ""
	}
	secret := auth.NewSecret()
	l.RefreshDigest = auth.SecretDigest(secret)
	return secret
}

var errStop = errors.New("stop")

func verifierMatches(challenge, method, verifier string) bool {
	want := verifier
	if method == "S256" {
		d := sha256.Sum256([]byte(verifier))
		want = base64.RawURLEncoding.EncodeToString(d[:])
	}
	return subtle.ConstantTimeCompare([]byte(challenge), []byte(want)) == 1
}

// UserTokens issues access and id tokens, and a refresh token carrying
// refresh (the login's current refresh secret) when there is one, for
// request r of the grant named, and records them in the audit trail.
func (s *Service) UserTokens(ctx context.Context, r *bus.Request, grant, loginID string, l *session.Login, refresh string) (*bus.Response, error) {
	m, err := s.sessions.GetMembership(ctx, l.Membership)
	if errors.Is(err, session.ErrNotFound) || err == nil && !m.Active {
		return nil, InvalidGrant("Profile not active")
	}
	if err != nil {
		return nil, err
	}
	_, uid, _ := fhir.SplitReference(l.User)
	ac := &auth.Claims{LoginID: loginID, Username: uid, Profile: m.Profile, Scope: l.Scope, ClientID: l.Client}
	ac.Subject = uid
	ac.Audience = jwt.ClaimStrings{s.cfg.BaseURL}
	granted := grantedScope(l)
	accessToken, err := s.signer.Sign(ac, s.cfg.TokenLifetime)
	if err != nil {
		return nil, err
	}
	idc := &auth.Claims{LoginID: loginID, FHIRUser: m.Profile, Nonce: l.Nonce, ClientID: l.Client, AuthTime: l.AuthTime}
	idc.Subject = uid
	idc.Audience = jwt.ClaimStrings{firstNonEmpty(l.Client, s.cfg.BaseURL)}
	idTok, err := s.signIDToken(idc)
	if err != nil {
		return nil, err
	}
	project, profile := s.clients.MemberRefs(ctx, l.Membership, m.Project, m.Profile)
	body := map[string]any{
		"token_type": "Bearer", "expires_in": int(s.cfg.TokenLifetime.Seconds()),
		// The scopes really honoured (RFC 6749 §3.3), not all that were asked.
		"scope":        granted,
		"access_token": accessToken, "id_token": idTok,
		"project": project,
		"profile": profile,
	}
	s.launchContext(body, l, m)
	// Super admins never get refresh tokens (Medplum's rule).
	if refresh != "" && !m.SuperAdmin {
		rc := &auth.Claims{LoginID: loginID, RefreshSecret: refresh, ClientID: l.Client}
		rc.Audience = jwt.ClaimStrings{s.cfg.BaseURL}
		if body["refresh_token"], err = s.signer.Sign(rc, session.RefreshLifetime); err != nil {
			return nil, err
		}
	}
	if err := s.recordIssued(ctx, r, grant, l.User, l.Client, m.Project, granted); err != nil {
		return nil, err
	}
	resp := bus.JSON(200, body)
	resp.Header["Cache-Control"] = "no-store"
	resp.Header["Pragma"] = "no-cache"
	return resp, nil
}

// grantedScope is what the login's scope is honoured as: the resource and
// OpenID scopes Pinion serves, and the launch scope its context answers.
func grantedScope(l *session.Login) string {
	granted := access.GrantedScope(l.Scope)
	if l.Launch != nil && HasScope(l.Scope, l.Launch.Scope) {
		granted = strings.TrimSpace(granted + " " + l.Launch.Scope)
	}
	return granted
}

// launchContext adds SMART's launch context to a token answer, as Medplum
// sends it: the patient in context (the launch's, or a Patient's own),
// the encounter and fhirContext of an EHR launch, whether the app should
// show a patient banner, and where its styles are.
func (s *Service) launchContext(body map[string]any, l *session.Login, m *session.Membership) {
	patient := l.Patient()
	if t, id, _ := fhir.SplitReference(m.Profile); t == "Patient" {
		patient = id
	}
	if patient != "" {
		body["patient"] = patient
	}
	if lc := l.Launch; lc != nil {
		if lc.Encounter != "" {
			body["encounter"] = lc.Encounter
		}
		if len(lc.FHIRContext) > 0 {
			refs := make([]map[string]string, len(lc.FHIRContext))
			for i, r := range lc.FHIRContext {
				refs[i] = map[string]string{"reference": r}
			}
			body["fhirContext"] = refs
		}
	}
	body["need_patient_banner"] = patient != ""
	body["smart_style_url"] = s.cfg.BaseURL + "fhir/R4/.well-known/smart-styles.json"
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// verifier checks tokens this service signed (refresh tokens).
func (s *Service) Verifier() *auth.Verifier {
	pub := &s.signer.Key.Private.PublicKey
	return &auth.Verifier{Issuer: s.cfg.BaseURL, Audience: s.cfg.BaseURL, Keys: func(kid string) *ecdsa.PublicKey {
		if kid == s.signer.Key.ID {
			return pub
		}
		return nil
	}}
}

// hasScope reports whether a space-separated scope names want.
func HasScope(scope, want string) bool {
	return strings.Contains(" "+scope+" ", " "+want+" ")
}
