package web

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/services/identity/secrets"
)

// The browser pages keep one cookie, a random browser id. Forms carry a
// CSRF token derived from it with a key only the identity service knows
// (HMAC-SHA256), so a form posted from another site, which can neither read
// the cookie nor compute the token, is refused; no server state is needed
// until a person signs in.
const Cookie = "pinion_browser"

// csrfKeyName is where the CSRF key is kept, shared by identity instances.
const csrfKeyName = "browser-csrf-key"

// Browser is what a page request knows about its browser.
type Browser struct {
	ID    string // the cookie's value
	IsNew bool   // no cookie came: the answer must set one
}

// BrowserOf reads the browser cookie, or makes a new id.
func BrowserOf(r *bus.Request) Browser {
	if v := cookieValue(r.Get("Cookie"), Cookie); len(v) == 43 { // 32 bytes, base64url
		return Browser{ID: v}
	}
	return NewBrowser()
}

// NewBrowser is a new browser id: given at sign-in, so that an id planted
// before it (session fixation) is worth nothing after.
func NewBrowser() Browser {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return Browser{ID: base64.RawURLEncoding.EncodeToString(b), IsNew: true}
}

// Key is what the server keeps a browser's state under (its sign-in, a
// pending second factor, a passkey ceremony, an external sign-in it
// started): a digest, so the cookie itself is never stored.
func (b Browser) Key() string {
	d := sha256.Sum256([]byte("browser-session:" + b.ID))
	return hex.EncodeToString(d[:])
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

// SetCookie is the Set-Cookie header for the browser id: HttpOnly, Lax,
// Secure when the service is reached over https, for a year (it holds no
// rights by itself).
func (p *Pages) SetCookie(b Browser) string {
	c := &http.Cookie{
		Name: Cookie, Value: b.ID, Path: "/", MaxAge: 365 * 24 * 3600,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: strings.HasPrefix(p.baseURL, "https:"),
	}
	return c.String()
}

// CSRFToken is the token a form of this browser carries.
func (p *Pages) CSRFToken(ctx context.Context, b Browser) (string, error) {
	key, err := p.csrf.get(ctx)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("csrf:" + b.ID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)), nil
}

// CheckCSRF reports whether a posted token belongs to this browser. A
// browser without the cookie cannot have a good token.
func (p *Pages) CheckCSRF(ctx context.Context, b Browser, token string) (bool, error) {
	if b.IsNew || token == "" {
		return false, nil
	}
	want, err := p.CSRFToken(ctx, b)
	if err != nil {
		return false, err
	}
	return hmac.Equal([]byte(want), []byte(token)), nil
}

// csrfKey is the CSRF key, loaded once.
type csrfKey struct {
	secrets *secrets.Store
	mu      sync.Mutex
	key     []byte
}

// get loads the key, making it on first use; of two instances making it
// at once, one key wins and both use it.
func (c *csrfKey) get(ctx context.Context) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.key != nil {
		return c.key, nil
	}
	for range 3 {
		var key []byte
		_, found, err := c.secrets.Load(ctx, csrfKeyName, &key)
		if err != nil {
			return nil, err
		}
		if found && len(key) == 32 {
			c.key = key
			return key, nil
		}
		key = make([]byte, 32)
		_, _ = rand.Read(key)
		err = c.secrets.Swap(ctx, csrfKeyName, nil, key)
		if err == nil {
			c.key = key
			return key, nil
		}
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrExists) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("csrf key: could not load or create it")
}
