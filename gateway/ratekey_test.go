package gateway

import (
	"net/netip"
	"testing"
	"time"
)

// The rate limit counts an IPv6 client by its /64, as the sign-in limiter
// does: two addresses of one /64 share one budget, another /64 has its own.
func TestRateLimitGroupsIPv6By64(t *testing.T) {
	base, _ := startGatewayWith(t, Config{RequestTimeout: time.Second, AuthRateLimit: 3,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	from := func(addr string) int {
		t.Helper()
		st, _, _ := send(t, "POST", base+"oauth2/token", nil, map[string]string{
			"Content-Type": "application/x-www-form-urlencoded", "X-Forwarded-For": addr})
		return st
	}
	for i, addr := range []string{"2001:db8::1", "2001:db8::2", "2001:db8::ffff:1"} {
		if st := from(addr); st == 429 {
			t.Fatalf("request %d (%s) limited", i, addr)
		}
	}
	if st := from("2001:db8::3"); st != 429 {
		t.Fatalf("a fourth address of the /64: %d, want 429", st)
	}
	if st := from("2001:db8:0:1::1"); st == 429 {
		t.Fatal("another /64 shares the budget")
	}
	if st := from("10.0.0.1"); st == 429 {
		t.Fatal("an IPv4 client shares the budget")
	}
}

// The WebSocket cap per address counts an IPv6 client by its /64.
func TestSocketCountGroupsIPv6By64(t *testing.T) {
	saved := wsMaxSocketsPerAddress
	wsMaxSocketsPerAddress = 1
	t.Cleanup(func() { wsMaxSocketsPerAddress = saved })
	var w wsCount
	w.add("2001:db8::1", 1)
	if w.admits("2001:db8::2") {
		t.Fatal("a second socket from the same /64 is admitted")
	}
	if !w.admits("2001:db8:0:1::1") {
		t.Fatal("a socket from another /64 is refused")
	}
	w.add("::ffff:10.0.0.1", 1)
	if w.admits("10.0.0.1") {
		t.Fatal("an IPv4-mapped address counts apart from its IPv4 form")
	}
	w.add("2001:db8::1", -1)
	if !w.admits("2001:db8::2") {
		t.Fatal("a closed socket still counts for its /64")
	}
}
