package gateway

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// unauthorized is the 401 with the challenge Medplum's client expects.
func (g *Gateway) unauthorized() *fhir.Error {
	e := fhir.Unauthorized()
	e.Header = map[string]string{"WWW-Authenticate": `Bearer realm="` + g.cfg.BaseURL + `"`}
	return e
}

// addressNotAllowed is the answer to a request from an address the
// caller's access policy blocks (Medplum's text).
func addressNotAllowed() *fhir.Error {
	e := fhir.Forbidden()
	e.Outcome.Issue[0].Details.Text = "IP address not allowed"
	return e
}

// authenticate verifies the bearer token and that its login and membership
// still count (from the client's address, for the policy's IP rules), and
// returns who is calling.
func (g *Gateway) authenticate(c *fiber.Ctx, remote string) (*bus.Principal, error) {
	h := c.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" || len(tok) > 8192 {
		return nil, g.unauthorized()
	}
	claims, ok := g.tokens.Get(tok)
	if !ok || claims.ExpiresAt.Before(time.Now()) {
		var err error
		if claims, err = g.verifier.Verify(tok); err != nil {
			g.log.Debug("token refused", "err", err)
			return nil, g.unauthorized()
		}
		if !claims.IsAccessToken() {
			return nil, g.unauthorized()
		}
		// Fiber's strings alias its request buffer: the cache key must own its bytes.
		g.tokens.Add(strings.Clone(tok), claims)
	}
	if g.sessions.Revoked(claims.ID) {
		return nil, g.unauthorized()
	}
	login, mid, m, err := g.sessions.Lookup(c.UserContext(), claims.LoginID)
	if err != nil {
		return nil, g.unauthorized()
	}
	// The access policy's ipAccessRule, on every request.
	if !m.AllowsAddress(remote) {
		return nil, addressNotAllowed()
	}
	return &bus.Principal{
		LoginID:      claims.LoginID,
		TokenID:      claims.ID,
		User:         login.User,
		Profile:      m.Profile,
		Project:      m.Project,
		Membership:   mid,
		ClientID:     login.Client,
		Scope:        login.Scope,
		Admin:        m.Admin,
		SuperAdmin:   m.SuperAdmin,
		AccessPolicy: m.AccessPolicy,
	}, nil
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
	resp, err := bus.Call(ctx, g.nc, bus.SubjJWKS, &bus.Request{Method: "GET", Path: "/.well-known/jwks.json"})
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
	keys := map[string]*ecdsa.PublicKey{}
	for _, j := range set.Keys {
		if pk, err := j.PublicKey(); err == nil {
			keys[j.Kid] = pk
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
