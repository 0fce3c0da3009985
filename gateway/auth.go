package gateway

import (
	"context"
	"crypto/ecdsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
)

// unauthorized is the 401 with the challenge Medplum's client expects, for
// a request that brought no usable credentials.
func (g *Gateway) unauthorized() *fhir.Error {
	e := fhir.Unauthorized()
	e.Header = map[string]string{"WWW-Authenticate": `Bearer realm="` + g.cfg.BaseURL + `"`}
	return e
}

// invalidToken is the 401 for a bearer token that was refused (forged,
// expired, revoked, not an access token, its login ended): RFC 6750 §3.1
// names the error, so a client knows to get a new token rather than ask
// the person again for nothing.
func (g *Gateway) invalidToken() *fhir.Error {
	e := fhir.Unauthorized()
	e.Header = map[string]string{"WWW-Authenticate": `Bearer realm="` + g.cfg.BaseURL + `", error="invalid_token"`}
	return e
}

// authenticate verifies the caller's credentials — a bearer token, or a
// client's id and secret by HTTP Basic as Medplum accepts them — and that
// its login and membership still count (from the client's address, for
// the policy's IP rules), and returns who is calling.
func (g *Gateway) authenticate(c *fiber.Ctx, remote string) (*bus.Principal, error) {
	h := c.Get("Authorization")
	if enc, ok := strings.CutPrefix(h, "Basic "); ok {
		loginID, err := g.basicLogin(c, enc, remote)
		if err != nil {
			return nil, err
		}
		return g.principal(c.UserContext(), loginID, "", remote)
	}
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return nil, g.unauthorized()
	}
	return g.bearer(c.UserContext(), tok, remote)
}

// bearer verifies an access token and that its login still counts.
func (g *Gateway) bearer(ctx context.Context, tok, remote string) (*bus.Principal, error) {
	if tok == "" {
		return nil, g.unauthorized()
	}
	claims, ok := g.tokens.Get(tok)
	if !ok || claims.ExpiresAt.Before(time.Now()) {
		var err error
		if claims, err = g.verify(tok); err != nil {
			g.log.Debug("token refused", "err", err)
			g.recordRefused(ctx, tok, err.Error(), nil, remote)
			return nil, g.invalidToken()
		}
		if !claims.IsAccessToken() {
			g.recordRefused(ctx, tok, "not an access token", claims, remote)
			return nil, g.invalidToken()
		}
		// Fiber's strings alias its request buffer: the cache key must own its bytes.
		g.tokens.Add(strings.Clone(tok), claims)
	}
	if g.sessions.Revoked(claims.ID) {
		g.recordRefused(ctx, tok, "revoked", claims, remote)
		return nil, g.invalidToken()
	}
	p, err := g.principal(ctx, claims.LoginID, claims.ID, remote)
	var fe *fhir.Error
	if errors.As(err, &fe) && strings.Contains(fe.Header["WWW-Authenticate"], "invalid_token") {
		g.recordRefused(ctx, tok, "its sign-in ended", claims, remote)
	}
	if err == nil && claims.Scope != "" {
		// The token's own scope: a client's tokens share one login, each
		// with the scope its request asked for (a user's equal its login's).
		p.Scope = claims.Scope
	}
	return p, err
}

// maxTokenLen bounds a token before its signature is checked.
const maxTokenLen = 8192

// verify checks a token's signature, issuer and expiry.
func (g *Gateway) verify(tok string) (*auth.Claims, error) {
	if len(tok) > maxTokenLen {
		return nil, errors.New("token too long")
	}
	return g.verifier.Verify(tok)
}

// principal is the caller of a login that still counts. The token that
// names an ended login (tokenID set) is an invalid token.
func (g *Gateway) principal(ctx context.Context, loginID, tokenID, remote string) (*bus.Principal, error) {
	login, mid, m, err := g.sessions.Lookup(ctx, loginID)
	if errors.Is(err, session.ErrInactive) {
		g.log.Debug("login refused", "login", loginID, "err", err)
		if tokenID != "" {
			return nil, g.invalidToken()
		}
		return nil, g.unauthorized()
	}
	if err != nil {
		// The session bucket did not answer: not the caller's fault.
		g.log.Error("session lookup", "err", err)
		return nil, fhir.Unavailable("Sessions are unavailable; try again")
	}
	// The access policy's ipAccessRule, on every request.
	if !m.AllowsAddress(remote) {
		return nil, fhir.AddressNotAllowed()
	}
	return &bus.Principal{
		LoginID:      loginID,
		TokenID:      tokenID,
		User:         login.User,
		Profile:      m.Profile,
		Project:      m.Project,
		Membership:   mid,
		ClientID:     login.Client,
		Scope:        login.Scope,
		Admin:        m.Admin,
		SuperAdmin:   m.SuperAdmin,
		AccessPolicy: m.AccessPolicy,
		Patient:      login.Patient(),
	}, nil
}

