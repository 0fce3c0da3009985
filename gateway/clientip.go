package gateway

import (
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/pinion-health/pinion/pkg/ratekey"
)

// Proxies are the reverse proxies (an ingress, a load balancer) allowed to
// say who their client is in X-Forwarded-For. Without any, the address of
// the TCP peer is the client's: behind an ingress that would be the
// ingress, so every caller would share one sign-in limit and one set of
// IP rules.
type Proxies []netip.Prefix

func (ps Proxies) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientIP is the address of whoever sent the request: the TCP peer, or,
// when the peer is a trusted proxy, the last address in X-Forwarded-For
// that is not a trusted proxy (the rightmost entries were added by our
// proxies; anything left of the first untrusted one the client wrote
// itself and could be anything).
func (g *Gateway) clientIP(c *fiber.Ctx) string {
	peer, err := netip.ParseAddr(c.Context().RemoteIP().String())
	if err != nil {
		return c.Context().RemoteIP().String()
	}
	peer = peer.Unmap()
	if len(g.cfg.TrustedProxies) == 0 || !g.cfg.TrustedProxies.trusted(peer) {
		return peer.String()
	}
	var hops []string
	for _, v := range c.Request().Header.PeekAll(fiber.HeaderXForwardedFor) {
		hops = append(hops, strings.Split(string(v), ",")...)
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // a garbled entry: trust nothing left of it
		}
		client = a.Unmap()
		if !g.cfg.TrustedProxies.trusted(client) {
			break
		}
	}
	return client.String()
}

// clientKey is the key a client's requests count under in the rate limit:
// its address as ratekey groups it (an IPv6 address by its /64), as the
// sign-in limiter and the WebSocket cap count it, so rotating through one's
// /64 gains nothing.
func (g *Gateway) clientKey(c *fiber.Ctx) string { return ratekey.Address(g.clientIP(c)) }
