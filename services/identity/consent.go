package identity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/web"
)

// Consent: before the first code for a client that is not first-party, the
// person is asked whether it may act for them, with the scopes it asked
// for. The answer is kept per person and client, covers those scopes, and
// is withdrawn with DELETE /auth/consents/<client>; a refresh token issued
// under a consent stops working when the consent goes.

// consentsBucket keeps the consents, keyed by person and client (digests,
// so any client id makes a valid key), without expiry.
const consentsBucket = "pinion_consents"

type consent struct {
	Client string `json:"client"`
	Scope  string `json:"scope"`
	At     int64  `json:"at"` // Unix seconds, when last given
}

func digestKey(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:16])
}

// consentKey is the bucket key of a person's consent to a client; the
// person's own digest first, so their consents list by prefix.
func consentKey(user, client string) string { return digestKey(user) + "." + digestKey(client) }

// consented reports whether the person consented to the client for every
// scope in scope ("": for anything at all).
func (s *Service) consented(ctx context.Context, user, client, scope string) (bool, error) {
	c, err := s.consent(ctx, user, client)
	if c == nil || err != nil {
		return false, err
	}
	given := strings.Fields(c.Scope)
	for _, w := range strings.Fields(access.GrantedScope(scope)) {
		if !slices.Contains(given, w) {
			return false, nil
		}
	}
	return true, nil
}

func (s *Service) consent(ctx context.Context, user, client string) (*consent, error) {
	return entry[consent](ctx, s.consents, consentKey(user, client))
}

// maxConsentScopes bounds the scopes one consent keeps: the newest, when a
// client has asked for ever more over time.
const maxConsentScopes = 128

// giveConsent records the person's consent to the client for the scopes of
// scope that are honoured (access.GrantedScope: words nobody honours need
// no consent), added to what they consented to before.
func (s *Service) giveConsent(ctx context.Context, user, client, scope string) error {
	c, err := s.consent(ctx, user, client)
	if err != nil {
		return err
	}
	words := strings.Fields(access.GrantedScope(scope))
	if c != nil {
		for _, w := range strings.Fields(c.Scope) {
			if len(words) < maxConsentScopes && !slices.Contains(words, w) {
				words = append(words, w)
			}
		}
	}
	b, _ := json.Marshal(consent{Client: client, Scope: strings.Join(words, " "), At: time.Now().Unix()})
	_, err = s.consents.Put(ctx, consentKey(user, client), b)
	return err
}

// maxConsentsListed bounds an answer of listConsents.
const maxConsentsListed = 1000

// listConsents is GET /auth/consents: the clients the caller consented to
// (the first maxConsentsListed).
func (s *Service) listConsents(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	user, err := consentUser(r)
	if err != nil {
		return nil, err
	}
	lister, err := s.consents.ListKeysFiltered(ctx, digestKey(user)+".*")
	if err != nil {
		return nil, err
	}
	defer func() { _ = lister.Stop() }()
	out := []consent{}
	for key := range lister.Keys() {
		c, err := entry[consent](ctx, s.consents, key)
		if err != nil {
			return nil, err
		}
		if c != nil {
			out = append(out, *c)
		}
		if len(out) == maxConsentsListed {
			break
		}
	}
	return bus.JSON(200, map[string]any{"consents": out}), nil
}

// withdrawConsent is DELETE /auth/consents/:clientId: the client's next
// sign-in asks again, and its refresh tokens for the caller stop.
func (s *Service) withdrawConsent(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	user, err := consentUser(r)
	if err != nil {
		return nil, err
	}
	key := consentKey(user, r.Param("clientId"))
	if _, err := s.consents.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fhir.NotFound()
	} else if err != nil {
		return nil, err
	}
	if err := s.consents.Delete(ctx, key); err != nil {
		return nil, err
	}
	return bus.OK(), nil
}

// consentUser is the person behind a request about their consents: only
// people consent, not clients.
func consentUser(r *bus.Request) (string, error) {
	p := r.Principal
	if p == nil {
		return "", fhir.Unauthorized()
	}
	if !strings.HasPrefix(p.User, "User/") {
		return "", fhir.BadRequest("Only a person's sign-in has consents")
	}
	return p.User, nil
}

// askConsent is nil when the person consented to the client for the
// request's scopes before, or does now (the consent page posted "allow");
// otherwise it is the answer: the consent page, or the client told no.
// prompt=none never shows the page (OIDC Core §3.1.2.6: consent_required).
func (s *Service) askConsent(ctx context.Context, b web.Browser, a authRequest, bs *browserSession, membership string, choices []account.Choice, form url.Values) (*bus.Response, error) {
	switch form.Get("consent") {
	case "allow":
		return nil, s.giveConsent(ctx, bs.User, a.ClientID, a.Scope)
	case "deny":
		return a.fail("access_denied", "The person did not allow the application"), nil
	}
	if a.Prompt != "consent" {
		ok, err := s.consented(ctx, bs.User, a.ClientID, a.Scope)
		if err != nil || ok {
			return nil, err
		}
	}
	if a.Prompt == "none" {
		return a.fail("consent_required", "The person has not allowed this application"), nil
	}
	csrf, err := s.pages.CSRFToken(ctx, b)
	if err != nil {
		return nil, err
	}
	d := web.Data{Title: "Allow " + clientName(a.client) + "?", CSRF: csrf, App: clientName(a.client),
		Hidden: a.values(), Membership: membership, Scopes: describeScopes(access.GrantedScope(a.Scope)), Registrar: a.projectName}
	for _, c := range choices {
		if c.ID == membership {
			d.Project, d.Profile = display(c.Project), display(c.Profile)
		}
	}
	resp, err := s.pages.Render(200, "consent", b, d)
	if resp != nil {
		resp.Header["Content-Security-Policy"] = authorizeCSP(a.target)
		resp.Header["Set-Cookie"] = s.pages.SetCookie(b)
	}
	return resp, err
}

// describeScopes says in words what each scope lets the client do.
func describeScopes(scope string) []string {
	var out []string
	for _, w := range strings.Fields(scope) {
		switch w {
		case "openid":
			out = append(out, "know who you are")
		case "fhirUser":
			out = append(out, "know your profile in the project")
		case "profile":
			out = append(out, "see your name")
		case "email":
			out = append(out, "see your e-mail address")
		case "offline_access", "offline":
			out = append(out, "keep access while you are away, until you withdraw it")
		default:
			out = append(out, "use the permission "+w)
		}
	}
	return out
}
