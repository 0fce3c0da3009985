// Package ratekey says which client an address counts as when requests are
// limited per client: the gateway's rate limit, its WebSocket cap per
// address and the sign-in limiter all count by it, so that a client is
// one client to each of them.
package ratekey

import "net/netip"

// Address is the key an address's requests count under: an IPv4 address
// itself (an IPv4-mapped IPv6 address as IPv4), an IPv6 address by its /64,
// which one client (a home, a host) usually holds whole and can rotate
// through at will. What is not an address counts as itself.
func Address(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	if a = a.Unmap(); a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
