package identity

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/store"
)

// The browser pages keep one cookie, a random browser id. Forms carry a
// CSRF token derived from it with a key only the identity service knows
// (HMAC-SHA256), so a form posted from another site, which can neither read
// the cookie nor compute the token, is refused; no server state is needed
// until a person signs in.
const browserCookie = "pinion_browser"

// csrfKeyName is where the CSRF key is kept, shared by identity instances.
const csrfKeyName = "browser-csrf-key"

// browser is what a page request knows about its browser.
type browser struct {
	id    string // the cookie's value
	isNew bool   // no cookie came: the answer must set one
}

// browserOf reads the browser cookie, or makes a new id.
func browserOf(r *bus.Request) browser {
	if v := cookieValue(r.Get("Cookie"), browserCookie); len(v) == 43 { // 32 bytes, base64url
		return browser{id: v}
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return browser{id: base64.RawURLEncoding.EncodeToString(b), isNew: true}
}

// cookieValue finds one cookie in a Cookie header.
func cookieValue(header, name string) string {
	cookies, err := http.ParseCookie(header)
	if err != nil {
		// One malformed cookie (another site's, on a shared host) must not
		// hide ours: read the pairs one by one.
		for _, part := range strings.Split(header, ";") {
			if k, v, ok := strings.Cut(strings.TrimSpace(part), "="); ok && k == name {
				return v
			}
		}
		return ""
	}
	for _, c := range cookies {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

// setCookie is the Set-Cookie header for the browser id: HttpOnly, Lax,
// Secure when the service is reached over https, for a year (it holds no
// rights by itself).
func (s *Service) setCookie(b browser) string {
	c := &http.Cookie{
		Name: browserCookie, Value: b.id, Path: "/", MaxAge: 365 * 24 * 3600,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: strings.HasPrefix(s.cfg.BaseURL, "https:"),
	}
	return c.String()
}

// csrfToken is the token a form of this browser carries.
func (s *Service) csrfToken(ctx context.Context, b browser) (string, error) {
	key, err := s.csrfKey(ctx)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("csrf:" + b.id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)), nil
}

// checkCSRF reports whether a posted token belongs to this browser. A
// browser without the cookie cannot have a good token.
func (s *Service) checkCSRF(ctx context.Context, b browser, token string) (bool, error) {
	if b.isNew || token == "" {
		return false, nil
	}
	want, err := s.csrfToken(ctx, b)
	if err != nil {
		return false, err
	}
	return hmac.Equal([]byte(want), []byte(token)), nil
}

// csrfKey loads the key, making it on first use; of two instances making
// it at once, one key wins and both use it.
func (s *Service) csrfKey(ctx context.Context) ([]byte, error) {
	s.csrfMu.Lock()
	defer s.csrfMu.Unlock()
	if s.csrf != nil {
		return s.csrf, nil
	}
	for range 3 {
		var key []byte
		_, found, err := s.secrets.Load(ctx, csrfKeyName, &key)
		if err != nil {
			return nil, err
		}
		if found && len(key) == 32 {
			s.csrf = key
			return key, nil
		}
		key = make([]byte, 32)
		_, _ = rand.Read(key)
		err = s.secrets.Swap(ctx, csrfKeyName, nil, key)
		if err == nil {
			s.csrf = key
			return key, nil
		}
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrExists) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("csrf key: could not load or create it")
}
