// Package egress makes the HTTP clients Pinion uses to reach URLs that
// project members write (subscription rest-hooks, client key sets,
// identity providers): such a URL must not become a way into the network
// Pinion runs in.
package egress

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ErrPrivateAddress refuses a connection to an address inside the network
// Pinion runs in.
var ErrPrivateAddress = errors.New("the endpoint's address is loopback, link-local or private: refused (PINION_EGRESS_ALLOW_PRIVATE allows it)")

// maxSetup bounds connecting and the TLS handshake, however long the
// request may take.
const maxSetup = 10 * time.Second

// Client returns a client for member-written URLs. Unless allowPrivate, the
// address is checked when the connection is made (after DNS, so a name
// that resolves inside cannot get through). Redirects are not followed:
// the first answer is the outcome, and a 3xx is the caller's to refuse.
// timeout bounds each request as a whole.
func Client(allowPrivate bool, timeout time.Duration) *http.Client {
	setup := min(timeout, maxSetup)
	d := &net.Dialer{Timeout: setup}
	if !allowPrivate {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !PublicAddr(ap.Addr()) {
				return ErrPrivateAddress
			}
			return nil
		}
	}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil, // a proxy would dial for us, unchecked
			DialContext:           d.DialContext,
			TLSHandshakeTimeout:   setup,
			MaxIdleConnsPerHost:   8,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: timeout,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// notPublic are ranges that are neither private nor loopback in Go's terms
// but still not the public internet.
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"), // benchmarking
	netip.MustParsePrefix("64:ff9b::/96"),  // NAT64 reaches IPv4 space
}

// PublicAddr reports whether an address is on the public internet: not
// loopback, private, link-local, unspecified or multicast.
func PublicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() {
		return false
	}
	for _, p := range notPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}