// basicLogin has the identity service check a client's id and secret
// (base64 "id:secret", as Medplum reads it) with the token endpoint's
// checks, and returns the client's login. Secrets are checked on every
// request, never cached here: a retired secret stops at once.
func (g *Gateway) basicLogin(c *fiber.Ctx, enc, remote string) (string, error) {
	raw, err := base64.StdEncoding.DecodeString(enc)
	if len(enc) > 1024 || err != nil {
		return "", g.unauthorized()
	}
	id, secret, _ := strings.Cut(string(raw), ":")
	if id == "" || secret == "" {
		return "", g.unauthorized()
	}
	body, _ := json.Marshal(bus.BasicAuth{ID: id, Secret: secret})
	ctx, cancel := context.WithTimeout(c.UserContext(), g.cfg.RequestTimeout)
	defer cancel()
	req := &bus.Request{Method: "POST", Body: body, Remote: remote, RequestID: requestIDOf(c), Header: map[string]string{}}
	g.nameApplied(req)
	resp, err := bus.Call(ctx, g.nc, bus.SubjBasic, req)
	if err != nil {
		return "", err
	}
	switch resp.Status {
	case 200:
		var out bus.BasicLogin
		if err := json.Unmarshal(resp.Body, &out); err != nil || out.LoginID == "" {
			return "", fmt.Errorf("basic login answer: %s", resp.Body)
		}
		return out.LoginID, nil
	case 403:
		return "", fhir.AddressNotAllowed()
	case 429:
		return "", fhir.TooManyRequests()
	case 401:
		return "", g.unauthorized()
	default:
		return "", fhir.Unavailable("Service unavailable")
	}
}

// key returns the public key for kid, refetching the JWKS (at most once a
// second) when the kid is new.
func (g *Gateway) key(kid string) *ecdsa.PublicKey {
	g.keysMu.RLock()
	k := g.keys[kid]
	fetched := g.keysFetched
	g.keysMu.RUnlock()
	if k != nil || time.Since(fetched) < time.Second {
		return k
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = g.fetchKeys(ctx)
	g.keysMu.RLock()
	defer g.keysMu.RUnlock()
	return g.keys[kid]
}

func (g *Gateway) fetchKeys(ctx context.Context) error {
	resp, err := bus.Call(ctx, g.nc, bus.SubjectOf("GET", "/.well-known/jwks.json"), &bus.Request{Method: "GET", Path: "/.well-known/jwks.json"})
	g.keysMu.Lock()
	g.keysFetched = time.Now()
	g.keysMu.Unlock()
	if err != nil {
		return err
	}
	var set struct {
		Keys []auth.JWK `json:"keys"`
	}
	if err := json.Unmarshal(resp.Body, &set); err != nil {
		return err
	}
	// Access tokens are ES256: the EC keys only. The RSA key beside them
	// signs ID tokens, which never open the API.
	keys := map[string]*ecdsa.PublicKey{}
	for _, j := range set.Keys {
		if j.Kty != "EC" {
			continue
		}
		if pk, err := j.PublicKey(); err == nil {
			keys[j.Kid] = pk
		} else {
			g.log.Warn("unusable signing key", "kid", j.Kid, "err", err)
		}
	}
	g.keysMu.Lock()
	g.keys = keys
	g.keysMu.Unlock()
	return nil
}

// loadKeys fetches the signing keys at start, retrying until identity answers.
func (g *Gateway) loadKeys(ctx context.Context) {
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := g.fetchKeys(cctx)
		cancel()
		if err == nil {
			g.ready.Store(true)
			return
		}
		g.log.Info("waiting for identity service keys", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}
