package identity

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
)

// The sign-in page (/oauth2/authorize) routes an address whose domain has
// an identity provider to that provider, server-side: the person types
// the e-mail and submits; instead of checking a password, the page links
// to the provider (a link, since the page's form-action policy would stop
// a redirect to the provider's origin after a post). The state carries
// the authorization request, and a value bound to this browser so that a
// provider's code cannot sign someone else's browser in (login CSRF). The
// provider returns to /auth/external, which signs the browser in and
// sends it back to /oauth2/authorize, where the request finishes as after
// a password.

// providerPage answers a posted sign-in form whose address's domain has a
// provider: a page linking there. nil when the domain has none.
func (s *Service) providerPage(ctx context.Context, b browser, a authRequest, email string) (*bus.Response, error) {
	domain := email[strings.LastIndex(email, "@")+1:]
	ext, err := s.externalAuth(ctx, domain)
	if err != nil || ext == nil {
		return nil, err
	}
	binding, err := s.externalBinding(ctx, b)
	if err != nil {
		return nil, err
	}
	nonce := uuid.NewString()
	state, err := json.Marshal(externalState{Domain: domain, Nonce: nonce, Authorize: a.values().Encode(), Browser: binding})
	if err != nil {
		return nil, err
	}
	if len(state) > maxExternalState {
		return s.message(400, b, "Sign-in cannot start", "", "", "The application's sign-in request is too long to send to your organisation's sign-in.")
	}
	u, err := url.Parse(ext.AuthorizeURL)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("state", string(state))
	q.Set("nonce", nonce)
	u.RawQuery = q.Encode()
	return s.message(200, b, "Sign in with your organisation", u.String(), "Continue to your organisation's sign-in",
		"Addresses at "+domain+" sign in with their organisation's account, not a password here.")
}

// externalBinding is the value a page-started external sign-in's state
// carries for this browser: keyed like its CSRF token, but distinct from
// it, since the state travels through the provider.
func (s *Service) externalBinding(ctx context.Context, b browser) (string, error) {
	key, err := s.csrfKey(ctx)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("external-state:" + b.id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)), nil
}

// externalPageSignIn finishes a sign-in the page sent to a provider: the
// browser that started it is signed in as the person (noted as an
// external sign-in, which requireExternalSignIn accepts) and returns to
// the authorization request it came from.
func (s *Service) externalPageSignIn(ctx context.Context, r *bus.Request, st externalState, userRef string) (*bus.Response, error) {
	b := browserOf(r)
	want, err := s.externalBinding(ctx, b)
	if err != nil {
		return nil, err
	}
	if b.isNew || !hmac.Equal([]byte(want), []byte(st.Browser)) {
		s.log.Warn("external sign-in: the state is not this browser's", "remote", r.Remote)
		return s.message(400, b, "Sign-in expired", "", "",
			"This sign-in was started in another browser, or its page is too old. Go back to the application and sign in again.")
	}
	params, err := url.ParseQuery(st.Authorize)
	if err != nil {
		return s.message(400, b, "Sign-in cannot continue", "", "", "The application's sign-in request could not be read.")
	}
	// A new browser id at sign-in, as after a password (session fixation).
	nb := browserOf(&bus.Request{})
	now := time.Now()
	bs := &browserSession{User: userRef, AuthTime: now.Unix(), Start: now.UnixMilli(), Method: authExternal}
	v, err := json.Marshal(bs)
	if err != nil {
		return nil, err
	}
	if _, err := s.browsers.Put(ctx, sessionKey(nb), v); err != nil {
		return nil, err
	}
	return &bus.Response{Status: 302, Header: map[string]string{
		"Location": s.cfg.BaseURL + "oauth2/authorize?" + params.Encode(), "Set-Cookie": s.setCookie(nb),
		"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
	}}, nil
}
