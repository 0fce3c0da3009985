package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
)

// refusals decides which refused bearer tokens go to the audit trail: each
// token at most once a minute (a client retrying with an expired token
// makes one event a minute, not one a request), and no more than a few a
// second in all, so that a flood of forged tokens costs the trail little.
// What the bound leaves out is counted and logged.
type refusals struct {
	seen    *lru.Cache[[32]byte, time.Time]
	all     *rate.Limiter
	dropped atomic.Int64
}

const (
	refusalEvery = time.Minute
	refusalRate  = 20 // a second, in all
	refusalBurst = 100
)

func newRefusals() *refusals {
	seen, _ := lru.New[[32]byte, time.Time](16384)
	return &refusals{seen: seen, all: rate.NewLimiter(refusalRate, refusalBurst)}
}

// due reports whether tok's refusal is to be recorded now.
func (r *refusals) due(tok string, now time.Time) bool {
	key := sha256.Sum256([]byte(tok))
	if last, ok := r.seen.Get(key); ok && now.Sub(last) < refusalEvery {
		return false
	}
	if !r.all.AllowN(now, 1) {
		r.dropped.Add(1)
		return false
	}
	r.seen.Add(key, now)
	return true
}

// recordRefused has identity record a refused bearer token: why, and who
// it names (the server's own claims when claims is set, what the token
// claims otherwise). The refusal is answered whatever becomes of this.
func (g *Gateway) recordRefused(ctx context.Context, tok, reason string, claims *auth.Claims, remote string) {
	if !g.refusals.due(tok, time.Now()) {
		return
	}
	rt := bus.RefusedToken{Reason: reason}
	if claims != nil {
		rt.Login, rt.User, rt.TokenID = claims.LoginID, claims.Subject, claims.ID
	} else if len(tok) <= maxTokenLen {
		var c jwt.RegisteredClaims
		if _, _, err := jwt.NewParser().ParseUnverified(tok, &c); err == nil && len(c.Subject) <= 128 {
			rt.Claimed = c.Subject
		}
	}
	body, _ := json.Marshal(rt)
	ctx, cancel := context.WithTimeout(ctx, g.cfg.RequestTimeout)
	defer cancel()
	resp, err := bus.Call(ctx, g.nc, bus.SubjTokenRefused, &bus.Request{Method: "POST", Body: body, Remote: remote, Header: map[string]string{}})
	if err != nil || resp.Status != 200 {
		g.log.Warn("a refused token was not recorded in the audit trail", "err", err)
	}
	if n := g.refusals.dropped.Swap(0); n > 0 {
		g.log.Warn("refused tokens over the trail's bound, not recorded", "count", n)
	}
}
